import t from 'tap'
import { dispatch, usageText } from '../../cli/dispatch.ts'
import { UsageError, type Command } from '../../cli/commands/command.ts'

const noop = async () => ({ json: null, human: '' })
const commands: Record<string, Command> = {
  status: { summary: 'status', run: noop },
  'sim reward': {
    summary: 'reward simulator',
    usage: '--trace F [--policy P]',
    options: { trace: { type: 'string' }, policy: { type: 'string' } },
    run: noop,
  },
  'sim trace reward': { summary: 'reward trace', options: { tasks: { type: 'string' } }, run: noop },
  'inspect residency': { summary: 'residency', options: { prefix: { type: 'string' } }, maxPositionals: 1, run: noop },
}

t.test('one- and two-word commands with their flags; global flags anywhere', async t => {
  t.match(dispatch(['status'], commands), { name: 'status', json: false, positionals: [] })
  const sim = dispatch(['--socket', '/s.sock', 'sim', 'reward', '--trace', 'f.json', '--json'], commands)
  t.match(sim, { name: 'sim reward', socket: '/s.sock', json: true, values: { trace: 'f.json' } })
  t.same(dispatch(['inspect', 'residency', 'job1', '--prefix', 'p'], commands)?.positionals, ['job1'])
  t.equal(dispatch([], commands), undefined, 'no command: usage')
})

t.test('three-word commands: the longest known name wins', async t => {
  t.match(dispatch(['sim', 'trace', 'reward', '--tasks', '6'], commands), { name: 'sim trace reward', values: { tasks: '6' }, positionals: [] })
  t.throws(() => dispatch(['sim', 'trace', 'rewrd'], commands), /did you mean "sim trace reward"\?/)
})

t.test('usage errors carry hints', async t => {
  t.throws(() => dispatch(['stauts'], commands), new UsageError('unknown command "stauts"; did you mean "status"?'))
  t.throws(() => dispatch(['sim', 'rewrd'], commands), /did you mean "sim reward"\?/)
  t.throws(() => dispatch(['sim', 'reward', '--tracee', 'x'], commands), /sim reward: Unknown option '--tracee'/)
  t.throws(() => dispatch(['status', 'extra'], commands), /status: unexpected argument "extra"/)
  t.throws(() => dispatch(['status', '--prefix', 'x'], commands), /Unknown option '--prefix'/, 'flags of other commands are refused')
})

t.test('usage lists every command with its flags', async t => {
  const text = usageText(commands)
  t.match(text, /sim reward\s+reward simulator\n\s+sim reward --trace F \[--policy P\]/)
  t.match(text, /--socket PATH/)
})

t.test('the README lists exactly the commands agentctl has (generated from the registry)', async t => {
  const { readFileSync } = await import('node:fs')
  const { commands: registry } = await import('../../cli/commands/index.ts')
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')
  const block = /<!-- agentctl-usage:start -->\n```\n([\s\S]*?)\n```\n<!-- agentctl-usage:end -->/.exec(readme)
  t.ok(block, 'README has the agentctl-usage block')
  t.equal(block?.[1], usageText(registry), 'README block is current (regenerate with: npx agentctl --help)')
})
