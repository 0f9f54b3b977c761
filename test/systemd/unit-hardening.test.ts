// The unit's sandbox: `systemd-analyze security --offline=yes` must not rate it worse than it does
// now, every exposure it still reports must be one systemd/agentd.service explains, and what the
// agent needs must stay reachable (GPU and RDMA devices, memlock, W+X memory for V8's JIT).
import t from 'tap'
import { execFile } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { repoRoot, tempDir } from '../helpers/agent-process.ts'

const run = promisify(execFile)
const unitFile = join(repoRoot, 'systemd/agentd.service')
const unit = readFileSync(unitFile, 'utf8')

/**
 * The exposure systemd 252 computes for the unit today. Lower it when the unit
 * gets stricter; raising it needs a reason written next to the setting.
 */
const exposureCeiling = 1.9

/**
 * The checks systemd-analyze may still fail, each for a reason the unit states
 * (in "Deliberately NOT set" or next to the setting). A check that newer
 * systemd versions add shows up here as unexplained: judge it, then list it or
 * harden the unit.
 */
const explainedExposures = new Set([
  'PrivateNetwork=', 'IPAddressDeny=', 'PrivateUsers=', 'ProtectProc=', 'ProcSubset=', 'RemoveIPC=',
  'RootDirectory=/RootImage=', 'PrivateDevices=', 'DeviceAllow=', 'MemoryDenyWriteExecute=', 'UMask=',
  'RestrictAddressFamilies=~AF_(INET|INET6)', 'RestrictAddressFamilies=~AF_UNIX', 'RestrictAddressFamilies=~AF_NETLINK',
  'SystemCallFilter=~@privileged', 'SystemCallFilter=~@resources',
])

/** Values of every `Key=` line of the unit, in order. */
function settings (key: string): string[] {
  return [...unit.matchAll(new RegExp(`^${key}=(.*)$`, 'gm'))].map(m => m[1]!)
}

async function analyzeSkip (): Promise<string | false> {
  try {
    await run('systemd-analyze', ['--version'])
  } catch {
    return 'systemd-analyze not installed (Debian package systemd)'
  }
  try {
    await run('systemd-analyze', ['security', '--offline=yes', '--no-pager', unitFile])
  } catch (err) {
    const e = err as { stderr?: string, stdout?: string }
    if (!/Overall exposure level/.test(e.stdout ?? '')) return `systemd-analyze security --offline=yes cannot run here (systemd >= 250 needed): ${(e.stderr ?? '').trim().split('\n')[0]}`
  }
  return false
}

t.test('systemd-analyze security: exposure at most the ceiling, every remaining exposure explained', { skip: await analyzeSkip() }, async t => {
  const { stdout } = await run('systemd-analyze', ['security', '--offline=yes', '--no-pager', unitFile])
  const overall = /Overall exposure level for agentd\.service: (\d+\.\d) (\S+)/.exec(stdout)
  t.ok(overall !== null, overall === null ? `no overall exposure line in:\n${stdout}` : 'overall exposure line')
  const exposure = Number(overall![1])
  t.comment(`exposure ${exposure} ${overall![2]} (ceiling ${exposureCeiling})`)
  t.ok(exposure <= exposureCeiling, `exposure ${exposure} <= ${exposureCeiling}`)
  const failed = stdout.split('\n').filter(l => l.startsWith('✗')).map(l => l.slice(2).split(/\s+/)[0]!)
  t.same(failed.filter(name => !explainedExposures.has(name)), [], 'no exposure the unit does not explain')
})

t.test('what the agent needs stays reachable', async t => {
  t.same(settings('DevicePolicy'), ['closed'])
  const allowed = settings('DeviceAllow')
  for (const device of ['char-nvidia-frontend rw', 'char-nvidia-uvm rw', 'char-nvidia-caps r', 'char-infiniband_verbs rw', '/dev/infiniband/rdma_cm rw']) {
    t.ok(allowed.includes(device), `DeviceAllow=${device}`)
  }
  t.same(settings('PrivateDevices'), [], 'no PrivateDevices (its /dev has no GPU nodes)')
  t.same(settings('MemoryDenyWriteExecute'), [], 'no MemoryDenyWriteExecute (V8\'s JIT)')
  t.same(settings('LimitMEMLOCK'), ['infinity'], 'the pinned host pool can be mlock()ed')
  t.same(settings('CapabilityBoundingSet'), [''], 'no capabilities, CAP_IPC_LOCK included (an unlimited RLIMIT_MEMLOCK suffices)')
  t.same(settings('AmbientCapabilities'), [])
  t.same(settings('RestrictAddressFamilies'), ['AF_UNIX AF_INET AF_INET6 AF_NETLINK'])
  const filter = settings('SystemCallFilter').join(' ').split(' ')
  t.ok(filter.includes('@system-service') && filter.includes('@pkey'), 'allow list: @system-service and V8\'s memory protection keys')
  t.same(settings('SystemCallErrorNumber'), ['EPERM'], 'a filtered call fails, it does not kill the agent')
  t.same(settings('ProtectProc'), [], 'clients\' /proc/<pid>/stat stays readable (device lock)')
  t.same(settings('ProcSubset'), [], '/proc/meminfo and /proc/driver/nvidia stay readable')
  t.same(settings('SyslogLevelPrefix'), ['yes'], 'journald reads the agent\'s <N> priority prefixes')
  t.same(settings('StandardOutput'), ['journal'], 'stdout is the journal stream (JOURNAL_STREAM is set)')
})

t.test('systemd-analyze verify: no errors or warnings', { skip: await analyzeSkip() }, async t => {
  // install.test.ts verifies the unit as installed; this runs without a build: the same unit with an
  // ExecStart that exists here.
  const dir = tempDir(t)
  const copy = join(dir, 'agentd.service')
  writeFileSync(copy, unit.replace(/^ExecStart=\S+/m, 'ExecStart=/bin/true'))
  const result = await run('systemd-analyze', ['verify', '--no-pager', copy]).then(
    r => ({ code: 0, stderr: r.stderr }),
    (err: { code: number, stderr: string }) => ({ code: err.code, stderr: err.stderr }),
  )
  t.equal(result.code, 0, result.stderr)
  t.equal(result.stderr.trim(), '', 'no warnings either')
})
