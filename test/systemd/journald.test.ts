// Log priorities for journald: when JOURNAL_STREAM names the agent's stdout (as systemd sets it for
// StandardOutput=journal) every line starts with its sd-daemon priority; anywhere else lines are
// plain JSON. The agent's stdout here is a file whose device and inode the test knows; the last test
// goes through a real journald when one runs on this machine.
import t, { type Test } from 'tap'
import { execFile, spawn } from 'node:child_process'
import { closeSync, existsSync, fstatSync, openSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { randomBytes } from 'node:crypto'
import { promisify } from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'
import { agentMain, spawnAgent, tempDir, withoutAgentdEnv } from '../helpers/agent-process.ts'
import { agentEnvironment, agentNodeFlags } from '../../agent/node-flags.ts'

t.setTimeout(240_000)

const run = promisify(execFile)

/** JOURNAL_STREAM's value for a file: "<device>:<inode>" in decimal. */
function journalStreamOf (file: string): string {
  const st = statSync(file, { bigint: true })
  return `${st.dev}:${st.ino}`
}

interface Line { prefix: string, level: number, msg: string }

/** Splits each output line into its priority prefix ('' when none) and the pino record after it. */
function parseLines (output: string): Line[] {
  return output.split('\n').filter(l => l !== '').map(l => {
    const m = /^(<\d>)?(\{.*)$/.exec(l)
    if (m === null) throw new Error(`not a JSON log line: ${l}`)
    const record = JSON.parse(m[2]!) as { level: number, msg: string }
    return { prefix: m[1] ?? '', level: record.level, msg: record.msg }
  })
}

/**
 * A dev agent without its native addon (a failed subsystem: an error line, the
 * subsystems that require it skipped: warnings) at debug level (a request
 * line), stopped with SIGTERM; returns its output lines.
 */
async function runAgent (t: Test, env: NodeJS.ProcessEnv, outputFile: string): Promise<Line[]> {
  const stateDir = tempDir(t)
  const agent = await spawnAgent(t, {
    stateDir,
    outputFile,
    args: ['--dev', '--state-dir', stateDir, '--log-level', 'debug'],
    env: { AGENTD_NATIVE_ADDON: '/nonexistent/agentd_native.node', ...env },
  })
  await agent.client.status()
  agent.proc.kill('SIGTERM')
  t.same(await agent.exited, { code: 0, signal: null }, 'stops cleanly')
  return parseLines(agent.output())
}

const byMsg = (lines: Line[], msg: string, level?: number): Line | undefined => lines.find(l => l.msg === msg && (level === undefined || l.level === level))

t.test('JOURNAL_STREAM naming stdout: every line carries the priority of its level', async t => {
  const file = join(tempDir(t), 'journal')
  closeSync(openSync(file, 'w'))
  const lines = await runAgent(t, { JOURNAL_STREAM: journalStreamOf(file) }, file)
  const expected: Record<number, string> = { 10: '<7>', 20: '<7>', 30: '<6>', 40: '<4>', 50: '<3>', 60: '<2>' }
  t.same(lines.filter(l => l.prefix !== expected[l.level]), [], 'each line\'s prefix is its level\'s priority')
  t.equal(byMsg(lines, 'subsystem failed')?.prefix, '<3>', 'an error is <3>')
  // A subsystem skipped for want of the addon warns; one disabled by config (metrics) only informs.
  t.equal(byMsg(lines, 'subsystem skipped', 40)?.prefix, '<4>', 'a warning is <4>')
  t.equal(byMsg(lines, 'agentd ready')?.prefix, '<6>', 'info is <6>')
  t.equal(byMsg(lines, 'request')?.prefix, '<7>', 'debug is <7>')
})

t.test('no JOURNAL_STREAM, or one that names another file (inherited from a parent): plain JSON', async t => {
  const dir = tempDir(t)
  const other = join(dir, 'elsewhere')
  closeSync(openSync(other, 'w'))
  for (const [what, env] of [['unset', {}], ['another file', { JOURNAL_STREAM: journalStreamOf(other) }]] as const) {
    const file = join(dir, `out-${what.replace(' ', '-')}`)
    const lines = await runAgent(t, { JOURNAL_STREAM: undefined, ...env }, file)
    t.ok(byMsg(lines, 'subsystem failed') !== undefined && byMsg(lines, 'agentd ready') !== undefined, `${what}: the same lines were logged`)
    t.same(lines.filter(l => l.prefix !== ''), [], `${what}: no line has a priority prefix`)
  }
})

t.test('a crash is a fatal (<2>) line before Node\'s stack trace', async t => {
  const dir = tempDir(t)
  const file = join(dir, 'journal')
  closeSync(openSync(file, 'w'))
  // An exception nothing catches, thrown when the test asks for it.
  const crash = join(dir, 'crash-on-sigusr2.mjs')
  writeFileSync(crash, 'process.on(\'SIGUSR2\', () => { throw new Error(\'injected crash\') })\n')
  const agent = await spawnAgent(t, {
    stateDir: dir,
    outputFile: file,
    env: { JOURNAL_STREAM: journalStreamOf(file), NODE_OPTIONS: `--import=${pathToFileURL(crash).href}` },
  })
  agent.proc.kill('SIGUSR2')
  t.same(await agent.exited, { code: 1, signal: null }, 'exits 1, as Node does on an uncaught exception')
  const output = agent.output()
  t.match(output, /^<2>\{"level":60,.*"err":\{"type":"Error","message":"injected crash".*"origin":"uncaughtException","msg":"agentd crashed"\}$/m)
  t.ok(output.indexOf('"msg":"agentd crashed"') < output.indexOf('Error: injected crash\n'), 'logged before the stack trace')
})

t.test('a configuration error on the journal stream: every line of it is an error (<3>), exit 78', async t => {
  const dir = tempDir(t)
  const config = join(dir, 'agentd.toml')
  writeFileSync(config, '[log]\nlevel = "loud"\nfoo = 1\n')
  const file = join(dir, 'journal')
  const fd = openSync(file, 'w')
  const proc = spawn(process.execPath, [agentMain, '--config', config], {
    env: { ...withoutAgentdEnv(process.env), JOURNAL_STREAM: journalStreamOf(file) },
    stdio: ['ignore', fd, fd],
  })
  closeSync(fd)
  const code = await new Promise(resolve => proc.once('exit', resolve))
  t.equal(code, 78)
  const lines = readFileSync(file, 'utf8').split('\n').filter(l => l !== '')
  t.equal(lines.length, 3, `the message and one line per issue: ${JSON.stringify(lines)}`)
  t.same(lines.filter(l => !l.startsWith('<3>')), [], 'each line starts with <3>')
  t.match(lines[0], /^<3>agentd: invalid configuration/)
})

// End to end through journald's stream socket, as systemd connects a service's stdout (what
// sd_journal_stream_fd(3) does: a header, then log lines; level prefixes parsed).
const journalSocket = '/run/systemd/journal/stdout'
async function journalSkip (): Promise<string | false> {
  if (!existsSync(journalSocket)) return `no journald on this machine (${journalSocket} absent)`
  try { await run('journalctl', ['--version']) } catch { return 'journalctl not installed' }
  return false
}

t.test('through journald: journalctl -p err shows the error, not the info lines', { skip: await journalSkip() }, async t => {
  const identifier = `agentd-test-${randomBytes(4).toString('hex')}`
  const socket = await new Promise<Socket>((resolve, reject) => {
    const s = connect(journalSocket, () => resolve(s))
    s.once('error', reject)
  })
  t.teardown(() => socket.destroy())
  // identifier, unit id, default priority, level prefix, forward to syslog, kmsg, console
  socket.write(`${identifier}\n\n6\n1\n0\n0\n0\n`)
  const fd = (socket as unknown as { _handle: { fd: number } })._handle.fd
  const st = fstatSync(fd, { bigint: true })
  const stateDir = tempDir(t)
  const proc = spawn(process.execPath, [...agentNodeFlags, agentMain, '--dev', '--state-dir', stateDir, '--exit-with-stdin'], {
    env: { ...agentEnvironment, ...withoutAgentdEnv(process.env), AGENTD_NATIVE_ADDON: '/nonexistent/agentd_native.node', JOURNAL_STREAM: `${st.dev}:${st.ino}` },
    stdio: ['pipe', socket, socket],
  })
  const exited = new Promise(resolve => proc.once('exit', resolve))
  t.teardown(async () => { if (proc.exitCode === null && proc.signalCode === null) { proc.kill('SIGKILL'); await exited } })

  const entries = async (priority: string): Promise<Array<{ PRIORITY: string, MESSAGE: string }>> => {
    const { stdout } = await run('journalctl', ['--no-pager', '-o', 'json', '-t', identifier, '-p', priority])
    return stdout.split('\n').filter(l => l !== '').map(l => JSON.parse(l) as { PRIORITY: string, MESSAGE: string })
  }
  const began = Date.now()
  let all = await entries('debug')
  while (!all.some(e => e.MESSAGE.includes('"msg":"agentd ready"'))) {
    if (Date.now() - began > 60_000) throw new Error(`agent not ready in the journal after 60 s: ${JSON.stringify(all)}`)
    await sleep(200)
    all = await entries('debug')
  }
  proc.kill('SIGTERM')
  await exited
  const errors = await entries('err')
  t.ok(errors.some(e => e.PRIORITY === '3' && e.MESSAGE.startsWith('{') && e.MESSAGE.includes('"msg":"subsystem failed"')), 'the error is PRIORITY=3, its message the JSON without the prefix')
  t.same(errors.filter(e => Number(e.PRIORITY) > 3), [], 'journalctl -p err shows nothing less severe')
  t.ok(all.some(e => e.PRIORITY === '6' && e.MESSAGE.startsWith('{"level":30,') && e.MESSAGE.includes('"msg":"agentd ready"')), 'info is PRIORITY=6')
  t.ok(all.some(e => e.PRIORITY === '4' && e.MESSAGE.includes('"msg":"subsystem skipped"')), 'a warning is PRIORITY=4')
})
