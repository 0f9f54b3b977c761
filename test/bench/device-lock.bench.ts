/**
 * Device lock hand-off latency over the real unix socket, compared in the
 * same run with a GET /healthz round trip (the cheapest request the API has).
 *
 *   node_modules/.bin/node test/bench/device-lock.bench.ts [handoffs=300]
 *
 * A dev agent (from source) fakes one GPU. Two holders, "bench-a" and
 * "bench-b", pass GPU 0 back and forth the way RLinf §3.3 context switching
 * does: the holder watches its event stream; the other holder's acquire
 * queues and the holder is told (`waiter` event, measured as
 * "waiter notification": acquire sent → event received); the holder then
 * releases and the waiter is granted ("hand-off": release sent → the waiter's
 * acquire answered). Both clients live in this process, so both sides are
 * timed on one clock. Healthz samples are interleaved with the hand-offs.
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { createAgentClient, type AgentClient, type GpuLockStreamEvent } from '../../agent/client/client.ts'
import { median } from './bench-stats.ts'

const handoffs = Number(process.argv[2] ?? 300)
const warmup = 30
const repo = fileURLToPath(new URL('../../', import.meta.url))

function p99 (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)]!
}

const nowMs = (): number => performance.now()

/** Waits for the next `waiter` event of a holder's stream. */
async function nextWaiterEvent (events: AsyncIterator<GpuLockStreamEvent>): Promise<number> {
  for (;;) {
    const { value, done } = await events.next()
    if (done === true) throw new Error('event stream ended')
    if (value.type === 'waiter') return nowMs()
  }
}

const dir = mkdtempSync(join(tmpdir(), 'agentd-bench-'))
const gpus = JSON.stringify([{ model: 'Fake GPU', memoryBytes: 0, uuid: 'GPU-fake-0', pciBus: '0' }])
const agent = spawn(process.execPath, [join(repo, 'agent/main.ts'), '--dev', '--state-dir', dir, '--log-level', 'warn', '--set', `inventory.gpus=${gpus}`], { stdio: 'ignore' })
const client: AgentClient = createAgentClient({ socketPath: join(dir, 'agentd.sock'), timeoutMs: 5000 })
try {
  for (let began = Date.now(); ;) {
    try { await client.health(); break } catch { if (Date.now() - began > 30_000) throw new Error('agent did not start'); await sleep(20) }
  }
  const controller = new AbortController()
  const holders = ['bench-a', 'bench-b'] as const
  const streams = holders.map(holder => client.gpuLockEvents(0, { holder, signal: controller.signal })[Symbol.asyncIterator]())
  for (const s of streams) await s.next() // the initial state: the stream is live

  const handoffMs: number[] = []
  const notifyMs: number[] = []
  const healthMs: number[] = []
  await client.acquireGpu(0, { holder: holders[0] })
  for (let i = 0; i < warmup + handoffs; i++) {
    const holder = i % 2
    const waiter = 1 - holder
    const sent = nowMs()
    const waiterEvent = nextWaiterEvent(streams[holder]!)
    const granted = client.acquireGpu(0, { holder: holders[waiter] }).then(() => nowMs())
    const notified = await waiterEvent
    const releaseSent = nowMs()
    const released = client.releaseGpu(0, { holder: holders[holder] })
    const grantedAt = await granted
    await released
    const healthSent = nowMs()
    await client.health()
    const healthDone = nowMs()
    if (i >= warmup) {
      notifyMs.push(notified - sent)
      handoffMs.push(grantedAt - releaseSent)
      healthMs.push(healthDone - healthSent)
    }
  }
  controller.abort()
  const us = (ms: number): number => Math.round(ms * 1000)
  console.log(JSON.stringify({
    handoffs,
    handoffMedianUs: us(median(handoffMs)),
    handoffP99Us: us(p99(handoffMs)),
    waiterNotificationMedianUs: us(median(notifyMs)),
    waiterNotificationP99Us: us(p99(notifyMs)),
    healthzMedianUs: us(median(healthMs)),
    healthzP99Us: us(p99(healthMs)),
    handoffToHealthzMedianRatio: Number((median(handoffMs) / median(healthMs)).toFixed(2)),
  }, null, 2))
} finally {
  agent.kill('SIGTERM')
  await new Promise(resolve => agent.once('exit', resolve))
  rmSync(dir, { recursive: true, force: true })
}
