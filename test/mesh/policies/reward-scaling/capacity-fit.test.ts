// Capacity-aware plans: the wanted workers cut down to the cores and GPUs the cluster has, every stage with
// work keeping a worker where capacity allows, the rest split where the simulated completion drops most.
import t from 'tap'
import { fitWorkersToCapacity } from '../../../../mesh/policies/reward-scaling/capacity-fit.ts'
import { createRewardScalingPolicy } from '../../../../mesh/policies/reward-scaling/policies.ts'
import { placeRewardWorkers } from '../../../../mesh/policies/reward-scaling/worker-placement.ts'
import type { ActiveBatch, BatchHistory, InFlightRequest, PlannerSnapshot, RewardStage } from '../../../../mesh/policies/reward-scaling/types.ts'

const cpuStage = (name: string): RewardStage => ({ name, resource: 'cpu', cost: 1, timeoutS: 60 })
const twoStages = [cpuStage('parse'), cpuStage('verify')]
const batch = (over: Partial<ActiveBatch> = {}): ActiveBatch => ({ task: 'a', index: 0, startS: 0, size: 8, completed: 0, priorityS: 120, inFlight: [], ...over })
const snapshot = (stages: RewardStage[], batches: ActiveBatch[], history: Record<string, BatchHistory> = {}): PlannerSnapshot =>
  ({ nowS: 0, stages, maxExtraDelayS: 1, batches, history, seed: 7 })
const queuedAt = (stage: number, n: number): InFlightRequest[] => Array.from({ length: n }, () => ({ stage, elapsedS: null, queuedSinceS: 0 }))
const wantedBy = (s: PlannerSnapshot): number[] => createRewardScalingPolicy('distrs').decide(s).pools[0]!.workers.slice()

t.test('two stages, 2 cores, a first batch of 8: one worker each, not 2 for the first and none for the second', async t => {
  const s = snapshot(twoStages, [batch({ inFlight: queuedAt(0, 8) })])
  const wanted = wantedBy(s)
  t.same(wanted, [8, 8], 'unconstrained, the policy wants the batch size at each stage (no history)')
  const node = { id: 'n1', cpuCores: 2, gpus: 0, stages: ['parse', 'verify'] }
  const placementStages = twoStages.map(st => ({ ...st, coresPerWorker: 1 }))
  t.same(placeRewardWorkers(placementStages, wanted, [node], {}).workers, { n1: { parse: 2 } }, 'placed as wanted, the last stage gets nothing (the stall)')

  const fit = fitWorkersToCapacity(s, wanted, { cpuCores: 2, gpus: 0, unitsPerWorker: [1, 1] })
  t.same(fit.workers, [1, 1], 'both stages keep a worker')
  t.equal(fit.capacityBound, true)
  t.same(fit.shortBy, [7, 7], 'by how much the plan is cut')
  t.same(fit.waiting, [])
  t.same(placeRewardWorkers(placementStages, fit.workers, [node], {}).workers, { n1: { parse: 1, verify: 1 } }, 'and the fitted plan places both')
})

t.test('a big batch with history: the cores go where the simulated completion drops most', async t => {
  // 40 requests at once, parse 3 s and verify 1 s each. With 4 cores, 3 parse workers hand verify 3 requests every
  // 3 s (the last one at 42 s), which 1 verify worker keeps up with: 43 s. 2 + 2 takes 62 s, 1 + 3 121 s.
  const history: BatchHistory = { requests: Array.from({ length: 40 }, () => ({ offsetS: 0, stageS: [3, 1] })) }
  const s = snapshot(twoStages, [batch({ index: 1, size: 40, priorityS: 4 })], { a: history })
  const wanted = wantedBy(s)
  t.ok(wanted[0]! + wanted[1]! > 4, `the policy wants more than 4 cores (${wanted.join(' + ')})`)
  const fit = fitWorkersToCapacity(s, wanted, { cpuCores: 4, gpus: 0, unitsPerWorker: [1, 1] })
  t.same(fit.workers, [3, 1])
  t.ok(fit.predictedCompletionS !== null && Math.abs(fit.predictedCompletionS - 43) < 1e-6, `predicted completion ${fit.predictedCompletionS} s`)
  const two = fitWorkersToCapacity(s, wanted, { cpuCores: 2, gpus: 0, unitsPerWorker: [1, 1] })
  t.same(two.workers, [1, 1], 'with 2 cores still one worker per stage')

  t.same(fitWorkersToCapacity(s, [2, 1], { cpuCores: 4, gpus: 0, unitsPerWorker: [1, 1] }),
    { workers: [2, 1], capacityBound: false, shortBy: [0, 0], waiting: [], predictedCompletionS: 62 }, 'a plan that fits is kept')
  const twoCoreWorkers = fitWorkersToCapacity(s, wanted, { cpuCores: 4, gpus: 0, unitsPerWorker: [2, 1] })
  t.same(twoCoreWorkers.workers, [1, 2], 'a parse worker holding 2 cores: after one of each, the 4th core fits only another verify worker')
  t.same(fitWorkersToCapacity(s, wanted, { cpuCores: 0, gpus: 0, unitsPerWorker: [1, 1] }).workers, wanted, 'no capacity reported yet: left as wanted (placed once an agent reports)')
})

