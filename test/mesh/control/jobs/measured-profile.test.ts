// Measured profiles of live jobs (jobs-leader-task.ts withMeasured, job-spec.ts placementJobOf,
// job-scheduler.ts placeQueued): the leader's measured figures are written into the table, replace
// the submitted ones once there are enough operations, and enforce the admission bound live — no new
// job is colocated beside one whose measured slowdown already exceeds its bound.
import t from 'tap'
import { withMeasured } from '../../../../mesh/control/jobs/jobs-leader-task.ts'
import { measuredOpsThreshold, normalizedSpec, parseJobSpec, placementJobOf } from '../../../../mesh/control/jobs/job-spec.ts'
import { placeQueued, submitJob } from '../../../../mesh/control/jobs/job-scheduler.ts'
import { emptyJobTable, jobTableOf, type JobTable } from '../../../../mesh/control/jobs/job-table.ts'
import type { MeasuredJob } from '../../../../mesh/control/jobs/op-scheduler.ts'

const spec = (id: string) => parseJobSpec({ id, nodes: 1, gpusPerNode: 1, periodS: 100, iterations: 50, segments: [{ offsetS: 0, durationS: 10 }, { offsetS: 50, durationS: 10 }], maxSlowdown: 1.5, switchS: 5, live: true })
const submit = { contextSwitchS: 5, maxActiveJobs: 16, maxTableBytes: 1 << 20, completedRetained: 4 }
const nodes = [{ peerId: 'p1', name: 'n1', gpus: 1 }, { peerId: 'p2', name: 'n2', gpus: 1 }]
const measured = (over: Partial<MeasuredJob> = {}): MeasuredJob => ({ ops: 10, failed: 0, switches: 4, runMs: 20_000, switchMs: 2_000, queuedMs: 0, byName: new Map(), ...over })

t.test('withMeasured writes each live job\'s figures into its record, and only when they changed', async t => {
  let table: JobTable = submitJob(emptyJobTable(1), spec('a'), 0, submit).table
  table = placeQueued(table, nodes, 0, { policy: 'spread', maxJobsPerNode: 4 }).table
  const next = withMeasured(table, new Map([['a', measured()]]), new Map([['a', 0]]), 40_000)
  t.not(next, table, 'a new table')
  t.equal(next.revision, table.revision + 1)
  t.match(next.jobs[0]!.measured, { ops: 10, runS: 20, switches: 4, switchS: 0.5, queuedS: 0, slowdown: 1.1, busyFraction: 0.5, updatedAtMs: 40_000 })
  t.ok(jobTableOf(next) !== undefined, 'the table with measured figures is still a valid decision payload')
  t.equal(withMeasured(next, new Map([['a', measured()]]), new Map([['a', 0]]), 50_000), next, 'the same figures again: nothing to publish')
})

t.test('placement uses the measured profile from the threshold on: switch cost and busy share', async t => {
  const s = normalizedSpec(spec('a'))
  t.same(placementJobOf(s, 50, { ops: measuredOpsThreshold - 1, switchS: 0.5, busyFraction: 0.1 }), placementJobOf(s), 'too few operations: the submitted profile')
  const m = placementJobOf(s, 50, { ops: measuredOpsThreshold, switchS: 0.5, busyFraction: 0.1 })
  t.equal(m.switchS, 0.5, 'the measured switch cost')
  t.same(m.segments.map(x => x.offsetS), [0, 50], 'segments keep their starts')
  t.equal(m.segments.reduce((n, x) => n + x.durationS, 0), 10, 'busy 10% of the 100 s period, as measured (20% submitted)')
  const heavy = placementJobOf(s, 50, { ops: 10, switchS: 0.5, busyFraction: 1 })
  t.same(heavy.segments.map(x => x.durationS), [50, 50], 'a measured share above the layout is capped at the next segment and the period end')
})

t.test('the admission bound, live: a node whose job is measured beyond its max slowdown takes no new job', async t => {
  let table: JobTable = submitJob(emptyJobTable(1), spec('a'), 0, submit).table
  table = placeQueued(table, [nodes[0]!], 0, { policy: 'spread', maxJobsPerNode: 4 }).table
  t.same(table.jobs[0]!.nodes, ['p1'])
  const slow = { ...table, jobs: table.jobs.map(j => ({ ...j, measured: { ops: 10, runS: 10, switches: 3, switchS: 1, queuedS: 8, slowdown: 2.1, busyFraction: 0.2, updatedAtMs: 0 } })) }
  const withB = submitJob(slow, spec('b'), 0, submit).table
  const placed = placeQueued(withB, nodes, 0, { policy: 'spread', maxJobsPerNode: 4 }).table
  t.same(placed.jobs.find(j => j.id === 'b')!.nodes, ['p2'], 'b goes to the other node')
  const onlyP1 = placeQueued(withB, [nodes[0]!], 0, { policy: 'spread', maxJobsPerNode: 4 }).table
  t.equal(onlyP1.jobs.find(j => j.id === 'b')!.state, 'QUEUED', 'with only the overloaded node, b waits')
  const fine = { ...withB, jobs: withB.jobs.map(j => j.id === 'a' ? { ...j, measured: { ...slow.jobs[0]!.measured, slowdown: 1.2 } } : j) }
  t.equal(placeQueued(fine, [nodes[0]!], 0, { policy: 'spread', maxJobsPerNode: 4 }).table.jobs.find(j => j.id === 'b')!.state, 'RUNNING', 'within its bound, a shares its node')
})
