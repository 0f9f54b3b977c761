import t from 'tap'
import { ClusterHorizon } from '../../../../mesh/policies/placement/cluster-horizon.ts'
import { claimNodes, commitPlacement, planPlacement, residentFor, type PlacementJob } from '../../../../mesh/policies/placement/placement-policy.ts'

const job = (over: Partial<PlacementJob> = {}): PlacementJob => ({
  id: 'j', nodes: 1, periodS: 100, iterations: 10, segments: [{ offsetS: 60, durationS: 30 }], maxSlowdown: 1.5, profiled: true, switchS: 5, ...over,
})

function place (h: ClusterHorizon, j: PlacementJob, policy: 'isolated' | 'pack' | 'spread' | 'spread-backfill') {
  const d = planPlacement(h, j, { policy })
  if (d !== undefined) h.reserve(residentFor(d, j, h.slotS), { allowConflicts: !d.strict })
  return d
}

t.test('isolated and cold start take dedicated nodes for the whole job', async t => {
  const h = new ClusterHorizon({ nodes: 3, slots: 2000 })
  const a = place(h, job({ id: 'a', nodes: 2 }), 'isolated')!
  t.equal(a.mode, 'dedicated')
  t.same(a.nodes, [0, 1])
  t.same(a.footprint.busy, [[0, 1000]])
  t.equal(place(h, job({ id: 'b', nodes: 2 }), 'isolated'), undefined, 'only one idle node is left')
  const c = place(h, job({ id: 'c', profiled: false }), 'spread')!
  t.equal(c.mode, 'dedicated', 'a job without a trace cold-starts on dedicated nodes')
  t.same(c.nodes, [2])
  t.equal(planPlacement(h, job({ id: 'd' }), { policy: 'spread' }), undefined, 'dedicated nodes admit nobody')
  t.equal(planPlacement(h, job({ id: 'e', nodes: 4 }), { policy: 'pack' }), undefined, 'a gang larger than the cluster')
})

t.test('warm start fits the trace into the free windows of a shared node without overlap', async t => {
  const h = new ClusterHorizon({ nodes: 1, slots: 2000 })
  const a = place(h, job({ id: 'a' }), 'pack')!
  t.equal(a.mode, 'shared')
  t.equal(a.startSlot, 0)
  t.same(a.footprint.busy, [[55, 90]], 'segment padded in front by the 5 s switch cost (its prefetch window)')
  const b = place(h, job({ id: 'b' }), 'pack')!
  t.equal(b.conflictInstances, 0)
  t.same(b.nodes, [0])
  t.equal(a.stretchedPeriodSlots, 100, 'the switch is prefetched off the critical path: a shared job keeps its period')
  t.equal(b.stretchedPeriodSlots, 100)
  // b's block [φ+55, φ+90) must sit in a's free window [90, 155): φ in [35, 65]; the aligned phase is 35.
  t.equal(b.startSlot, 35)
  t.equal(b.costSlots, 35, 'Eq. (1): the start delay')
  t.equal(b.predictedSlowdown, 1)
  const c = place(h, job({ id: 'c' }), 'pack')
  t.equal(c?.conflictInstances ?? 0, 0)
  if (c !== undefined) t.ok(c.predictedSlowdown <= 1.5)
})

t.test('micro-shifts move a later segment into a free window and stretch the period within maxSlowdown', async t => {
  const h = new ClusterHorizon({ nodes: 1, slots: 1000 })
  // Resident busy [0, 50) of every 110-slot period (its period is already stretched).
  h.reserve({ jobId: 'r', nodes: [0], footprint: { startSlot: 0, periodSlots: 110, periods: 100, busy: [[0, 50]] }, basePeriodSlots: 100, dedicated: false, maxSlowdown: 2 })
  const j = job({ id: 'n', periodS: 100, iterations: 5, segments: [{ offsetS: 0, durationS: 20 }, { offsetS: 30, durationS: 20 }], switchS: 0, maxSlowdown: 1.2 })
  const d = planPlacement(h, j, { policy: 'spread' })!
  t.ok(d, 'placed')
  t.equal(d.conflictInstances, 0)
  t.equal(d.stretchedPeriodSlots, 110, 'commensurate with the resident')
  t.ok(d.predictedSlowdown <= 1.2)
  for (let k = 0; k < 5; k++) {
    for (const [s, e] of d.footprint.busy) {
      const a = d.footprint.startSlot + k * 110 + s
      t.ok(h.node(0).fits(a, d.footprint.startSlot + k * 110 + e), `period ${k} block [${s}, ${e}) is free`)
    }
  }
  const tight = planPlacement(h, { ...j, maxSlowdown: 1.05 }, { policy: 'spread' })
  t.ok(tight === undefined || tight.predictedSlowdown <= 1.05, 'admission honours maxSlowdown')
})

