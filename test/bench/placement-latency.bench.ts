/**
 * Placement latency (PlexRL §5.2.1): one job placed into a 256-node cluster
 * holding 1,000 resident jobs on the 28,800-slot (8 h × 1 s) horizon, the
 * whole simulation of a generated 1,000-job trace, and the leader's live
 * placement round (job-scheduler.ts placeQueued: one decision) over 256
 * nodes with 1,000+ jobs queued behind those running.
 * Goals: placement median < 10 ms; 1,000-job trace simulated in < 30 s;
 * a live round well inside the leader's 1 s reschedule interval.
 * Baseline in the same run: the same probes against an empty cluster.
 * Wall time is the goal; CPU time is printed beside it because on a machine
 * shared with other work the wall time also counts the waits for a core.
 *
 *   node_modules/.bin/node test/bench/placement-latency.bench.ts [--probes 40] [--trace-nodes 256] [--seed 1]
 */
import { parseArgs } from 'node:util'
import { ClusterHorizon } from '../../mesh/policies/placement/cluster-horizon.ts'
import { planPlacement, residentFor, type PlacementJob, type PlacementPolicyName } from '../../mesh/policies/placement/placement-policy.ts'
import { generatePlacementTrace, type PlacementTraceJob } from '../../mesh/sim/placement-trace.ts'
import { simulatePlacement } from '../../mesh/sim/placement-sim.ts'
import { createSeededRandom } from '../../core/seeded-random.ts'
import { horizonOf, placeQueued, submitJob } from '../../mesh/control/jobs/job-scheduler.ts'
import { emptyJobTable, type JobTable } from '../../mesh/control/jobs/job-table.ts'
import { placementJobOf } from '../../mesh/control/jobs/job-spec.ts'
import { median } from './bench-stats.ts'

const { values } = parseArgs({ options: { probes: { type: 'string', default: '40' }, 'trace-nodes': { type: 'string', default: '256' }, seed: { type: 'string', default: '1' } } })
const probes = Number(values.probes)
const seed = Number(values.seed)
const nodes = 256
const residents = 1000
const maxJobsPerNode = 8

const toJob = (j: PlacementTraceJob, gang: number): PlacementJob =>
  ({ id: j.id, nodes: gang, periodS: j.periodS, iterations: j.iterations, segments: j.segments, maxSlowdown: j.maxSlowdown, profiled: true, switchS: j.switchS ?? 10 })

// Residents: generated PlexRL-shaped jobs, gangs of 1-2 nodes so that 1,000 of them fit 256 nodes.
const pool = generatePlacementTrace({ jobs: 3000, nodes, seed }).jobs
const horizon = new ClusterHorizon({ nodes })
let placed = 0
for (const j of pool) {
  if (placed === residents) break
  const job = toJob(j, Math.min(j.nodes, 2))
  const d = planPlacement(horizon, job, { policy: 'spread', maxJobsPerNode })
  if (d === undefined) continue
  horizon.reserve(residentFor(d, job, horizon.slotS), { allowConflicts: !d.strict })
  placed++
}
const admitted = placed
// Admission (§7.2) stops well short of 1,000 such jobs on 256 nodes (their duty ratios add up past 100 %).
// The rest are reserved directly, conflicts allowed, at seeded phases on the nodes holding the fewest
// jobs: the view the probes search is as full as the goal says, whatever admission would have let in.
const rnd = createSeededRandom(seed)
for (const j of pool) {
  if (placed === residents) break
  if (horizon.resident(j.id) !== undefined) continue
  const gang = Math.min(j.nodes, 2)
  const on = Array.from({ length: nodes }, (_, n) => n).filter(n => horizon.jobsOn(n).size < maxJobsPerNode)
    .sort((a, b) => horizon.jobsOn(a).size - horizon.jobsOn(b).size || a - b).slice(0, gang)
  if (on.length < gang) break
  const periodSlots = Math.round(j.periodS)
  const busyRanges = j.segments.map(sg => [Math.floor(sg.offsetS), Math.ceil(sg.offsetS + sg.durationS)] as [number, number])
  horizon.reserve({ jobId: j.id, nodes: on.sort((a, b) => a - b), footprint: { startSlot: rnd.int(0, periodSlots - 1), periodSlots, periods: j.iterations, busy: busyRanges }, basePeriodSlots: periodSlots, dedicated: false, maxSlowdown: j.maxSlowdown }, { allowConflicts: true })
  placed++
}
const perNode = Array.from({ length: nodes }, (_, n) => horizon.jobsOn(n).size)
const busy = Array.from({ length: nodes }, (_, n) => 1 - horizon.node(n).freeSlots / horizon.slots)
console.log(`cluster: ${nodes} nodes, ${placed} resident jobs (${admitted} admitted by the policy, the rest reserved directly; ${Math.min(...perNode)}-${Math.max(...perNode)} per node), ` +
  `horizon ${horizon.slots} slots, mean reserved ${(busy.reduce((a, b) => a + b, 0) / nodes * 100).toFixed(1)} %`)
if (placed < residents) console.log(`WARNING: only ${placed} residents fit`)

