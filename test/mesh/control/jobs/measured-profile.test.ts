// Measured profiles of live jobs (jobs-leader-task.ts withMeasured, job-spec.ts placementJobOf,
// job-scheduler.ts placeQueued): the leader's measured figures are written into the table, replace
// the submitted ones once there are enough operations, and enforce the admission bound live — no new
// job is colocated beside one whose measured slowdown already exceeds its bound.
import t from 'tap'
import { measuredRound, withMeasured } from '../../../../mesh/control/jobs/jobs-leader-task.ts'
import { measuredOpsThreshold, normalizedSpec, parseJobSpec, placementJobOf } from '../../../../mesh/control/jobs/job-spec.ts'
import { guardSlowdowns, placeQueued, requeueLost, submitJob } from '../../../../mesh/control/jobs/job-scheduler.ts'
import { emptyJobTable, jobTableOf, maxJobEvents, type JobTable } from '../../../../mesh/control/jobs/job-table.ts'
import type { MeasuredJob } from '../../../../mesh/control/jobs/op-scheduler.ts'
import { createComponentProfile } from '../../../../mesh/control/jobs/component-profile.ts'

const spec = (id: string) => parseJobSpec({ id, nodes: 1, gpusPerNode: 1, periodS: 100, iterations: 50, segments: [{ offsetS: 0, durationS: 10 }, { offsetS: 50, durationS: 10 }], maxSlowdown: 1.5, switchS: 5, live: true })
const submit = { contextSwitchS: 5, maxActiveJobs: 16, maxTableBytes: 1 << 20, completedRetained: 4 }
const nodes = [{ peerId: 'p1', name: 'n1', gpus: 1 }, { peerId: 'p2', name: 'n2', gpus: 1 }]
const measured = (over: Partial<MeasuredJob> = {}): MeasuredJob => ({ ops: 10, failed: 0, switches: 4, runMs: 20_000, switchMs: 2_000, queuedMs: 0, byName: new Map(), components: createComponentProfile(), ...over })

