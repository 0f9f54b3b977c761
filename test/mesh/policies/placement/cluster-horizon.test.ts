import t from 'tap'
import { ClusterHorizon, type ResidentJob } from '../../../../mesh/policies/placement/cluster-horizon.ts'
import { forEachBusyInstance, footprintEnd, mergeRanges, type Footprint } from '../../../../mesh/policies/placement/footprint.ts'

const job = (jobId: string, nodes: number[], footprint: Footprint): ResidentJob =>
  ({ jobId, nodes, footprint, basePeriodSlots: footprint.periodSlots, dedicated: false, maxSlowdown: 1.5 })

t.test('footprint instances are clipped to the asked range and merged ranges are disjoint', async t => {
  const f: Footprint = { startSlot: 10, periodSlots: 10, periods: 3, busy: [[2, 4], [6, 7]] }
  const seen: Array<[number, number]> = []
  forEachBusyInstance(f, 13, 40, (a, b) => { seen.push([a, b]) })
  t.same(seen, [[13, 14], [16, 17], [22, 24], [26, 27], [32, 34], [36, 37]])
  t.equal(footprintEnd(f), 37)
  t.same(mergeRanges([[5, 6], [1, 3], [3, 4], [2, 2]]), [[1, 4], [5, 6]])
})

t.test('reserve is atomic, updates the free-node profile, release gives everything back', async t => {
  const h = new ClusterHorizon({ nodes: 3, slots: 100 })
  const a = job('a', [0, 1], { startSlot: 0, periodSlots: 20, periods: 10, busy: [[0, 5]] })
  h.reserve(a)
  t.equal(h.profile.minFree(0, 5), 1)
  t.equal(h.profile.minFree(5, 20), 3)
  t.equal(h.profile.minFree(80, 85), 1)
  t.same([...h.jobsOn(0)], ['a'])
  t.notOk(h.fitsOnNode(1, { startSlot: 3, periodSlots: 20, periods: 2, busy: [[0, 3]] }))
  t.throws(() => h.reserve(job('b', [2, 1], { startSlot: 3, periodSlots: 20, periods: 2, busy: [[0, 3]] })), /does not fit on node 1/)
  t.equal(h.node(2).freeSlots, 100, 'the failed reservation changed nothing on node 2')
  t.throws(() => h.reserve(a), /already has a reservation/)
  h.reserve(job('c', [1, 2], { startSlot: 5, periodSlots: 20, periods: 5, busy: [[0, 15]] }))
  t.equal(h.profile.minFree(0, 100), 1, 'a and c interleave on node 1: one node is free at every slot')
  t.equal(h.profile.freeAt(22), 1)
  t.ok(h.release('a'))
  t.notOk(h.release('a'))
  t.ok(h.release('c'))
  t.equal(h.profile.minFree(0, 100), 3)
  for (let n = 0; n < 3; n++) t.same(h.node(n).intervals(), [[0, 100]])
})

t.test('advancing the window wraps the ring, drops the past and reserves the residents\' next periods', async t => {
  const h = new ClusterHorizon({ nodes: 2, slots: 50 })
  h.reserve(job('a', [0], { startSlot: 0, periodSlots: 10, periods: 20, busy: [[0, 4]] }))
  t.same(h.node(0).intervals().slice(-1), [[44, 50]])
  h.advanceTo(35)
  t.equal(h.windowStart, 35)
  t.equal(h.windowEnd, 85)
  t.same(h.node(0).intervals(), [[35, 40], [44, 50], [54, 60], [64, 70], [74, 80], [84, 85]])
  // ring positions 0..34 now hold slots 50..84: node 0 busy at 50..54 etc., node 1 free.
  t.equal(h.profile.freeAt(52), 1)
  t.equal(h.profile.freeAt(57), 2)
  t.equal(h.profile.minFree(35, 85), 1)
  h.advanceTo(500) // past the job's end (slot 194) and the whole window
  t.equal(h.resident('a'), undefined, 'a finished job leaves the horizon')
  t.same(h.node(0).intervals(), [[500, 550]])
  t.equal(h.profile.minFree(500, 550), 2)
})

t.test('conflicting reservations hold only free slots and release exactly what they hold', async t => {
  const h = new ClusterHorizon({ nodes: 1, slots: 40 })
  h.reserve(job('a', [0], { startSlot: 0, periodSlots: 10, periods: 4, busy: [[0, 4]] }))
  t.throws(() => h.reserve(job('b', [0], { startSlot: 2, periodSlots: 10, periods: 4, busy: [[0, 4]] })), /does not fit/)
  h.reserve(job('b', [0], { startSlot: 2, periodSlots: 10, periods: 4, busy: [[0, 4]] }), { allowConflicts: true })
  t.equal(h.overcommittedSlots, 8)
  t.same(h.node(0).intervals(), [[6, 10], [16, 20], [26, 30], [36, 40]])
  t.ok(h.release('a'))
  t.same(h.node(0).intervals(), [[0, 4], [6, 14], [16, 24], [26, 34], [36, 40]], 'b keeps its held slots')
  t.ok(h.release('b'))
  t.same(h.node(0).intervals(), [[0, 40]])
  t.equal(h.profile.minFree(0, 40), 1)
})

t.test('conflict costs between residents add to their predicted slowdown and leave with either job', async t => {
  const h = new ClusterHorizon({ nodes: 1, slots: 1000 })
  const r = (jobId: string, planSlowdown: number) => ({ jobId, nodes: [0], footprint: { startSlot: 0, periodSlots: 100, periods: 5, busy: [[0, 10]] as Array<[number, number]> }, basePeriodSlots: 100, dedicated: false, maxSlowdown: 2, planSlowdown })
  h.reserve(r('a', 1.05))
  h.reserve(r('b', 1.1), { allowConflicts: true })
  h.reserve(r('c', 1), { allowConflicts: true })
  h.addConflictCosts([{ jobId: 'a', fromJobId: 'b', slowdown: 0.1 }, { jobId: 'b', fromJobId: 'a', slowdown: 0.05 }, { jobId: 'a', fromJobId: 'c', slowdown: 0.02 }, { jobId: 'a', fromJobId: 'gone', slowdown: 1 }])
  t.equal(h.predictedSlowdown('a'), 1.05 + 0.1 + 0.02)
  t.equal(h.predictedSlowdown('b'), 1.1 + 0.05)
  t.equal(h.predictedSlowdown('c'), 1)
  t.equal(h.predictedSlowdown('nobody'), 1)
  h.release('b')
  t.equal(h.predictedSlowdown('a'), 1.05 + 0.02, 'the departed job no longer costs anything')
  h.advanceTo(1000)
  t.equal(h.predictedSlowdown('a'), 1, 'a finished reservation is forgotten')
})
