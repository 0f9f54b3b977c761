/**
 * Dev-agent start-up time, start-up CPU, idle RSS and stop time of the agent
 * as installed (its bundle, dist/bundle/agentd.js) against, in the same run and
 * interleaved, the unbundled compiled sources (dist/agent/main.js: the previous
 * way it ran), the bare runtime (`node -e ""` start-to-exit) and, with
 * --baseline, another build's bundle (a previous version: build it in a git
 * worktree and pass its dist/bundle/agentd.js).
 *
 *   node_modules/.bin/node test/bench/startup.bench.ts [runs=7] [--baseline PATH]
 *
 * Start-up = spawn of `agentd --dev` until GET /healthz answers (what a user
 * or systemd waits for). CPU = utime+stime and RSS = VmRSS, after 2 s idle.
 * Stop = SIGTERM until the process has exited (what `systemctl stop` and a
 * restart wait for).
 */
import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { createAgentClient } from '../../agent/client/client.ts'
import { agentEnvironment, agentNodeFlags } from '../../agent/node-flags.ts'
import { builtAgentMain, unbundledAgentMain } from '../helpers/agent-process.ts'
import { processCpuSeconds, processRssBytes } from './bench-stats.ts'

const args = process.argv.slice(2)
const baselineAt = args.indexOf('--baseline')
const baseline = baselineAt >= 0 ? args.splice(baselineAt, 2)[1] : undefined
if (baselineAt >= 0 && baseline === undefined) throw new Error('--baseline needs the path of another build\'s dist/bundle/agentd.js')
const runs = Number(args[0] ?? 7)
const entries: Record<string, string> = { bundle: builtAgentMain, unbundled: unbundledAgentMain, ...(baseline !== undefined ? { baseline } : {}) }

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

interface AgentRun { startMs: number, cpuMs: number, rssBytes: number, stopMs: number }

async function agentOnce (entry: string): Promise<AgentRun> {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-bench-'))
  const began = performance.now()
  const proc = spawn(process.execPath, [...agentNodeFlags, entry, '--dev', '--state-dir', dir, '--log-level', 'warn'], { env: { ...agentEnvironment, ...process.env }, stdio: 'ignore' })
  const client = createAgentClient({ socketPath: join(dir, 'agentd.sock'), timeoutMs: 1000 })
  for (;;) {
    try { await client.health(); break } catch { await sleep(5) }
  }
  const startMs = performance.now() - began
  await sleep(2000)
  const rssBytes = processRssBytes(proc.pid!)
  const cpuMs = processCpuSeconds(proc.pid!) * 1000
  const stopping = performance.now()
  proc.kill('SIGTERM')
  await new Promise(resolve => proc.once('exit', resolve))
  const stopMs = performance.now() - stopping
  rmSync(dir, { recursive: true, force: true })
  return { startMs, cpuMs, rssBytes, stopMs }
}

function bareNodeMs (): number {
  const began = performance.now()
  spawnSync(process.execPath, ['-e', ''])
  return performance.now() - began
}

const measured: Record<string, AgentRun[]> = Object.fromEntries(Object.keys(entries).map(name => [name, []]))
const bare: number[] = []
for (let i = 0; i < runs; i++) {
  bare.push(bareNodeMs())
  for (const [name, entry] of Object.entries(entries)) measured[name]!.push(await agentOnce(entry))
}
const bareMs = median(bare)
const summary = (xs: AgentRun[]): Record<string, unknown> => ({
  startMedianMs: Math.round(median(xs.map(a => a.startMs))),
  startAllMs: xs.map(a => Math.round(a.startMs)),
  ratioToBareNode: Number((median(xs.map(a => a.startMs)) / bareMs).toFixed(2)),
  cpuMedianMs: Math.round(median(xs.map(a => a.cpuMs))),
  idleRssMedianMiB: Number((median(xs.map(a => a.rssBytes)) / 2 ** 20).toFixed(1)),
  stopMedianMs: Math.round(median(xs.map(a => a.stopMs))),
})
/** The bundle's medians over `other`'s (below 1: the bundle is faster or smaller). */
const ratios = (other: AgentRun[]): Record<string, number> => {
  const ratio = (f: (a: AgentRun) => number): number => Number((median(measured.bundle!.map(f)) / median(other.map(f))).toFixed(2))
  return { start: ratio(a => a.startMs), cpu: ratio(a => a.cpuMs), rss: ratio(a => a.rssBytes), stop: ratio(a => a.stopMs) }
}
console.log(JSON.stringify({
  runs,
  bareNodeStartMedianMs: Math.round(bareMs),
  ...Object.fromEntries(Object.entries(measured).map(([name, xs]) => [name, summary(xs)])),
  bundleToUnbundled: ratios(measured.unbundled!),
  ...(baseline !== undefined ? { baselineEntry: baseline, bundleToBaseline: ratios(measured.baseline!) } : {}),
}, null, 2))
