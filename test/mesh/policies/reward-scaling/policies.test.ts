// The four scaling policies (and the static one used for Fig. 14) on hand-checkable snapshots.
import t from 'tap'
import { createRewardScalingPolicy, dedicatedPoolId, sharedPoolId, staticAllocationPolicy } from '../../../../mesh/policies/reward-scaling/policies.ts'
import type { ActiveBatch, BatchHistory, PlannerSnapshot, RewardStage } from '../../../../mesh/policies/reward-scaling/types.ts'

const stages: RewardStage[] = [{ name: 'run', resource: 'gpu', cost: 1, timeoutS: 10 }]
// Previous batch: arrivals 0.5, 0.5, 1.5, 1.5, 2.5 after the start; T offset = 2.5 + 4 = 6.5.
const history: BatchHistory = { requests: [[0.5, 2], [0.5, 2], [1.5, 1], [1.5, 1], [2.5, 4]].map(([offsetS, s]) => ({ offsetS: offsetS!, stageS: [s!] })) }
const batch = (over: Partial<ActiveBatch> = {}): ActiveBatch => ({ task: 'a', index: 1, startS: 0, size: 5, completed: 0, priorityS: 6.5, inFlight: [], ...over })
const snapshot = (batches: ActiveBatch[], histories: Record<string, BatchHistory> = { a: history }): PlannerSnapshot =>
  ({ nowS: 0, stages, maxExtraDelayS: 1, batches, history: histories, seed: 1 })

t.test('history (no timeout check) queues up to T + D; distrs refuses any queuing that could outlast it', async t => {
  // 2 workers: the last request runs 3.5–7.5 = T + D. With the check, a request queued at 1.5
  // could run to 1.5 + 10 > 7.5, so nothing may queue: 4 workers.
  const historyDecision = createRewardScalingPolicy('history').decide(snapshot([batch()]))
  t.same(historyDecision, { pools: [{ id: sharedPoolId, tasks: 'all', workers: [2] }], estimatedRequests: 5 })
  t.same(createRewardScalingPolicy('distrs').decide(snapshot([batch()])).pools[0]!.workers, [4])
})

t.test('ideal sizes for the true remaining requests', async t => {
  const exactRemaining = [{ batch: 0, readyS: 0.5, stageS: [2], running: false }, { batch: 0, readyS: 3, stageS: [1], running: false }]
  const ideal = createRewardScalingPolicy('ideal')
  t.equal(ideal.perfectKnowledge, true)
  t.same(ideal.decide(snapshot([batch({ exactRemaining })])).pools[0]!.workers, [1])
  t.equal(ideal.batchPriorityS({ startS: 0, history, stages, exactEarliestS: 4 }), 4, 'its EBF priority is the true T')
  t.equal(createRewardScalingPolicy('distrs').batchPriorityS({ startS: 100, history, stages, exactEarliestS: 4 }), 106.5, 'distrs estimates T from history (Eq. 1–2)')
})

t.test('zq-dedicated: one pool per task at its previous batch\'s zero-queuing peak', async t => {
  const other: BatchHistory = { requests: [{ offsetS: 1, stageS: [3] }, { offsetS: 5, stageS: [3] }] }
  const policy = createRewardScalingPolicy('zq-dedicated')
  t.equal(policy.discipline, 'fcfs')
  const decision = policy.decide({ ...snapshot([batch(), batch({ task: 'b', size: 2 })], { a: history, b: other }), nowS: 2 })
  t.same(decision.pools, [
    { id: dedicatedPoolId('a'), tasks: ['a'], workers: [4] },
    { id: dedicatedPoolId('b'), tasks: ['b'], workers: [1] },
  ], 'decided from the batch start, whatever the time now')
})

t.test('a batch without history adds its size to every stage; no active batch holds nothing; never fewer than 1', async t => {
  for (const name of ['distrs', 'history'] as const) {
    const policy = createRewardScalingPolicy(name)
    t.same(policy.decide(snapshot([])), { pools: [], estimatedRequests: 0 })
    t.same(policy.decide(snapshot([batch({ task: 'new', size: 7 })])).pools[0]!.workers, [7], `${name}: no history, B workers`)
    t.same(policy.decide(snapshot([batch({ completed: 5 })])).pools[0]!.workers, [1], `${name}: nothing left to estimate, still 1 worker`)
  }
  t.same(createRewardScalingPolicy('zq-dedicated').decide(snapshot([batch({ task: 'new', size: 7 })])).pools, [{ id: dedicatedPoolId('new'), tasks: ['new'], workers: [7] }])
  t.equal(createRewardScalingPolicy('distrs').batchPriorityS({ startS: 5, history: undefined, stages }), 15)
})

t.test('the static allocation holds its workers while a batch is active', async t => {
  const fixed = staticAllocationPolicy([3], 'fcfs')
  t.same(fixed.decide(snapshot([batch()])).pools, [{ id: sharedPoolId, tasks: 'all', workers: [3] }])
  t.same(fixed.decide(snapshot([])).pools, [])
})

t.test('history is scaled by batch size: after 320-request batches a 64-request batch is planned like one after 64-request batches (issue 27, item 9)', async t => {
  const verify: RewardStage[] = [{ name: 'verify', resource: 'cpu', cost: 1, timeoutS: 10 }]
  // A trainer's requests arrive over 2 s whatever the batch size; each runs 0.3–0.78 s.
  const historyOf = (n: number): BatchHistory => ({ requests: Array.from({ length: n }, (_, i) => ({ offsetS: i * 2 / n, stageS: [0.3 + ((i * 7919) % 13) * 0.04] })) })
  const policy = createRewardScalingPolicy('distrs')
  const plan = (history: BatchHistory, size: number): number => {
    const priorityS = policy.batchPriorityS({ startS: 100, history, stages: verify })
    return policy.decide({ nowS: 100, stages: verify, maxExtraDelayS: 1, batches: [{ task: 't', index: 1, startS: 100, size, completed: 0, priorityS, inFlight: [] }], history: { t: history }, seed: 1 }).pools[0]!.workers[0]!
  }
  const afterSmall = plan(historyOf(64), 64)
  const afterBig = plan(historyOf(320), 64)
  t.ok(afterSmall >= 10 && afterSmall <= 30, `64 after 64: ${afterSmall} workers`)
  t.ok(Math.abs(afterBig - afterSmall) <= 3, `64 after 320: ${afterBig} workers, about the same (before: 63, the latest 64 of 320 as a burst)`)
  const bigAfterSmall = plan(historyOf(64), 320)
  t.ok(Math.abs(bigAfterSmall - plan(historyOf(320), 320)) <= 10, `320 after 64: ${bigAfterSmall} workers, about what 320 after 320 gets`)
})