const probeJobs = generatePlacementTrace({ jobs: probes, nodes, seed: seed + 1 }).jobs.map(j => toJob(j, j.nodes))
/** Wall and CPU milliseconds per probe: on a machine shared with other work the CPU time is the figure that does not depend on the neighbours. */
function timeProbes (view: ClusterHorizon, policy: PlacementPolicyName): { ms: number[], cpuMs: number[], placed: number } {
  const ms: number[] = []
  const cpuMs: number[] = []
  let ok = 0
  for (const job of probeJobs) {
    const c0 = process.cpuUsage()
    const t0 = process.hrtime.bigint()
    const d = planPlacement(view, job, { policy, maxJobsPerNode })
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6)
    const c = process.cpuUsage(c0)
    cpuMs.push((c.user + c.system) / 1e3)
    if (d !== undefined) ok++
  }
  return { ms, cpuMs, placed: ok }
}
const empty = new ClusterHorizon({ nodes })
for (const policy of ['pack', 'spread-backfill', 'isolated'] as const) {
  const base = timeProbes(empty, policy)
  const full = timeProbes(horizon, policy)
  const sorted = [...full.ms].sort((a, b) => a - b)
  console.log(`place one job (${policy.padEnd(15)}) median ${median(full.ms).toFixed(2)} ms (cpu ${median(full.cpuMs).toFixed(2)} ms)  p90 ${sorted[Math.floor(sorted.length * 0.9)]!.toFixed(2)} ms  ` +
    `placed ${full.placed}/${probes}   empty-cluster baseline median ${median(base.ms).toFixed(2)} ms   goal < 10 ms: ${median(full.ms) < 10 ? 'met' : 'NOT met'}`)
}

const traceNodes = Number(values['trace-nodes'])
const trace = generatePlacementTrace({ jobs: 1000, nodes: traceNodes, seed })
for (const policy of ['isolated', 'spread-backfill'] as const) {
  const c0 = process.cpuUsage()
  const t0 = process.hrtime.bigint()
  const r = simulatePlacement(trace, { policy })
  const s = Number(process.hrtime.bigint() - t0) / 1e9
  const c = process.cpuUsage(c0)
  console.log(`simulate 1,000-job trace on ${traceNodes} nodes (${policy.padEnd(15)}) ${s.toFixed(1)} s (cpu ${((c.user + c.system) / 1e6).toFixed(1)} s)  makespan ${(r.makespanS / 3600).toFixed(1)} h   goal < 30 s: ${s < 30 ? 'met' : 'NOT met'}`)
}

// The live leader's placement round: 256 nodes, a generated 1,400-job backlog submitted at once.
{
  const liveNodes = Array.from({ length: nodes }, (_, i) => ({ peerId: `p${String(i).padStart(3, '0')}`, name: `n${i}`, gpus: 8 }))
  const nowMs = 1_800_000_000_000
  let table: JobTable = emptyJobTable(1)
  for (const { submitS: _submitted, ...spec } of generatePlacementTrace({ jobs: 1400, nodes, seed: seed + 2 }).jobs) {
    table = submitJob(table, { ...spec, gpusPerNode: 8 }, nowMs, { contextSwitchS: 10, maxActiveJobs: 2000, maxTableBytes: 1 << 30, completedRetained: 0 }).table
  }
  const roundMs: number[] = []
  for (let round = 0; round < 10; round++) {
    const t0 = process.hrtime.bigint()
    const r = placeQueued(table, liveNodes, nowMs + round * 1000, { policy: 'spread-backfill', maxJobsPerNode: 4 })
    roundMs.push(Number(process.hrtime.bigint() - t0) / 1e6)
    table = r.table
  }
  const running = table.jobs.filter(j => j.state === 'RUNNING').length
  const queued = table.jobs.filter(j => j.state === 'QUEUED')
  const nowSlot = Math.ceil((nowMs + 10_000) / 1000)
  let t0 = process.hrtime.bigint()
  const view = horizonOf(table, liveNodes, nowSlot)
  const buildMs = Number(process.hrtime.bigint() - t0) / 1e6
  const perJob: number[] = []
  for (const q of queued.slice(0, 40)) {
    t0 = process.hrtime.bigint()
    planPlacement(view, placementJobOf(q.spec, q.spec.iterations, q.measured), { policy: 'spread-backfill', nowSlot, maxJobsPerNode: 4 })
    perJob.push(Number(process.hrtime.bigint() - t0) / 1e6)
  }
  const later = roundMs.slice(1)
  console.log(`live placement round, 256 nodes: first round (empty cluster) ${roundMs[0]!.toFixed(0)} ms; then ${running} running, ${queued.length} queued: ` +
    `round median ${median(later).toFixed(0)} ms, max ${Math.max(...later).toFixed(0)} ms (view build ${buildMs.toFixed(0)} ms, one job ${median(perJob).toFixed(2)} ms median, ${Math.max(...perJob).toFixed(2)} ms max)   ` +
    `goal round < 1000 ms and one job < 10 ms: ${Math.max(...later) < 1000 && median(perJob) < 10 ? 'met' : 'NOT met'}`)
}
