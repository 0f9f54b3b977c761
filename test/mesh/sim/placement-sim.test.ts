import t from 'tap'
import { simulatePlacement } from '../../../mesh/sim/placement-sim.ts'
import { generatePlacementTrace, type PlacementTrace } from '../../../mesh/sim/placement-trace.ts'
import { placementPolicyNames } from '../../../mesh/policies/placement/placement-policy.ts'

const twoJobs = (): PlacementTrace => ({
  cluster: { nodes: 1, gpusPerNode: 8, contextSwitchS: 0 },
  jobs: [
    { id: 'a', submitS: 0, nodes: 1, periodS: 100, iterations: 10, segments: [{ offsetS: 0, durationS: 30 }], maxSlowdown: 1.5 },
    { id: 'b', submitS: 0, nodes: 1, periodS: 100, iterations: 10, segments: [{ offsetS: 0, durationS: 30 }], maxSlowdown: 1.5 },
  ],
})

t.test('isolated runs jobs one after another; sharing interleaves complementary jobs on one node', async t => {
  const iso = simulatePlacement(twoJobs(), { policy: 'isolated', jitter: 0 })
  t.same(iso.jobs.map(j => [j.startS, j.endS]), [[0, 930], [930, 1860]], 'the second waits for the dedicated node')
  t.equal(iso.makespanS, 1860)
  t.equal(iso.jobs[1]!.waitS, 930)
  for (const policy of ['pack', 'spread', 'spread-backfill'] as const) {
    const r = simulatePlacement(twoJobs(), { policy, jitter: 0 })
    t.equal(r.jobs[1]!.startS, 30, `${policy}: b starts in a's idle gap`)
    t.same(r.jobs.map(j => j.slowdown), [0.93, 0.93], `${policy}: no slowdown (the last period's idle tail is not run)`)
    t.equal(r.makespanS, 960)
    t.equal(r.sharedJobs, 2)
    t.ok(r.gpuBusyFraction > 0.6)
  }
})

t.test('a cold-start job is profiled on dedicated nodes, then repacked so others can share its nodes', async t => {
  const trace = twoJobs()
  trace.cluster.nodes = 2
  trace.jobs[0]!.profiled = false
  trace.jobs[1]!.nodes = 2
  trace.jobs[1]!.submitS = 10
  const shared = simulatePlacement(trace, { policy: 'pack', jitter: 0 })
  t.equal(shared.jobs[0]!.startS, 0, 'cold start at once on a dedicated node')
  t.ok(shared.jobs[1]!.startS >= 30 && shared.jobs[1]!.startS < 200, `the gang starts once a's first period is profiled (at ${shared.jobs[1]!.startS} s)`)
  t.equal(shared.sharedJobs, 2)
  const isolated = simulatePlacement(trace, { policy: 'isolated', jitter: 0 })
  t.equal(isolated.jobs[1]!.startS, 930, 'without repacking the gang waits for the whole job')
})

t.test('with backfill the oldest waiting job claims its nodes: a cold-start gang is not overtaken until the queue drains', async t => {
  const warm = (id: string, submitS: number) => ({ id, submitS, nodes: 1, periodS: 100, iterations: 10, segments: [{ offsetS: 0, durationS: 20 }], maxSlowdown: 1.5 })
  const trace: PlacementTrace = {
    cluster: { nodes: 2, gpusPerNode: 8, contextSwitchS: 0 },
    jobs: [
      warm('w0', 0),
      warm('w1', 0),
      { ...warm('cold', 10), nodes: 2, profiled: false },
      ...Array.from({ length: 8 }, (_, k) => warm(`w${k + 2}`, 200 * (k + 1))),
    ],
  }
  const cold = (r: ReturnType<typeof simulatePlacement>) => r.jobs.find(j => j.id === 'cold')!
  const greedy = simulatePlacement(trace, { policy: 'spread-backfill', jitter: 0, backfillReservation: false })
  t.ok(cold(greedy).startS > Math.max(...greedy.jobs.filter(j => j.id !== 'cold').map(j => j.startS)), 'every job fits beside a resident: without the claim the gang starts last')
  const claimed = simulatePlacement(trace, { policy: 'spread-backfill', jitter: 0 })
  t.equal(cold(claimed).startS, 920, 'with it the gang starts when the residents it waits for end')
  t.ok(claimed.jobs.every(j => j.endS > j.startS), 'every job ran')
  t.ok(claimed.makespanS < greedy.makespanS, `and the trace drains sooner (${claimed.makespanS} s against ${greedy.makespanS} s)`)
})

