import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { mapConcurrently } from '../../../agent/state/map-concurrently.ts'

t.test('keeps order and the concurrency limit', async t => {
  let running = 0
  let peak = 0
  const out = await mapConcurrently([5, 1, 4, 2, 3], 2, async (x, i) => {
    running++
    peak = Math.max(peak, running)
    await sleep(x)
    running--
    return x * 10 + i
  })
  t.same(out, [50, 11, 42, 23, 34])
  t.equal(peak, 2)
  t.same(await mapConcurrently([], 4, async () => 1), [])
})

t.test('the first failure stops new work and is thrown after in-flight calls settle', async t => {
  const settled: number[] = []
  const started: number[] = []
  await t.rejects(mapConcurrently([0, 1, 2, 3, 4], 2, async x => {
    started.push(x)
    if (x === 1) throw new Error('boom')
    await sleep(20)
    settled.push(x)
    return x
  }), /boom/)
  t.same(started, [0, 1], 'nothing started after the failure')
  t.same(settled, [0], 'the call in flight finished before the rejection')
})
