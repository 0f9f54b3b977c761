// The live life cycle of the reward simulator's workers: start-up time and pacing, keep-warm, and what is given up first.
import t from 'tap'
import { createEventQueue } from '../../../core/event-queue.ts'
import { checkWorkerLifecycle, createStageWorkers, createStartPacer, type WorkerLifecycle } from '../../../mesh/sim/stage-workers.ts'

function harness (lifecycle: WorkerLifecycle) {
  const queue = createEventQueue()
  const pacer = createStartPacer(queue, lifecycle)
  let held = 0
  const ready: number[] = []
  const workers = createStageWorkers(queue, lifecycle, pacer, { held: d => { held += d }, ready: () => ready.push(queue.nowS) })
  const at = (s: number, fn: () => void): void => { queue.at(s, fn) }
  const snapshot = (): [number, number] => [workers.capacity, held]
  return { queue, workers, at, snapshot, ready, held: () => held }
}

t.test('starts are paced; a start given up while under way turns warm once up, one not begun is withdrawn', async t => {
  const h = harness({ startS: 1, keepWarmS: 5, startConcurrency: 2 })
  const seen: Array<[number, number, number]> = []
  const look = (s: number): void => h.at(s, () => seen.push([s, ...h.snapshot()]))
  h.at(0, () => h.workers.setTarget(3))
  look(0)
  h.at(0.5, () => h.workers.setTarget(1))
  look(0.5)
  look(1.01)
  look(5.9)
  look(6.1)
  h.queue.runUntil()
  t.same(seen, [
    [0, 0, 2], // two starting (concurrency 2), the third waits for a slot and is not held
    [0.5, 0, 2], // the waiting start is withdrawn; one under way is no longer wanted
    [1.01, 2, 2], // both up: one wanted, one warm (serving until 6)
    [5.9, 2, 2],
    [6.1, 1, 1],
  ])
  t.same(h.ready, [1, 1], 'each worker that came up was announced')
  t.equal(h.workers.target, 1)
})

t.test('a warm worker serves again at once; a busy worker beyond the wanted ones is held until it finishes', async t => {
  const h = harness({ startS: 2, keepWarmS: 0, startConcurrency: Infinity })
  h.at(0, () => h.workers.setTarget(1))
  h.at(2, () => { h.workers.take(); h.workers.setTarget(0) })
  const seen: Array<[number, number, number]> = []
  h.at(2.5, () => seen.push([2.5, ...h.snapshot()]))
  h.at(3, () => { h.workers.release(); seen.push([3, ...h.snapshot()]) })
  h.queue.runUntil()
  t.same(seen, [[2.5, 0, 1], [3, 0, 0]], 'no keep-warm: the stopped worker counts while its request runs, then not')

  const w = harness({ startS: 2, keepWarmS: 10, startConcurrency: Infinity })
  w.at(0, () => w.workers.setTarget(1))
  w.at(3, () => w.workers.setTarget(0))
  w.at(4, () => w.workers.setTarget(1))
  const after: Array<[number, number, number]> = []
  w.at(4, () => after.push([4, ...w.snapshot()]))
  w.at(100, () => after.push([100, ...w.snapshot()]))
  w.queue.runUntil()
  t.same(after, [[4, 1, 1], [100, 1, 1]], 'wanted again within its keep-warm: up at once, and its expiry no longer applies')
  t.same(w.ready, [2], 'no second start')
})

t.test('the ideal life cycle changes workers at once', async t => {
  const h = harness({ startS: 0, keepWarmS: 0, startConcurrency: Infinity })
  h.workers.setTarget(4)
  t.same(h.snapshot(), [4, 4])
  h.workers.setTarget(1)
  t.same(h.snapshot(), [1, 1])
  t.same(h.ready, [], 'no start events')
})

t.test('a life cycle with a bad figure is refused with what is wrong', async t => {
  t.throws(() => checkWorkerLifecycle({ startS: -1, keepWarmS: 0, startConcurrency: 1 }), /start-up time .* got -1/)
  t.throws(() => checkWorkerLifecycle({ startS: 0, keepWarmS: Number.NaN, startConcurrency: 1 }), /keep-warm time/)
  t.throws(() => checkWorkerLifecycle({ startS: 0, keepWarmS: 0, startConcurrency: 0 }), /start concurrency .* got 0/)
  t.throws(() => checkWorkerLifecycle({ startS: 0, keepWarmS: 0, startConcurrency: 1.5 }), /start concurrency/)
  t.same(checkWorkerLifecycle({ startS: 0.3, keepWarmS: 60, startConcurrency: Infinity }), { startS: 0.3, keepWarmS: 60, startConcurrency: Infinity })
})
