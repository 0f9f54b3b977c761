import t from 'tap'
import { createSeededRandom } from '../../core/seeded-random.ts'

t.test('the same seed gives the same sequence; different seeds differ', async t => {
  const a = createSeededRandom(42)
  const b = createSeededRandom(42)
  const c = createSeededRandom(43)
  const sa = Array.from({ length: 20 }, () => a.next())
  const sb = Array.from({ length: 20 }, () => b.next())
  const sc = Array.from({ length: 20 }, () => c.next())
  t.same(sa, sb)
  t.notSame(sa, sc)
  t.ok(sa.every(x => x >= 0 && x < 1))
  t.equal(createSeededRandom(-1).seed, 0xffffffff)
  t.throws(() => createSeededRandom(1.5), RangeError)
})

t.test('int covers its inclusive range roughly uniformly', async t => {
  const r = createSeededRandom(7)
  const counts = [0, 0, 0, 0, 0]
  for (let i = 0; i < 10_000; i++) counts[r.int(0, 4)]!++
  for (const n of counts) t.ok(n > 1800 && n < 2200, `bucket count ${n} near 2000`)
  t.throws(() => r.int(3, 2), RangeError)
})

t.test('weightedIndex, pick, exponential, shuffled', async t => {
  const r = createSeededRandom(1)
  const counts = [0, 0, 0]
  for (let i = 0; i < 10_000; i++) counts[r.weightedIndex([1, 0, 3])]!++
  t.equal(counts[1], 0)
  t.ok(counts[2]! > 2.5 * counts[0]!, `3:1 weights gave ${counts[2]}:${counts[0]}`)
  t.throws(() => r.weightedIndex([0, 0]), RangeError)
  t.throws(() => r.pick([]), RangeError)
  let sum = 0
  for (let i = 0; i < 20_000; i++) sum += r.exponential(5)
  t.ok(Math.abs(sum / 20_000 - 5) < 0.2, `mean ${sum / 20_000} near 5`)
  const items = [1, 2, 3, 4, 5, 6]
  const s = r.shuffled(items)
  t.same([...s].sort(), items)
  t.same(items, [1, 2, 3, 4, 5, 6])
})