t.test('every policy drains a generated trace; sharing beats isolated and the runtime schedulers both work', async t => {
  const trace = generatePlacementTrace({ jobs: 60, nodes: 12, seed: 3 })
  const results = Object.fromEntries(placementPolicyNames.map(p => [p, simulatePlacement(trace, { policy: p })]))
  for (const r of Object.values(results)) {
    t.equal(r.jobs.length, 60)
    t.ok(r.jobs.every(j => j.endS > j.startS && j.waitS >= 0), `${r.policy}: every job ran`)
    t.ok(r.normalizedQueueDelay.p50 <= r.normalizedQueueDelay.p90 && r.normalizedQueueDelay.p90 <= r.normalizedQueueDelay.max)
  }
  t.ok(results['spread-backfill']!.makespanS < results.isolated!.makespanS, 'spread-backfill drains faster than isolated')
  t.ok(results['spread-backfill']!.normalizedQueueDelay.p90 < results.isolated!.normalizedQueueDelay.p90, 'lighter delay tail')
  t.equal(results.isolated!.contextSwitches, 0, 'isolated never switches')
  t.same(simulatePlacement(trace, { policy: 'pack' }), results.pack, 'deterministic')
  const fcfs = simulatePlacement(trace, { policy: 'pack', runtime: 'fcfs' })
  t.equal(fcfs.runtime, 'fcfs')
  t.ok(fcfs.jobs.every(j => Number.isFinite(j.endS)))
})

t.test('touching segments run as one block: every job stays within its bound, as admitted (no guard needed)', async t => {
  // As users write traces: log-prob, update and sync back to back, gangs of 1-8 nodes, one bound for every job.
  const trace = generatePlacementTrace({ jobs: 80, nodes: 16, seed: 3, maxSlowdown: 1.25, segments: 'back-to-back', gangs: { min: 1, max: 8 } })
  t.ok(trace.jobs.some(j => j.segments[0]!.offsetS + j.segments[0]!.durationS > j.segments[1]!.offsetS), 'some segments touch with floating-point error')
  const isolated = simulatePlacement(trace, { policy: 'isolated' })
  for (const policy of ['pack', 'spread', 'spread-backfill'] as const) {
    const r = simulatePlacement(trace, { policy, guard: false })
    t.equal(r.jobsOverBound, 0, `${policy}: no job over its bound (slowdown p99 ${r.slowdown.p99.toFixed(3)}, max ${r.slowdown.max.toFixed(3)})`)
    t.ok(r.sharedJobs > 40, `${policy}: jobs share nodes (${r.sharedJobs})`)
    t.ok(r.makespanS < isolated.makespanS * 0.8, `${policy}: drains faster than isolated (${(r.makespanS / isolated.makespanS).toFixed(3)})`)
  }
})

t.test('the slowdown guard: a neighbour running longer than its profile is sent back to the queue', async t => {
  // b's profile says 35 s per period; it really takes 52.5 s (period 117.5 s) and pushes a (bound 1.1) over its bound.
  const trace = (): PlacementTrace => ({
    cluster: { nodes: 1, gpusPerNode: 8, contextSwitchS: 2 },
    jobs: [
      { id: 'a', submitS: 0, nodes: 1, periodS: 100, iterations: 40, segments: [{ offsetS: 10, durationS: 40 }], maxSlowdown: 1.1 },
      { id: 'b', submitS: 5, nodes: 1, periodS: 100, iterations: 40, segments: [{ offsetS: 10, durationS: 35 }], maxSlowdown: 1.5, runScale: 1.5 },
    ],
  })
  const unguarded = simulatePlacement(trace(), { policy: 'pack', jitter: 0, guard: false })
  t.ok(unguarded.jobs[0]!.slowdown > 1.1, `without the guard a ends over its bound (${unguarded.jobs[0]!.slowdown.toFixed(3)})`)
  t.equal(unguarded.jobsOverBound, 1)
  const guarded = simulatePlacement(trace(), { policy: 'pack', jitter: 0 })
  t.equal(guarded.jobsOverBound, 0, `with it every job ends within its bound (a ${guarded.jobs[0]!.slowdown.toFixed(3)})`)
  t.equal(guarded.guardEvictions.length, 1)
  t.match(guarded.guardEvictions[0]!.reason, /job a: measured slowdown 1\.\d+ over its bound 1\.1; b, running 1\.50x the busy time it was placed with, back to the queue/)
  t.same(guarded.jobs.map(j => j.evictions), [0, 1])
  const b = guarded.jobs[1]!
  t.ok(b.slowdown < 1.5, `b's time back in the queue is wait, not slowdown (${b.slowdown.toFixed(3)})`)
  t.ok(b.waitS > unguarded.jobs[1]!.waitS, 'b waited longer')
  t.ok(Math.abs(b.slowdown * 40 * 117.5 + b.waitS - (b.endS - 5)) < 1e-6, 'wait + run = end - submit, run measured against b\'s real period (117.5 s)')
})
