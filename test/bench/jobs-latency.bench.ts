/**
 * Live placement decision latency (issue 8): a real 3-server election
 * cluster on loopback (two fake GPUs per agent); N jobs submitted one after
 * another through a follower. Per job: submit → acknowledged (the leader
 * published the decision holding it; the follower forwarded the call) and
 * submit → applied on every agent (GET /v1/jobs polled every 2 ms on each).
 * Baseline in the same run, for the same jobs on the same table states: the
 * pure policy, `planPlacement` alone over a prebuilt horizon, and the whole
 * placement round (`placeQueued`: horizon rebuilt from the table + policy).
 *
 *   node_modules/.bin/node test/bench/jobs-latency.bench.ts [--jobs 24] [--seed 1]
 */
import { parseArgs } from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'
import { startElectionCluster, waitForLeader } from '../helpers/test-election.ts'
import type { MeshAgent } from '../helpers/test-mesh.ts'
import { generatePlacementTrace } from '../../mesh/sim/placement-trace.ts'
import { horizonOf, placeQueued, slotOf, type LiveNode } from '../../mesh/control/jobs/job-scheduler.ts'
import { placementJobOf } from '../../mesh/control/jobs/job-spec.ts'
import { planPlacement } from '../../mesh/policies/placement/placement-policy.ts'
import type { JobTable } from '../../mesh/control/jobs/job-table.ts'
import { median } from './bench-stats.ts'

const { values } = parseArgs({ options: { jobs: { type: 'string', default: '24' }, seed: { type: 'string', default: '1' } } })
const count = Number(values.jobs)
const teardowns: Array<() => unknown> = []
const fakeGpus = JSON.stringify([0, 1].map(i => ({ model: 'fake', memoryBytes: 1 << 30, uuid: `GPU-${i}`, pciBus: `0000:0${i}:00.0` })))

try {
  const cluster = await startElectionCluster({ teardown: fn => { teardowns.push(fn) } }, {
    servers: 3,
    args: ['--set', `inventory.gpus=${fakeGpus}`, '--set', `placement.maxJobsPerNode=${Math.ceil(count / 3) + 1}`, '--set', `placement.maxActiveJobs=${count}`, '--set', 'log.level=warn'],
  })
  const { leader } = await waitForLeader(cluster.agents, cluster.agents, 30_000)
  const follower = cluster.agents.find(a => a !== leader)!
  const specs = generatePlacementTrace({ jobs: count, nodes: 3, seed: Number(values.seed) }).jobs
    .map(({ submitS: _, ...j }) => ({ ...j, nodes: 1, gpusPerNode: 2, iterations: 1000 }))

  const ackMs: number[] = []
  const appliedMs: number[] = []
  for (const spec of specs) {
    const t0 = performance.now()
    const answer = await follower.client.submitJob(spec)
    ackMs.push(performance.now() - t0)
    await waitApplied(cluster.agents, answer.decision!)
    appliedMs.push(performance.now() - t0)
  }

  // Baseline: the same jobs on the same table states (each one's predecessors placed as the leader placed them).
  const final = (await leader!.client.jobs()) as JobTable
  const names = new Map(final.jobs.flatMap(j => j.nodes.map((p, i) => [p, j.nodeNames[i]!] as const)))
  const nodes: LiveNode[] = cluster.agents.map(a => ({ peerId: a.peerId, name: names.get(a.peerId) ?? a.name, gpus: 2 }))
    .sort((a, b) => a.peerId < b.peerId ? -1 : 1)
  const planMs: number[] = []
  const roundMs: number[] = []
  for (let i = 0; i < final.jobs.length; i++) {
    const job = final.jobs[i]!
    const before: JobTable = { ...final, jobs: [...final.jobs.slice(0, i), { ...job, state: 'QUEUED', nodes: [], nodeNames: [], placement: null, startedAtMs: null }] }
    const nowMs = job.startedAtMs ?? Date.now()
    const nowSlot = Math.ceil(nowMs / 1000 / final.slotS - 1e-9)
    const horizon = horizonOf(before, nodes, nowSlot)
    let t0 = performance.now()
    planPlacement(horizon, placementJobOf(job.spec), { policy: 'spread-backfill', nowSlot, maxJobsPerNode: Math.ceil(count / 3) + 1 })
    planMs.push(performance.now() - t0)
    t0 = performance.now()
    placeQueued(before, nodes, nowMs, { policy: 'spread-backfill', maxJobsPerNode: Math.ceil(count / 3) + 1 })
    roundMs.push(performance.now() - t0)
  }
  const running = final.jobs.filter(j => j.state === 'RUNNING').length
  const fmt = (xs: number[]): string => `median ${median(xs).toFixed(2)} ms, max ${Math.max(...xs).toFixed(2)} ms`
  console.log(`${count} jobs submitted through a follower of a 3-server cluster (${running} placed, slot ${slotOf(Date.now(), final.slotS)})`)
  console.log(`live  submit → acknowledged (decision published)   ${fmt(ackMs)}`)
  console.log(`live  submit → applied on all 3 agents              ${fmt(appliedMs)}`)
  console.log(`pure  planPlacement (same jobs, same tables)        ${fmt(planMs)}`)
  console.log(`pure  placement round (horizon from table + policy) ${fmt(roundMs)}`)
  console.log(`live / pure round (medians)                         ${(median(appliedMs) / median(roundMs)).toFixed(1)}x`)
} finally {
  for (const fn of teardowns.reverse()) await fn()
}

async function waitApplied (agents: MeshAgent[], d: { epoch: number, seq: number }): Promise<void> {
  const pending = new Set(agents)
  const deadline = performance.now() + 15_000
  while (pending.size > 0) {
    await Promise.all([...pending].map(async a => {
      const v = await a.client.jobs()
      if (v.decision !== null && (v.decision.epoch > d.epoch || (v.decision.epoch === d.epoch && v.decision.seq >= d.seq))) pending.delete(a)
    }))
    if (pending.size === 0) return
    if (performance.now() > deadline) throw new Error(`decision ${d.epoch}/${d.seq} not applied everywhere`)
    await sleep(2)
  }
}
