/**
 * Dev-agent start-up time, start-up CPU and idle RSS of the agent as installed
 * (its bundle, dist/bundle/agentd.js) against, in the same run and interleaved,
 * the unbundled compiled sources (dist/agent/main.js: the previous way it ran)
 * and the bare runtime (`node -e ""` start-to-exit).
 *
 *   node_modules/.bin/node test/bench/startup.bench.ts [runs=7]
 *
 * Start-up = spawn of `agentd --dev` until GET /healthz answers (what a user
 * or systemd waits for). CPU = utime+stime and RSS = VmRSS, after 2 s idle.
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

const runs = Number(process.argv[2] ?? 7)
const entries = { bundle: builtAgentMain, unbundled: unbundledAgentMain }

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

interface AgentRun { startMs: number, cpuMs: number, rssBytes: number }

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
  proc.kill('SIGTERM')
  await new Promise(resolve => proc.once('exit', resolve))
  rmSync(dir, { recursive: true, force: true })
  return { startMs, cpuMs, rssBytes }
}

function bareNodeMs (): number {
  const began = performance.now()
  spawnSync(process.execPath, ['-e', ''])
  return performance.now() - began
}

const measured: Record<keyof typeof entries, AgentRun[]> = { bundle: [], unbundled: [] }
const bare: number[] = []
for (let i = 0; i < runs; i++) {
  bare.push(bareNodeMs())
  for (const [name, entry] of Object.entries(entries)) measured[name as keyof typeof entries].push(await agentOnce(entry))
}
const bareMs = median(bare)
const summary = (xs: AgentRun[]): Record<string, unknown> => ({
  startMedianMs: Math.round(median(xs.map(a => a.startMs))),
  startAllMs: xs.map(a => Math.round(a.startMs)),
  ratioToBareNode: Number((median(xs.map(a => a.startMs)) / bareMs).toFixed(2)),
  cpuMedianMs: Math.round(median(xs.map(a => a.cpuMs))),
  idleRssMedianMiB: Number((median(xs.map(a => a.rssBytes)) / 2 ** 20).toFixed(1)),
})
const ratio = (f: (xs: AgentRun[]) => number): number => Number((f(measured.bundle) / f(measured.unbundled)).toFixed(2))
console.log(JSON.stringify({
  runs,
  bareNodeStartMedianMs: Math.round(bareMs),
  bundle: summary(measured.bundle),
  unbundled: summary(measured.unbundled),
  bundleToUnbundled: {
    start: ratio(xs => median(xs.map(a => a.startMs))),
    cpu: ratio(xs => median(xs.map(a => a.cpuMs))),
    rss: ratio(xs => median(xs.map(a => a.rssBytes))),
  },
}, null, 2))
