import t from 'tap'
import { createEventQueue } from '../../core/event-queue.ts'

t.test('runs events in time order, ties in scheduling order, with the clock at each event', async t => {
  const q = createEventQueue()
  const seen: string[] = []
  q.at(2, () => seen.push(`b@${q.nowS}`))
  q.at(1, () => seen.push(`a@${q.nowS}`))
  q.at(2, () => seen.push(`c@${q.nowS}`))
  q.after(0.5, () => { seen.push(`x@${q.nowS}`); q.after(2, () => seen.push(`y@${q.nowS}`)) })
  t.equal(q.pending, 4)
  t.equal(q.runUntil(), 5)
  t.same(seen, ['x@0.5', 'a@1', 'b@2', 'c@2', 'y@2.5'])
  t.equal(q.pending, 0)
})

t.test('runUntil stops at the horizon and advances the clock; cancel removes an event', async t => {
  const q = createEventQueue(10)
  const seen: number[] = []
  const e = q.at(11, () => seen.push(11))
  q.at(12, () => seen.push(12))
  q.at(20, () => seen.push(20))
  q.cancel(e)
  q.cancel(e)
  t.equal(q.pending, 2)
  t.equal(q.runUntil(15), 1)
  t.equal(q.nowS, 15)
  t.same(seen, [12])
  t.throws(() => q.at(14, () => {}), /cannot schedule at 14s: now is 15s/)
  t.throws(() => q.after(-1, () => {}), RangeError)
  t.throws(() => q.at(Number.NaN, () => {}), RangeError)
})

t.test('many random events come out sorted (heap property)', async t => {
  const q = createEventQueue()
  let x = 12345
  const rand = (): number => { x = (x * 1103515245 + 12345) % 2 ** 31; return x / 2 ** 31 }
  const out: number[] = []
  for (let i = 0; i < 5000; i++) q.at(rand() * 100, () => out.push(q.nowS))
  q.runUntil()
  t.equal(out.length, 5000)
  t.ok(out.every((v, i) => i === 0 || out[i - 1]! <= v), 'non-decreasing times')
})
