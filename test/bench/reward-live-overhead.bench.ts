/**
 * Per-request overhead of the live reward path (issue 9): a real 3-server
 * election cluster on loopback, one cpu stage whose worker
 * (agent/reward/examples/reward-worker.py) answers at once (stageMs 0). N
 * requests submitted one after another through a follower, each waited for
 * before the next: submit → acknowledged (forwarded to the leader's proxy and
 * recorded by the follower) and submit → result on the follower (the worker
 * fetched it from the leader through its own agent, completed it, the
 * follower's collector took the result). Baselines in the same run, on the
 * same follower: a local API round trip (GET /healthz) and a forwarded leader
 * call (GET /v1/reward/status: follower → leader → follower).
 *
 *   node_modules/.bin/node test/bench/reward-live-overhead.bench.ts [--requests 50]
 */
import { parseArgs } from 'node:util'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { repoRoot } from '../helpers/agent-process.ts'
import { startElectionCluster, waitForLeader } from '../helpers/test-election.ts'
import { median } from './bench-stats.ts'

const { values } = parseArgs({ options: { requests: { type: 'string', default: '50' } } })
const count = Number(values.requests)
const warmup = 5
const teardowns: Array<() => unknown> = []
const stages = [{ name: 'verify', resource: 'cpu', command: ['python3', join(repoRoot, 'agent/reward/examples/reward-worker.py')], coresPerWorker: 1, timeoutMs: 10_000 }]

try {
  const cluster = await startElectionCluster({ teardown: fn => { teardowns.push(fn) } }, {
    servers: 3,
    args: ['--set', `reward.stages=${JSON.stringify(stages)}`, '--set', 'reward.cpuCores=1', '--set', 'log.level=warn'],
  })
  const { leader } = await waitForLeader(cluster.agents, cluster.agents, 30_000)
  const follower = cluster.agents.find(a => a !== leader)!
  const client = follower.client
  await client.rewardBatchStart({ task: 'bench', batch: 0, size: warmup + count })
  for (let s = await client.rewardStatus(); s.stages[0]!.workers === 0; s = await client.rewardStatus()) await sleep(50)

  const ackMs: number[] = []
  const resultMs: number[] = []
  for (let i = 0; i < warmup + count; i++) {
    const requestId = `bench-${i}`
    const t0 = performance.now()
    await client.rewardSubmit({ task: 'bench', batch: 0, requestId, payload: { stageMs: { verify: 0 }, reward: 1 } })
    const t1 = performance.now()
    while ((await client.rewardResult(requestId, 5000)).state !== 'done') { /* long-poll again */ }
    if (i >= warmup) { ackMs.push(t1 - t0); resultMs.push(performance.now() - t0) }
  }
  const localMs: number[] = []
  const forwardedMs: number[] = []
  for (let i = 0; i < count; i++) {
    let t0 = performance.now()
    await client.health()
    localMs.push(performance.now() - t0)
    t0 = performance.now()
    await client.rewardStatus()
    forwardedMs.push(performance.now() - t0)
  }
  const fmt = (xs: number[]): string => `median ${median(xs).toFixed(2)} ms, max ${Math.max(...xs).toFixed(2)} ms`
  console.log(`${count} reward requests one after another through a follower of a 3-server cluster (worker answers at once)`)
  console.log(`live   submit → acknowledged                      ${fmt(ackMs)}`)
  console.log(`live   submit → result on the follower            ${fmt(resultMs)}`)
  console.log(`base   local API round trip (GET /healthz)        ${fmt(localMs)}`)
  console.log(`base   forwarded leader call (reward status)      ${fmt(forwardedMs)}`)
  console.log(`live result / local round trip (medians)          ${(median(resultMs) / median(localMs)).toFixed(1)}x`)
} finally {
  for (const fn of teardowns.reverse()) await fn()
}
