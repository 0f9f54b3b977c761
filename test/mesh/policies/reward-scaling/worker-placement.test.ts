import t from 'tap'
import { placeRewardWorkers, type PlacementNode } from '../../../../mesh/policies/reward-scaling/worker-placement.ts'

const stages = [
  { name: 'verify', resource: 'cpu' as const, coresPerWorker: 2, cost: 1 },
  { name: 'judge', resource: 'gpu' as const, coresPerWorker: 1, cost: 10 },
]
const nodes: PlacementNode[] = [
  { id: 'a', cpuCores: 4, gpus: 1, stages: ['verify', 'judge'] },
  { id: 'b', cpuCores: 8, gpus: 2, stages: ['verify', 'judge'] },
  { id: 'c', cpuCores: 16, gpus: 0, stages: ['judge'] },
]

t.test('spreads within each node\'s cores and GPUs, reports what does not fit', async t => {
  const r = placeRewardWorkers(stages, [7, 4], nodes, {})
  t.same(r.workers, { a: { verify: 2, judge: 1 }, b: { verify: 4, judge: 2 } })
  t.same(r.unplaced, { verify: 1, judge: 1 }, 'node c runs no verify and has no GPU')
})

t.test('sticky when scaling up, removes from the fullest node when scaling down', async t => {
  const up = placeRewardWorkers(stages, [3, 1], nodes, { a: { verify: 1 }, b: { judge: 1 } })
  t.same(up.workers, { a: { verify: 1 }, b: { verify: 2, judge: 1 } })
  const down = placeRewardWorkers(stages, [1, 0], nodes, up.workers)
  t.same(down.workers, { a: { verify: 1 } })
  t.same(placeRewardWorkers(stages, [0, 0], nodes, down.workers).workers, {}, 'no batch: nothing held')
})

t.test('a node that shrank or left sheds its workers', async t => {
  const r = placeRewardWorkers(stages, [2, 0], [{ id: 'a', cpuCores: 2, gpus: 0, stages: ['verify'] }], { a: { verify: 2, judge: 1 }, gone: { verify: 5 } })
  t.same(r.workers, { a: { verify: 1 } })
  t.same(r.unplaced, { verify: 1 })
})
