/**
 * Dev-agent start-up time and idle RSS, compared in the same run with the
 * bare runtime (`node -e ""` start-to-exit) as the baseline.
 *
 *   node_modules/.bin/node test/bench/startup.bench.ts [runs=7]
 *
 * Start-up = spawn of `agentd --dev` until GET /healthz answers (what a user
 * or systemd waits for). RSS = VmRSS of the agent after 2 s idle.
 */
import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { createAgentClient } from '../../agent/client/client.ts'

const runs = Number(process.argv[2] ?? 7)
const repo = fileURLToPath(new URL('../../', import.meta.url))
const entry = join(repo, 'dist/agent/main.js')

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

async function agentOnce (): Promise<{ startMs: number, rssBytes: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-bench-'))
  const began = performance.now()
  const proc = spawn(process.execPath, [entry, '--dev', '--state-dir', dir, '--log-level', 'warn'], { stdio: 'ignore' })
  const client = createAgentClient({ socketPath: join(dir, 'agentd.sock'), timeoutMs: 1000 })
  for (;;) {
    try { await client.health(); break } catch { await sleep(5) }
  }
  const startMs = performance.now() - began
  await sleep(2000)
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${proc.pid}/status`, 'utf8'))![1])
  proc.kill('SIGTERM')
  await new Promise(resolve => proc.once('exit', resolve))
  rmSync(dir, { recursive: true, force: true })
  return { startMs, rssBytes: rssKb * 1024 }
}

function bareNodeMs (): number {
  const began = performance.now()
  spawnSync(process.execPath, ['-e', ''])
  return performance.now() - began
}

const agent: Array<{ startMs: number, rssBytes: number }> = []
const bare: number[] = []
for (let i = 0; i < runs; i++) {
  bare.push(bareNodeMs())
  agent.push(await agentOnce())
}
const startMs = median(agent.map(a => a.startMs))
const bareMs = median(bare)
const rssMiB = median(agent.map(a => a.rssBytes)) / 2 ** 20
console.log(JSON.stringify({
  runs,
  agentStartMedianMs: Math.round(startMs),
  agentStartAllMs: agent.map(a => Math.round(a.startMs)),
  bareNodeStartMedianMs: Math.round(bareMs),
  ratioToBareNode: Number((startMs / bareMs).toFixed(2)),
  idleRssMedianMiB: Number(rssMiB.toFixed(1)),
}, null, 2))
