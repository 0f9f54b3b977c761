import t from 'tap'
import { conflictSlowdown, meanBlockSlots, pairConflicts, sampledPairConflicts } from '../../../../mesh/policies/placement/conflict-cost.ts'
import type { Footprint } from '../../../../mesh/policies/placement/footprint.ts'

const fp = (startSlot: number, periodSlots: number, busy: Array<[number, number]>, periods = 10): Footprint => ({ startSlot, periodSlots, periods, busy })

t.test('pairConflicts counts the overlapping instances of each footprint over the same sample', async t => {
  // a: [0,10) every 100; b: [5,15) every 200: b overlaps a's instances at 0, 200, 400.
  const c = pairConflicts(fp(0, 100, [[0, 10]]), fp(0, 200, [[5, 15]]), 0, 600)
  t.same(c, { aInstances: 6, aHits: 3, bInstances: 3, bHits: 3 })
  t.same(pairConflicts(fp(0, 100, [[0, 10]]), fp(0, 100, [[10, 20]]), 0, 1000), { aInstances: 10, aHits: 0, bInstances: 10, bHits: 0 }, 'touching blocks do not conflict')
  const drift = pairConflicts(fp(0, 100, [[0, 30]]), fp(50, 110, [[0, 30]]), 0, 1000)
  t.ok(drift.aHits > 0 && drift.aHits < drift.aInstances, 'incommensurate periods conflict in some periods only')
})

t.test('conflictSlowdown: κ · share of delayed instances · wait / period', async t => {
  t.equal(conflictSlowdown(3, 12, 40, 200, 1), 0.05)
  t.equal(conflictSlowdown(3, 12, 40, 200, 2), 0.1)
  t.equal(conflictSlowdown(0, 12, 40, 200, 1), 0)
  t.equal(conflictSlowdown(3, 0, 40, 200, 1), 0)
  t.equal(meanBlockSlots(fp(0, 100, [[0, 10], [50, 80]])), 20)
})

t.test('sampledPairConflicts spreads its windows over the range and sees the conflicts of drifting phases', async t => {
  // a: [0,20) every 100; b: [50,70) every 101: b drifts 1 slot a period against a and reaches it after ~30 periods.
  const a = fp(0, 100, [[0, 20]], 200)
  const b = fp(0, 101, [[50, 70]], 200)
  const first = pairConflicts(a, b, 0, 1200)
  t.equal(first.aHits, 0, 'the first 12 periods see no conflict')
  const spread = sampledPairConflicts(a, b, 0, 20_000, 4, 300)
  t.equal(spread.aInstances, 12, '4 windows of 3 periods')
  t.ok(spread.aHits > 0, `windows later in the range see the drifted phases (${spread.aHits} hits)`)
  const byHand = [0, 6567, 13_133, 19_700].map(x => pairConflicts(a, b, x, x + 300))
    .reduce((s, c) => ({ aInstances: s.aInstances + c.aInstances, aHits: s.aHits + c.aHits, bInstances: s.bInstances + c.bInstances, bHits: s.bHits + c.bHits }))
  t.same(spread, byHand, 'the sum of pairConflicts over the 4 evenly spread windows')
  t.same(sampledPairConflicts(a, b, 0, 1000, 4, 300), pairConflicts(a, b, 0, 1000), 'a range shorter than the windows is counted whole')
  t.same(sampledPairConflicts(a, b, 0, 20_000, 1, 300), pairConflicts(a, b, 0, 20_000), 'one window: the whole range')
})
