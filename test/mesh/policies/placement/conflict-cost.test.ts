import t from 'tap'
import { conflictSlowdown, meanBlockSlots, pairConflicts } from '../../../../mesh/policies/placement/conflict-cost.ts'
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