t.test('pack prefers loaded nodes, spread the least interference and load', async t => {
  const build = () => {
    const h = new ClusterHorizon({ nodes: 3, slots: 2000 })
    // The resident runs at the newcomer's period, so both fit side by side.
    h.reserve({ jobId: 'r', nodes: [1], footprint: { startSlot: 0, periodSlots: 100, periods: 20, busy: [[0, 30]] }, basePeriodSlots: 100, dedicated: false, maxSlowdown: 2 })
    return h
  }
  const j = job({ id: 'x', segments: [{ offsetS: 40, durationS: 20 }] })
  t.same(planPlacement(build(), j, { policy: 'pack' })!.nodes, [1])
  t.same(planPlacement(build(), j, { policy: 'spread' })!.nodes, [0])
  t.same(planPlacement(build(), j, { policy: 'spread-backfill' })!.nodes, [0])
})

t.test('admission: no node whose resident already runs beyond its slowdown bound, and at most maxJobsPerNode', async t => {
  const h = new ClusterHorizon({ nodes: 1, slots: 2000 })
  h.reserve({ jobId: 'r', nodes: [0], footprint: { startSlot: 0, periodSlots: 100, periods: 20, busy: [[0, 10]] }, basePeriodSlots: 100, dedicated: false, maxSlowdown: 1.2 })
  const j = job({ id: 'x', segments: [{ offsetS: 40, durationS: 20 }] })
  t.ok(planPlacement(h, j, { policy: 'spread', observedSlowdown: new Map([['r', 1.1]]) }))
  t.equal(planPlacement(h, j, { policy: 'spread', observedSlowdown: new Map([['r', 1.3]]) }), undefined)
  t.equal(planPlacement(h, j, { policy: 'spread', maxJobsPerNode: 1 }), undefined)
})

t.test('incommensurate periods are admitted with a bounded conflict budget only', async t => {
  const h = new ClusterHorizon({ nodes: 1, slots: 28_800 })
  h.reserve({ jobId: 'r', nodes: [0], footprint: { startSlot: 0, periodSlots: 131, periods: 400, busy: [[0, 30]] }, basePeriodSlots: 131, dedicated: false, maxSlowdown: 2 })
  const j = job({ id: 'x', periodS: 150, iterations: 100, segments: [{ offsetS: 50, durationS: 25 }], maxSlowdown: 1.5 })
  const d = planPlacement(h, j, { policy: 'spread' })!
  t.ok(d.conflictInstances > 0, 'the phases drift: strict fitting is impossible')
  t.ok(d.predictedSlowdown <= 1.5, `predicted slowdown ${d.predictedSlowdown}`)
  t.equal(planPlacement(h, { ...j, maxSlowdown: 1 }, { policy: 'spread' }), undefined, 'no headroom, no conflicts admitted')
})

t.test('the same view and job give the same decision (pure)', async t => {
  const h = new ClusterHorizon({ nodes: 4, slots: 5000 })
  for (const id of ['a', 'b', 'c']) place(h, job({ id, nodes: 2 }), 'pack')
  const j = job({ id: 'z', nodes: 2 })
  t.same(planPlacement(h, j, { policy: 'spread' }), planPlacement(h, j, { policy: 'spread' }))
})

t.test('a shared job keeps its period: each block is reserved with its switch prefetched in front', async t => {
  const h = new ClusterHorizon({ nodes: 2, slots: 2000 })
  const two = job({ id: 'two', segments: [{ offsetS: 10, durationS: 20 }, { offsetS: 60, durationS: 20 }], switchS: 5 })
  const d = planPlacement(h, two, { policy: 'spread' })!
  t.equal(d.mode, 'shared')
  t.equal(d.stretchedPeriodSlots, 100)
  t.equal(d.predictedSlowdown, 1)
  t.same(d.shiftSlots, [0, 0], 'blocks at their profiled offsets')
  t.same(d.footprint.busy, [[5, 30], [55, 80]], 'each block padded by the switch before it')
  const early = planPlacement(h, job({ id: 'early', segments: [{ offsetS: 2, durationS: 20 }], switchS: 5 }), { policy: 'spread' })!
  t.same(early.footprint.busy, [[0, 22], [97, 100]], 'a prefetch window before the period start wraps to its end')
})

