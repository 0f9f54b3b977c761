// agentctl's help, version and usage errors, as git, kubectl and consul do them: the real CLI, spawned.
// Asked-for output (--help, help, --version) goes to stdout with status 0; a command line that names no
// runnable command or misuses one gets status 2 and stderr.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { agentctlMain, runNode, tempDir } from '../helpers/agent-process.ts'

const packageVersion = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version
const ctl = (...args: string[]): ReturnType<typeof runNode> => runNode(agentctlMain, args)
const lines = (text: string): string[] => text.trimEnd().split('\n')

t.test('--version prints package.json\'s version and exits 0, without an agent', async t => {
  const res = await ctl('--version')
  t.same(res, { code: 0, stdout: `agentctl ${packageVersion}\n`, stderr: '' })
  const json = await ctl('--json', '--version')
  t.same(JSON.parse(json.stdout), { agentctl: packageVersion })
  // `version` also asks the agent; with none at the socket it still exits 0.
  const both = await ctl('--socket', join(tempDir(t), 'none.sock'), 'version')
  t.equal(both.code, 0, both.stderr)
  t.match(both.stdout, new RegExp(`^agentctl ${packageVersion.replaceAll('.', '\\.')}\nagentd +unknown`))
})

t.test('a command\'s help: its usage, every flag with a line of text, examples; not the whole usage', async t => {
  const asked = await ctl('help', 'weights', 'publish')
  t.equal(asked.code, 0, asked.stderr)
  t.equal(asked.stderr, '')
  const text = asked.stdout
  t.match(text, /^usage: agentctl weights publish --model M /m)
  for (const flag of ['--model M', '--version N', '--from-safetensors F', '--from-keys PREFIX', '--from-region NAME', '--meta KEY=VALUE']) {
    t.match(text, new RegExp(`^ {2}${flag.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} +\\S.*$`, 'm'), `${flag} is described`)
  }
  t.match(text, /^examples:\n(?: {2}#.*\n)? {2}agentctl weights publish /m)
  t.notMatch(text, /jobs submit|sim placement/, 'no other command')
  t.ok(lines(text).length < 30, `${lines(text).length} lines`)

  for (const args of [['weights', 'publish', '--help'], ['weights', 'publish', '-h'], ['--socket', '/x', 'weights', 'publish', '--model', 'm', '--help']]) {
    t.same(await ctl(...args), { code: 0, stdout: text, stderr: '' }, args.join(' '))
  }
  const status = await ctl('status', '--help')
  t.equal(status.code, 0)
  t.match(status.stdout, /^usage: agentctl status$/m)
  t.match(status.stdout, /^examples:\n/m)
  const positional = await ctl('help', 'jobs', 'show')
  t.match(positional.stdout, /^usage: agentctl jobs show ID$/m)
  t.match(positional.stdout, /^arguments:\n {2}ID +\S/m)
})

t.test('a group lists its commands with one line each: asked for, status 0 on stdout; bare, status 2 on stderr', async t => {
  const asked = await ctl('help', 'weights')
  t.equal(asked.code, 0, asked.stderr)
  t.match(asked.stdout, /^usage: agentctl weights <command> \[flags\]$/m)
  for (const sub of ['publish', 'pull', 'list', 'retire']) t.match(asked.stdout, new RegExp(`^ {2}${sub} +\\S`, 'm'), sub)
  t.notMatch(asked.stdout, /jobs submit|--from-safetensors/)
  t.match(asked.stdout, /run "agentctl help weights <command>"/)
  t.same(await ctl('weights', '--help'), asked)

  const bare = await ctl('weights')
  t.same(bare, { code: 2, stdout: '', stderr: asked.stdout }, 'a bare group: the same listing, as a usage error')

  const sim = await ctl('help', 'sim')
  for (const sub of ['reward', 'placement', 'trace reward', 'trace placement']) t.match(sim.stdout, new RegExp(`^ {2}${sub} +\\S`, 'm'), sub)
  const trace = await ctl('sim', 'trace', '--help')
  t.equal(trace.code, 0)
  t.match(trace.stdout, /^usage: agentctl sim trace <command> \[flags\]$/m)
  t.match(trace.stdout, /^ {2}placement +\S/m)
  const jobs = await ctl('jobs')
  t.equal(jobs.code, 2)
  for (const sub of ['submit', 'list', 'show', 'op', 'top']) t.match(jobs.stderr, new RegExp(`^ {2}${sub} +\\S`, 'm'), sub)
})

t.test('the full usage stays: agentctl help, --help; bare agentctl is a usage error', async t => {
  const help = await ctl('help')
  t.equal(help.code, 0)
  for (const name of ['status', 'weights publish', 'sim trace placement', 'jobs op', 'help', 'completion']) t.match(help.stdout, new RegExp(`^ {2}${name} +\\S`, 'm'), name)
  t.match(help.stdout, /--version/)
  t.same(await ctl('--help'), help)
  t.same(await ctl(), { code: 2, stdout: '', stderr: help.stdout })
})

t.test('usage errors: at most 5 lines naming the mistake, the right form and where to read more; status 2', async t => {
  const check = async (args: string[], expected: RegExp[]): Promise<void> => {
    const res = await ctl(...args)
    t.equal(res.code, 2, args.join(' '))
    t.equal(res.stdout, '')
    const got = lines(res.stderr)
    t.ok(got.length <= 5, `${got.length} lines: ${res.stderr}`)
    for (const [i, re] of expected.entries()) t.match(got[i], re, `${args.join(' ')}: line ${i + 1}`)
  }
  await check(['weights', 'publish', '--modle', 'qwen'], [
    /^agentctl: unknown flag --modle for "weights publish"; did you mean --model\?$/,
    /^usage: agentctl weights publish --model M \[--version N\] \(--from-safetensors F/,
    /^run "agentctl help weights publish" for more$/,
  ])
  await check(['stauts'], [/^agentctl: unknown command "stauts"; did you mean "status"\?$/, /^run "agentctl help" for the list of commands$/])
  await check(['weights', 'publsh'], [/^agentctl: unknown command "weights publsh"; did you mean "weights publish"\?$/, /^run "agentctl help weights" for its commands$/])
  await check(['help', 'wieghts'], [/^agentctl: unknown command "wieghts"; did you mean "weights"\?$/])
  await check(['weights', 'publish', '--model'], [/^agentctl: --model needs a value \(--model M\)$/, /^usage: agentctl weights publish /])
  await check(['inspect', 'residency', '--watch=yes'], [/^agentctl: --watch takes no value$/, /^usage: agentctl inspect residency /])
  await check(['jobs', 'show', 'a', 'b'], [/^agentctl: unexpected argument "b" for "jobs show"$/, /^usage: agentctl jobs show ID$/])
  await check(['--nope'], [/^agentctl: unknown flag --nope$/, /^usage: agentctl \[--socket PATH\] \[--json\] <command> \[flags\]$/, /^run "agentctl help" for more$/])
  await check(['weights', '--model', 'm'], [/^agentctl: "weights" needs a command before its flags: publish, pull, list, retire$/, /^usage: agentctl weights <command> \[flags\]$/])
  // Raised by the command itself once its flags parsed (a required flag, a bad value): the same form.
  await check(['sim', 'placement', '--trace', 'x.json'], [
    /^agentctl: sim placement: --policy is required \(one of isolated, pack, spread, spread-backfill\)$/,
    /^usage: agentctl sim placement --trace F --policy isolated\|pack\|spread\|spread-backfill/,
    /^run "agentctl help sim placement" for more$/,
  ])
})