t.test('cpu and gpu stages are fitted separately', async t => {
  const stages: RewardStage[] = [cpuStage('parse'), { name: 'judge', resource: 'gpu', cost: 10, timeoutS: 60 }]
  const s = snapshot(stages, [batch({ inFlight: queuedAt(0, 8) })])
  const fit = fitWorkersToCapacity(s, [8, 8], { cpuCores: 16, gpus: 2, unitsPerWorker: [1, 1] })
  t.same(fit.workers, [8, 2], 'the cores suffice for parse; the GPUs are cut to 2')
  t.same(fit.shortBy, [0, 6])
})

t.test('more stages with work than cores: stages take turns, downstream first, and every request gets through', async t => {
  const stages = [cpuStage('a'), cpuStage('b'), cpuStage('c')]
  const capacity = { cpuCores: 2, gpus: 0, unitsPerWorker: [1, 1, 1] }
  const atStart = fitWorkersToCapacity(snapshot(stages, [batch({ inFlight: queuedAt(0, 8) })]), [8, 8, 8], capacity)
  t.same(atStart.workers, [1, 1, 0], 'all requests at the first stage: it and the next get the two cores')
  t.same(atStart.waiting, [2], 'the third stage is reported waiting for its turn')
  const later = fitWorkersToCapacity(snapshot(stages, [batch({ inFlight: [...queuedAt(0, 3), ...queuedAt(2, 2)], completed: 3 })]), [8, 8, 8], capacity)
  t.same(later.workers, [1, 0, 1], 'requests at the first and last stage: the last one is served first, then the first')
  t.same(later.waiting, [1])

  // The leader re-plans whenever requests wait at a stage without a worker; model that round by round:
  // each stage with w workers moves min(w, queued) requests one stage on. Nothing may stall.
  const at = [8, 0, 0]
  let done = 0
  let rounds = 0
  while (done < 8) {
    const inFlight = at.flatMap((n, k) => queuedAt(k, n))
    const fit = fitWorkersToCapacity(snapshot(stages, [batch({ inFlight, completed: done })]), [8, 8, 8], capacity)
    t.ok(fit.workers.reduce((a, b) => a + b, 0) <= 2, 'never more than the 2 cores')
    const moved = fit.workers.map((w, k) => Math.min(w, at[k]!))
    if (moved.every(m => m === 0)) { t.fail(`round ${rounds}: no stage with requests has a worker (${at.join('/')} queued, workers ${fit.workers.join('/')})`); break }
    for (let k = stages.length - 1; k >= 0; k--) {
      at[k]! -= moved[k]!
      if (k + 1 < stages.length) at[k + 1]! += moved[k]!
      else done += moved[k]!
    }
    if (++rounds > 100) { t.fail('did not drain in 100 rounds'); break }
  }
  t.equal(done, 8, `all 8 requests through the 3 stages in ${rounds} rounds`)
})

t.test('bad input is refused', async t => {
  t.throws(() => fitWorkersToCapacity(snapshot(twoStages, [batch()]), [1], { cpuCores: 2, gpus: 0, unitsPerWorker: [1, 1] }), RangeError)
})
