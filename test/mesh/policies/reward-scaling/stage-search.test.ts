// DistRS Algorithm 1: stage order by cost, binary search per stage between 1 and B.
import t from 'tap'
import { prepareBatchSimulation, type BatchSimulation } from '../../../../mesh/policies/reward-scaling/batch-simulation.ts'
import { searchStageWorkers } from '../../../../mesh/policies/reward-scaling/stage-search.ts'
import type { RewardStage } from '../../../../mesh/policies/reward-scaling/types.ts'

const stages: RewardStage[] = [
  { name: 'compile', resource: 'cpu', cost: 1, timeoutS: 100 },
  { name: 'execute', resource: 'gpu', cost: 8, timeoutS: 100 },
]

t.test('searches the costliest stage first with the others at B (lines 6–17)', async t => {
  const calls: number[][] = []
  // A stand-in SIMULATE: satisfied when compile >= 3 and execute >= 2.
  const fake: BatchSimulation = {
    stageDemand: [10, 5],
    meetsConstraint (workers) { calls.push([...workers]); return workers[0]! >= 3 && workers[1]! >= 2 },
    run () { throw new Error('not used') },
  }
  t.same(searchStageWorkers(fake, stages, { passes: 1 }), [3, 2])
  // execute (cost 8) first: mid of [1,5] = 3 ok, [1,3] → 2 ok, [1,2] → 1 fails → 2; then compile: 5 ok, 3 ok, 2 fails → 3.
  t.same(calls, [[10, 3], [10, 2], [10, 1], [5, 2], [3, 2], [2, 2]])
  calls.length = 0
  t.same(searchStageWorkers(fake, stages), [3, 2], 'separable: the second pass changes nothing')
  t.same(calls.slice(6), [[3, 1]], 'it re-searches execute below its count; compile saw no other count change, so it is not searched again')
})

t.test('the second pass sizes the costliest stage again with the cheaper ones at their counts', async t => {
  // A stand-in where fewer compile workers smooth execute's arrivals: execute needs 4 with compile at B, 2 once compile <= 6.
  const fake: BatchSimulation = {
    stageDemand: [10, 8],
    meetsConstraint: (w) => w[0]! >= 3 && w[1]! >= (w[0]! <= 6 ? 2 : 4),
    run () { throw new Error('not used') },
  }
  t.same(searchStageWorkers(fake, stages, { passes: 1 }), [3, 4], 'Alg. 1 as written: execute sized against compile at B')
  t.same(searchStageWorkers(fake, stages), [3, 2])
  t.throws(() => searchStageWorkers(fake, stages, { passes: 0 }), RangeError)
})

t.test('a non-monotone SIMULATE: the result is satisfied and one worker fewer is not', async t => {
  // Execute satisfied at 2, 5, 6, 7, 8 (not 3, 4): the search lands on 5, never on an unsatisfied count.
  const ok = new Set([2, 5, 6, 7, 8])
  const fake: BatchSimulation = { stageDemand: [0, 8], meetsConstraint: (w) => ok.has(w[1]!), run () { throw new Error('not used') } }
  const workers = searchStageWorkers(fake, stages)
  t.ok(ok.has(workers[1]!) && !ok.has(workers[1]! - 1), `execute ${workers[1]}`)
})

t.test('a stage no request needs gets 0 workers and is not searched', async t => {
  const calls: number[][] = []
  const fake: BatchSimulation = { stageDemand: [4, 0], meetsConstraint (w) { calls.push([...w]); return w[0]! >= 4 }, run () { throw new Error('not used') } }
  t.same(searchStageWorkers(fake, stages), [4, 0])
  t.ok(calls.every(w => w[1] === 0))
})

t.test('on a real SIMULATE the result is the fewest workers of each stage that meet the constraint', async t => {
  // Eight compile-and-execute requests arriving one per second; T = 7 + 5 + 1 = 13, deadline 15.
  // execute: one GPU serves them back to back. compile: with 3 workers the last one
  // compiles 11–16 and finishes at 17; with 4 it compiles 8–13 and finishes at 14.
  const requests = Array.from({ length: 8 }, (_, i) => ({ batch: 0, readyS: i, stageS: [5, 1], running: false }))
  const sim = prepareBatchSimulation({ stages, requests, batchPriorityS: [13], maxExtraDelayS: 2, discipline: 'fcfs', timeoutAware: false })
  const workers = searchStageWorkers(sim, stages)
  t.same(workers, [4, 1])
  t.equal(sim.meetsConstraint(workers), true)
  t.equal(sim.meetsConstraint([workers[0]! - 1, workers[1]!]), false)
})
