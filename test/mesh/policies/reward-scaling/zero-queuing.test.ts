import t from 'tap'
import { zeroQueuingWorkers } from '../../../../mesh/policies/reward-scaling/zero-queuing.ts'

const req = (readyS: number, stageS: number[]) => ({ batch: 0, readyS, stageS, running: false })

t.test('peak concurrency per stage when nothing waits; a worker freed at t serves a start at t', async t => {
  // compile: [0,2) [1,3) [2,4) → peak 2; execute: [2,3) [3,4) [4,9) → peak 1.
  t.same(zeroQueuingWorkers([req(0, [2, 1]), req(1, [2, 1]), req(2, [2, 5])], 2), [2, 1])
  // Skipped stages do not count; a request skipping compile executes from its arrival.
  t.same(zeroQueuingWorkers([req(0, [0, 3]), req(1, [0, 3]), req(0, [1, 0])], 2), [1, 2])
  t.same(zeroQueuingWorkers([], 2), [0, 0])
})