t.test('withMeasured writes each live job\'s figures into its record, and only when they changed', async t => {
  let table: JobTable = submitJob(emptyJobTable(1), spec('a'), 0, submit).table
  table = placeQueued(table, nodes, 0, { policy: 'spread', maxJobsPerNode: 4 }).table
  const next = withMeasured(table, new Map([['a', measured()]]), new Map([['a', 0]]), 40_000)
  t.not(next, table, 'a new table')
  t.equal(next.revision, table.revision + 1)
  // 40 s of wall time, 2 s of it switching: 40 / 38.
  t.match(next.jobs[0]!.measured, { ops: 10, runS: 20, switches: 4, switchS: 0.5, queuedS: 0, slowdown: 1.052632, busyFraction: 0.5, updatedAtMs: 40_000 })
  const busy = withMeasured(table, new Map([['a', measured({ queuedMs: 18_000 })]]), new Map([['a', 30_000]]), 40_000)
  t.equal(busy.jobs[0]!.measured!.slowdown, 2, 'never idle (20 s run, 2 s switching, 18 s queued in 10 s of wall): (run + lost) / run')
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

t.test('the slowdown guard, live: the latest colocation beside a job measured over its bound goes back to the queue', async t => {
  const slowdownOf = (table: JobTable, id: string, slowdown: number, ops = 10): JobTable => ({ ...table, jobs: table.jobs.map(j => j.id === id ? { ...j, measured: { ops, runS: 10, switches: 3, switchS: 1, queuedS: 8, slowdown, busyFraction: 0.2, updatedAtMs: 0 } } : j) })
  let table: JobTable = submitJob(emptyJobTable(1), spec('a'), 0, submit).table
  table = placeQueued(table, [nodes[0]!], 1_000, { policy: 'spread', maxJobsPerNode: 4 }).table
  table = submitJob(table, spec('b'), 2_000, submit).table
  table = placeQueued(table, [nodes[0]!], 2_000, { policy: 'spread', maxJobsPerNode: 4 }).table
  t.same(table.jobs.map(j => [j.id, j.state, j.nodes]), [['a', 'RUNNING', ['p1']], ['b', 'RUNNING', ['p1']]], 'b colocated beside a')

  const within = slowdownOf(table, 'a', 1.4)
  t.equal(guardSlowdowns(within, 5_000).table, within, 'nothing evicted: the same table')
  t.same(guardSlowdowns(within, 5_000).evicted, [], 'within its bound (1.5)')
  t.same(guardSlowdowns(slowdownOf(table, 'a', 2, measuredOpsThreshold - 1), 5_000).evicted, [], 'too few operations measured')

  const over = slowdownOf(table, 'a', 2)
  const { table: guarded, evicted } = guardSlowdowns(over, 5_000)
  t.same(evicted.map(e => e.evict), ['b'])
  t.equal(guarded.revision, over.revision + 1)
  const [a, b] = guarded.jobs
  t.match(b, { state: 'QUEUED', nodes: [], placement: null, startedAtMs: null, evictions: 1, requeues: 0 })
  t.match(b!.events, [{ atMs: 5_000, message: /^evicted by the slowdown guard: job a: measured slowdown 2\.000 over its bound 1\.5; the latest colocation on its nodes, b, back to the queue/ }])
  t.match(a, { state: 'RUNNING', guardedAtOps: 10, events: [{ atMs: 5_000, message: /^slowdown guard: job a: / }] })
  t.ok(jobTableOf(guarded) !== undefined, 'still a valid decision payload')
  t.equal(placeQueued(guarded, [nodes[0]!], 5_000, { policy: 'spread', maxJobsPerNode: 4 }).table.jobs[1]!.state, 'QUEUED', 'b is not placed back beside a while a is over its bound')
  t.same(guardSlowdowns(guarded, 6_000).evicted, [], 'a has nobody left to evict, and waits for new measurements')
  const later = slowdownOf(guarded, 'a', 2, 10 + measuredOpsThreshold - 1)
  t.same(guardSlowdowns(later, 7_000).evicted, [], 'the guard waits for as many operations again before acting for a again')

  // The slowed job was the latest to arrive: it goes back itself.
  const { evicted: self } = guardSlowdowns(slowdownOf(table, 'b', 2), 5_000)
  t.same(self.map(e => e.evict), ['b'])
  t.match(self[0]!.reason, /it was the latest colocation on its nodes \(beside a\)/)

  let many = guarded
  for (let i = 0; i < 6; i++) many = guardSlowdowns(slowdownOf({ ...many, jobs: many.jobs.map(j => j.id === 'a' ? { ...j, guardedAtOps: 0 } : j.id === 'b' ? { ...j, state: 'RUNNING', nodes: ['p1'], startedAtMs: 9_000 + i } : j) }, 'a', 2), 10_000 + i).table
  t.equal(many.jobs[1]!.events!.length, maxJobEvents, 'events are bounded')
  t.equal(many.jobs[1]!.evictions, 7)
})

t.test('a job requeued because a node is gone says so in its events', async t => {
  let table: JobTable = submitJob(emptyJobTable(1), spec('a'), 0, submit).table
  table = placeQueued(table, [nodes[0]!], 1_000, { policy: 'spread', maxJobsPerNode: 4 }).table
  const lost = requeueLost(table, p => p === 'p1', 3_000)
  t.same(lost.requeued, ['a'])
  t.match(lost.table.jobs[0], { state: 'QUEUED', requeues: 1, events: [{ atMs: 3_000, message: 'requeued: node n1 of its group is gone' }] })
})

t.test('one publication of measured profiles: the guard evicts only when placement.slowdownGuard is on', async t => {
  let table: JobTable = submitJob(emptyJobTable(1), spec('a'), 0, submit).table
  table = placeQueued(table, [nodes[0]!], 1_000, { policy: 'spread', maxJobsPerNode: 4 }).table
  table = submitJob(table, spec('b'), 2_000, submit).table
  table = placeQueued(table, [nodes[0]!], 2_000, { policy: 'spread', maxJobsPerNode: 4 }).table
  // a: 10 operations, 20 s run, 2 s switching and 30 s queued in 52 s of wall time since its first: slowdown 52 / 20 = 2.6 > 1.5.
  const figures = new Map([['a', measured({ queuedMs: 30_000 })]])
  const on = measuredRound(table, figures, new Map([['a', 0]]), 52_000, true)
  t.same(on.evicted.map(e => e.evict), ['b'], 'on: b, the latest colocation, goes back to the queue')
  t.equal(on.table.jobs[1]!.state, 'QUEUED')
  const off = measuredRound(table, figures, new Map([['a', 0]]), 52_000, false)
  t.same(off.evicted, [], 'off: nothing evicted')
  t.same(off.table.jobs.map(j => j.state), ['RUNNING', 'RUNNING'])
  t.equal(off.table.jobs[0]!.measured!.slowdown, 2.6, 'the figures are published either way')
})
