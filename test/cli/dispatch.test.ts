import t from 'tap'
import { dispatch, groupNames, nextWords, resolveTopic } from '../../cli/dispatch.ts'
import { usageText } from '../../cli/help.ts'
import { UsageError, type Command } from '../../cli/commands/command.ts'

const noop = async () => ({ json: null, human: '' })
const examples = [{ what: 'it', run: 'agentctl it' }]
const commands: Record<string, Command> = {
  status: { summary: 'status', examples, run: noop },
  'sim reward': {
    summary: 'reward simulator',
    usage: '--trace F [--policy P]',
    options: { trace: { type: 'string', value: 'F', description: 'trace' }, policy: { type: 'string', value: 'P', description: 'policy' } },
    examples,
    run: noop,
  },
  'sim trace reward': { summary: 'reward trace', options: { tasks: { type: 'string', description: 'tasks' } }, examples, run: noop },
  'inspect residency': { summary: 'residency', options: { prefix: { type: 'string', description: 'prefix' } }, maxPositionals: 1, examples, run: noop },
  'jobs show': { summary: 'one job', usage: 'ID', arguments: [{ name: 'ID', description: 'the job' }], examples, run: noop },
}

t.test('one- and two-word commands with their flags; global flags anywhere', async t => {
  t.match(dispatch(['status'], commands), { kind: 'run', name: 'status', json: false, positionals: [] })
  const sim = dispatch(['--socket', '/s.sock', 'sim', 'reward', '--trace', 'f.json', '--json'], commands)
  t.match(sim, { kind: 'run', name: 'sim reward', socket: '/s.sock', json: true, values: { trace: 'f.json' } })
  t.match(dispatch(['sim', '--json', 'reward', '--trace=f.json'], commands), { name: 'sim reward', json: true, values: { trace: 'f.json' } })
  t.match(dispatch(['inspect', 'residency', 'job1', '--prefix', 'p'], commands), { positionals: ['job1'] })
  t.match(dispatch(['jobs', 'show', 'j1'], commands), { positionals: ['j1'] }, 'as many arguments as it declares')
  t.same(dispatch([], commands), { kind: 'incomplete', topic: '' }, 'no command: the usage, as an error')
})

t.test('three-word commands: the longest known name wins', async t => {
  t.match(dispatch(['sim', 'trace', 'reward', '--tasks', '6'], commands), { name: 'sim trace reward', values: { tasks: '6' }, positionals: [] })
  t.throws(() => dispatch(['sim', 'trace', 'rewrd'], commands), /unknown command "sim trace rewrd"; did you mean "sim trace reward"\?/)
})

t.test('groups: alone they are incomplete, with --help they are the topic', async t => {
  t.same([...groupNames(commands)].sort(), ['inspect', 'jobs', 'sim', 'sim trace'])
  t.same(nextWords('sim', commands), ['reward', 'trace'])
  t.same(dispatch(['sim'], commands), { kind: 'incomplete', topic: 'sim' })
  t.same(dispatch(['sim', 'trace', '--json'], commands), { kind: 'incomplete', topic: 'sim trace' })
  t.same(dispatch(['sim', '--help'], commands), { kind: 'help', topic: 'sim', json: false })
  t.same(dispatch(['sim', 'reward', '--tracee', 'x', '-h'], commands), { kind: 'help', topic: 'sim reward', json: false }, 'help wins over a flag mistake')
  t.same(dispatch(['--help'], commands), { kind: 'help', topic: '', json: false })
  t.throws(() => dispatch(['sim', '--trace', 'x'], commands), new UsageError('"sim" needs a command before its flags: reward, trace', { group: 'sim' }))
  t.equal(resolveTopic(['sim', 'trace'], commands), 'sim trace')
  t.throws(() => resolveTopic(['sim', 'rewrd'], commands), /unknown command "sim rewrd"; did you mean "sim reward"\?/)
})

t.test('--version only before any command word', async t => {
  t.same(dispatch(['--version'], commands), { kind: 'version', json: false })
  t.same(dispatch(['--json', '--version'], commands), { kind: 'version', json: true })
  t.throws(() => dispatch(['status', '--version'], commands), /unknown flag --version for "status"/)
})

t.test('usage errors name the mistake, with a hint, and what they are about', async t => {
  t.throws(() => dispatch(['stauts'], commands), new UsageError('unknown command "stauts"; did you mean "status"?', { commandsOf: '' }))
  t.throws(() => dispatch(['sim', 'rewrd'], commands), { message: /did you mean "sim reward"\?/, subject: { commandsOf: 'sim' } })
  t.throws(() => dispatch(['sim', 'reward', '--tracee', 'x'], commands), { message: 'unknown flag --tracee for "sim reward"; did you mean --trace?', subject: { command: 'sim reward' } })
  t.throws(() => dispatch(['sim', 'reward', '--trace'], commands), /^--trace needs a value \(--trace F\)$/)
  t.throws(() => dispatch(['sim', 'reward', '--trace', '--policy', 'p'], commands), /^--trace needs a value/)
  t.throws(() => dispatch(['status', '--json=yes'], commands), /^--json takes no value$/)
  t.throws(() => dispatch(['status', 'extra'], commands), /^unexpected argument "extra" for "status"$/)
  t.throws(() => dispatch(['status', '--prefix', 'x'], commands), /unknown flag --prefix for "status"/, 'flags of other commands are refused')
  t.throws(() => dispatch(['--jsn'], commands), { message: 'unknown flag --jsn; did you mean --json?', subject: { group: '' } })
})

t.test('usage lists every command with its flags', async t => {
  const text = usageText(commands)
  t.match(text, /sim reward\s+reward simulator\n\s+sim reward --trace F \[--policy P\]/)
  t.match(text, /--socket PATH/)
  t.match(text, /--version/)
})

t.test('the README lists exactly the commands agentctl has (generated from the registry)', async t => {
  const { readFileSync } = await import('node:fs')
  const { commands: registry } = await import('../../cli/command-table.ts')
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')
  const block = /<!-- agentctl-usage:start -->\n```\n([\s\S]*?)\n```\n<!-- agentctl-usage:end -->/.exec(readme)
  t.ok(block, 'README has the agentctl-usage block')
  t.equal(block?.[1], usageText(registry), 'README block is current (regenerate with: npx agentctl --help)')
})
