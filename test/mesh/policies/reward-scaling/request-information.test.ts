// DistRS Algorithm 2: Future, Queuing_k and Running_k requests from the previous batch.
import t from 'tap'
import { collectRequestInformation, earliestCompletionOffsetS, estimatedBatchCompletionS, exactRequestInformation } from '../../../../mesh/policies/reward-scaling/request-information.ts'
import type { ActiveBatch, BatchHistory, PlannerSnapshot, RewardStage } from '../../../../mesh/policies/reward-scaling/types.ts'

const stages: RewardStage[] = [
  { name: 'compile', resource: 'cpu', cost: 1, timeoutS: 20 },
  { name: 'execute', resource: 'gpu', cost: 4, timeoutS: 10 },
]
const history: BatchHistory = {
  requests: [
    { offsetS: 10, stageS: [5, 2] },
    { offsetS: 20, stageS: [8, 0] },
    { offsetS: 30, stageS: [0, 0] },
    { offsetS: 40, stageS: [6, 3] },
  ],
}
const batch = (over: Partial<ActiveBatch>): ActiveBatch => ({ task: 'a', index: 1, startS: 100, size: 4, completed: 0, priorityS: 149, inFlight: [], ...over })
const snapshot = (batches: ActiveBatch[], seed = 1, nowS = 125): PlannerSnapshot => ({ nowS, stages, maxExtraDelayS: 1, batches, history: { a: history }, seed })

t.test('Eq. 1–2 over the history: T offset = max(r_i + Σ s_ij)', async t => {
  t.equal(earliestCompletionOffsetS(history), 49)
  t.equal(estimatedBatchCompletionS(100, history, stages), 149)
  t.equal(estimatedBatchCompletionS(100, undefined, stages), 130, 'no history: a request running every stage to its timeout')
})

t.test('Future: the historical requests still to come, at AT + r_i', async t => {
  // Two requests arrived and finished; two are still to come: those at 130 and 140.
  const { requests, withoutHistory } = collectRequestInformation(snapshot([batch({ completed: 2 })]))
  t.same(withoutHistory, [])
  t.same(requests, [
    { batch: 0, readyS: 140, stageS: [6, 3], running: false },
    { batch: 0, readyS: 130, stageS: [0, 0], running: false },
  ])
})

t.test('Future count comes from the batch: behind its history the missing ones arrive now, ahead of it the earliest are dropped', async t => {
  const behind = collectRequestInformation(snapshot([batch({ completed: 1 })])).requests
  t.same(behind.map(r => r.readyS), [140, 130, 125], 'three to come; the one recorded at 120 arrives now')
  const ahead = collectRequestInformation(snapshot([batch({ completed: 3 })])).requests
  t.same(ahead.map(r => r.readyS), [140], 'one to come: the latest')
})

t.test('Future from the history scaled to the batch size: a smaller batch spreads over the same span, a larger one repeats each request', async t => {
  const smaller = collectRequestInformation(snapshot([batch({ size: 2 })], 1, 100)).requests
  t.same(smaller.map(r => r.readyS), [130, 110], 'two of four, evenly spaced: not the latest two (140, 130)')
  const larger = collectRequestInformation(snapshot([batch({ size: 8 })], 1, 100)).requests
  t.same(larger.map(r => r.readyS), [140, 140, 130, 130, 120, 120, 110, 110], 'eight from four: each twice')
  const same = collectRequestInformation(snapshot([batch({ size: 4 })], 1, 100)).requests
  t.same(same.map(r => r.readyS), [140, 130, 120, 110], 'the size recorded: the history itself')
})

t.test('Queuing_k: sampled among requests that reached stage k; Running_k: among those with s_ik > e_ik', async t => {
  for (let seed = 1; seed <= 30; seed++) {
    const inFlight = [
      { stage: 1, elapsedS: null, queuedSinceS: 120 },
      { stage: 0, elapsedS: 5.5 },
      { stage: 0, elapsedS: 9 },
    ]
    const { requests } = collectRequestInformation(snapshot([batch({ size: 3, inFlight })], seed))
    const [queued, running, beyond] = requests
    t.match(queued, { readyS: 125, running: false, queuedSinceS: 120 })
    t.ok([[0, 2], [0, 3]].some(s => JSON.stringify(s) === JSON.stringify(queued!.stageS)), `queued at execute: ${queued!.stageS}`)
    t.match(running, { readyS: 125, running: true })
    t.ok([[2.5, 0], [0.5, 3]].some(s => JSON.stringify(s) === JSON.stringify(running!.stageS)), `running 5.5 s at compile: ${running!.stageS}`)
    t.same(beyond, { batch: 0, readyS: 125, stageS: [11, 0], running: true }, 'longer than any recorded: bounded by the timeout, 20 − 9')
  }
})

t.test('sampling is seeded: same seed, same estimate; the seed changes it', async t => {
  const inFlight = Array.from({ length: 20 }, () => ({ stage: 0, elapsedS: 1 }))
  const a = collectRequestInformation(snapshot([batch({ size: 20, inFlight })], 7)).requests
  const b = collectRequestInformation(snapshot([batch({ size: 20, inFlight })], 7)).requests
  const c = collectRequestInformation(snapshot([batch({ size: 20, inFlight })], 8)).requests
  t.same(a, b)
  t.notSame(a, c)
})

t.test('a batch without history is reported, not estimated; exact information needs exactRemaining', async t => {
  const lone: PlannerSnapshot = { ...snapshot([batch({}), batch({ task: 'new' })]) }
  const { requests, withoutHistory } = collectRequestInformation(lone)
  t.same(withoutHistory, [1])
  t.ok(requests.every(r => r.batch === 0))
  t.throws(() => exactRequestInformation(lone), /batch a#1 has no exactRemaining/)
  const exact = exactRequestInformation(snapshot([batch({ exactRemaining: [{ batch: 9, readyS: 126, stageS: [1, 1], running: false }] })]))
  t.same(exact, [{ batch: 0, readyS: 126, stageS: [1, 1], running: false }])
})