t.test('conflicts are charged both ways: a newcomer may not push a resident past its bound', async t => {
  const build = (maxSlowdown: number) => {
    const h = new ClusterHorizon({ nodes: 1, slots: 28_800 })
    h.reserve({ jobId: 'r', nodes: [0], footprint: { startSlot: 0, periodSlots: 131, periods: 400, busy: [[0, 30]] }, basePeriodSlots: 125, dedicated: false, maxSlowdown, planSlowdown: 131 / 125 })
    return h
  }
  const j = job({ id: 'x', periodS: 150, iterations: 100, segments: [{ offsetS: 50, durationS: 25 }], maxSlowdown: 1.5 })
  const loose = build(2)
  const d = planPlacement(loose, j, { policy: 'spread' })!
  t.equal(d.strict, false, 'incommensurate periods: conflicts admitted')
  const toResident = d.conflictCosts.find(c => c.jobId === 'r' && c.fromJobId === 'x')
  const toJob = d.conflictCosts.find(c => c.jobId === 'x' && c.fromJobId === 'r')
  t.ok(toResident !== undefined && toResident.slowdown > 0, 'the resident is charged')
  t.ok(toJob !== undefined && Math.abs(d.predictedSlowdown - d.stretchedPeriodSlots / 150 - toJob.slowdown) < 1e-9, 'the job is charged its share')
  commitPlacement(loose, d, j)
  t.ok(Math.abs(loose.predictedSlowdown('r') - (131 / 125 + toResident!.slowdown)) < 1e-9, 'committed: the resident\'s prediction rises')
  t.ok(Math.abs(loose.predictedSlowdown('x') - d.predictedSlowdown) < 1e-9)
  for (const bound of [131 / 125, 131 / 125 + toResident!.slowdown / 2]) {
    const other = planPlacement(build(bound), j, { policy: 'spread' })
    const cost = other?.conflictCosts.find(c => c.jobId === 'r')?.slowdown ?? 0
    t.ok(131 / 125 + cost <= bound + 1e-9, `a resident with bound ${bound.toFixed(3)} is never pushed past it (charged ${cost.toFixed(3)})`)
  }
  t.equal(planPlacement(build(131 / 125), j, { policy: 'spread' }), undefined, 'a resident without headroom refuses every conflicting newcomer')
  t.equal(planPlacement(build(2), j, { policy: 'spread', observedSlowdown: new Map([['r', 2 - toResident!.slowdown / 2]]) }), undefined, 'nor one already observed near its bound')
})

t.test('a backfill claim keeps the oldest waiting job\'s nodes for it: others may use them only if they end first', async t => {
  const h = new ClusterHorizon({ nodes: 3, slots: 5000 })
  // Node 0's resident ends at slot 930, node 1's at 2930; node 2 is idle.
  const resident = (id: string, node: number, periods: number) => h.reserve({ jobId: id, nodes: [node], footprint: { startSlot: 0, periodSlots: 100, periods, busy: [[0, 30]] }, basePeriodSlots: 100, dedicated: false, maxSlowdown: 2 })
  resident('r0', 0, 10)
  resident('r1', 1, 30)
  const head = job({ id: 'head', nodes: 2, profiled: false })
  t.equal(planPlacement(h, head, { policy: 'spread-backfill' }), undefined, 'the cold-start gang finds one idle node only')
  const claim = claimNodes(h, head, 0)!
  t.same(claim, { jobId: 'head', nodes: [0, 2], fromSlot: 930 }, 'the idle node and the one whose resident ends first, from that end')
  t.same(claimNodes(h, job({ id: 'one' }), 0), { jobId: 'one', nodes: [2], fromSlot: 0 }, 'an idle node is claimed from now')
  t.equal(claimNodes(h, job({ id: 'big', nodes: 4 }), 0), undefined, 'no claim for a gang larger than the cluster')

  const long = job({ id: 'long', iterations: 20 })
  t.same(planPlacement(h, long, { policy: 'spread-backfill' })!.nodes, [2], 'unclaimed, spread takes the idle node')
  t.same(planPlacement(h, long, { policy: 'spread-backfill', claim })!.nodes, [1], 'claimed: a job ending after the claim starts goes elsewhere')
  t.same(planPlacement(h, job({ id: 'short', iterations: 5 }), { policy: 'spread-backfill', claim })!.nodes, [2], 'a job ending before it backfills the idle node')
  t.same(planPlacement(h, long, { policy: 'spread-backfill', claim: { ...claim, jobId: 'long' } })!.nodes, [2], 'the claimant itself is not bound by its claim')
  t.equal(planPlacement(h, job({ id: 'cold', profiled: false }), { policy: 'spread-backfill', claim }), undefined, 'a dedicated placement honours the claim too')
  t.same(planPlacement(h, job({ id: 'cold', profiled: false, iterations: 9 }), { policy: 'spread-backfill', claim })!.nodes, [2], 'unless it ends by then')
})
