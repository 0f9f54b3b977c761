// SIMULATE of DistRS Alg. 1 on cases small enough to check by hand.
import t from 'tap'
import { prepareBatchSimulation, type BatchSimulationInput } from '../../../../mesh/policies/reward-scaling/batch-simulation.ts'
import type { EstimatedRequest, RewardStage } from '../../../../mesh/policies/reward-scaling/types.ts'

const oneStage: RewardStage[] = [{ name: 'run', resource: 'gpu', cost: 1, timeoutS: 10 }]
const req = (readyS: number, stageS: number[], batch = 0, extra: Partial<EstimatedRequest> = {}): EstimatedRequest => ({ batch, readyS, stageS, running: false, ...extra })

// Five requests of one batch (the shape of DistRS Fig. 9): T = max(ready + s) = 2 + 4 = 6.
const figure9 = [req(0, [2]), req(0, [2]), req(1, [1]), req(1, [1]), req(2, [4])]
const input = (over: Partial<BatchSimulationInput>): BatchSimulationInput => ({
  stages: oneStage, requests: figure9, batchPriorityS: [6], maxExtraDelayS: 0, discipline: 'fcfs', timeoutAware: false, ...over,
})

t.test('queuing delays the batch: 2 workers finish at 7 (d = 1), 3 workers at 6 (d = 0)', async t => {
  const sim = prepareBatchSimulation(input({}))
  t.same(sim.stageDemand, [5])
  const two = sim.run([2])
  t.same(Array.from(two.stageStartS[0]!), [0, 0, 2, 2, 3], 'requests 2 and 3 wait for 0 and 1; 4 waits for them')
  t.same(two.batchEarliestS, [6])
  t.same(two.batchCompletionS, [7])
  t.equal(two.satisfied, false, 'd = 1 > D = 0')
  const three = sim.run([3])
  t.same(Array.from(three.stageStartS[0]!), [0, 0, 1, 2, 2])
  t.same(three.batchCompletionS, [6])
  t.equal(three.satisfied, true)
  t.equal(sim.meetsConstraint([2]), false)
  t.equal(sim.meetsConstraint([3]), true)
  t.equal(prepareBatchSimulation(input({ maxExtraDelayS: 1 })).meetsConstraint([2]), true, 'D = 1 tolerates d = 1')
})

t.test('timeout-aware check: a request found queued at ts fails when ts + Σ T_j > T + D', async t => {
  const sim = prepareBatchSimulation(input({ maxExtraDelayS: 1, timeoutAware: true }))
  // 2 workers: request 2 is queued at t = 1, LT = 1 + 10 = 11 > 6 + 1.
  const two = sim.run([2])
  t.same(two.timeoutViolation, { request: 2, stage: 0, atS: 1 })
  t.equal(two.satisfied, false)
  t.same(two.batchCompletionS, [7], 'a full run still simulates to the end')
  t.equal(sim.meetsConstraint([3]), false, 'request 3 is still queued at t = 1')
  t.equal(sim.meetsConstraint([4]), true, 'nothing queues with 4 workers')
  // With long enough slack the same queuing passes: T + D = 6 + 6 >= 1 + 10.
  t.equal(prepareBatchSimulation(input({ maxExtraDelayS: 6, timeoutAware: true })).meetsConstraint([2]), true)
})

t.test('the check sums the timeouts of the stage and every later one', async t => {
  const stages: RewardStage[] = [{ name: 'a', resource: 'cpu', cost: 1, timeoutS: 5 }, { name: 'b', resource: 'gpu', cost: 2, timeoutS: 7 }]
  // T = 20; the second request is queued at stage a at t = 0: LT = 0 + 5 + 7 = 12 <= 20 + 0.
  const requests = [req(0, [1, 1]), req(0, [1, 1]), req(18, [1, 1])]
  const sim = prepareBatchSimulation({ stages, requests, batchPriorityS: [20], maxExtraDelayS: 0, discipline: 'fcfs', timeoutAware: true })
  t.equal(sim.meetsConstraint([1, 3]), true)
  // A request that skips stage a holds stage b's only worker 18.5–19.5; the one leaving stage a at 19 queues there.
  const busy = [req(0, [1, 1]), req(18.5, [0, 1]), req(18, [1, 1])]
  const sim2 = prepareBatchSimulation({ stages, requests: busy, batchPriorityS: [20], maxExtraDelayS: 0, discipline: 'fcfs', timeoutAware: true })
  const out = sim2.run([1, 1])
  t.same(out.timeoutViolation, { request: 2, stage: 1, atS: 19 }, 'queued at stage b at 19: LT = 19 + 7 > 20')
})

t.test('Earliest-Batch-First serves the batch that must finish first; FCFS the earliest arrival', async t => {
  // One worker. Batch 0 (priority 10): 0–2 and a request at 0.5. Batch 1 (priority 5): a request at 1.
  const requests = [req(0, [2], 0), req(0.5, [1], 0), req(1, [1], 1)]
  const base = { stages: oneStage, requests, batchPriorityS: [10, 5], maxExtraDelayS: 0, timeoutAware: false }
  const fcfs = prepareBatchSimulation({ ...base, discipline: 'fcfs' }).run([1])
  t.same(Array.from(fcfs.stageStartS[0]!), [0, 2, 3])
  const ebf = prepareBatchSimulation({ ...base, discipline: 'ebf' }).run([1])
  t.same(Array.from(ebf.stageStartS[0]!), [0, 3, 2], 'batch 1 goes first at t = 2 although it arrived later')
  t.same(ebf.batchCompletionS, [4, 3])
  // Within one batch EBF is FCFS by queue entry.
  const sameBatch = [req(0, [2], 0), req(1, [1], 0), req(0.5, [1], 0)]
  t.same(Array.from(prepareBatchSimulation({ ...base, requests: sameBatch, discipline: 'ebf' }).run([1]).stageStartS[0]!), [0, 3, 2])
})

t.test('stages form a tandem line; a 0-second stage is skipped', async t => {
  const stages: RewardStage[] = [{ name: 'compile', resource: 'cpu', cost: 1, timeoutS: 100 }, { name: 'execute', resource: 'gpu', cost: 4, timeoutS: 100 }]
  const requests = [req(0, [3, 2]), req(1, [1, 5]), req(1, [0, 1]), req(2, [4, 0])]
  const out = prepareBatchSimulation({ stages, requests, batchPriorityS: [0], maxExtraDelayS: 0, discipline: 'fcfs', timeoutAware: false }).run([1, 1])
  // compile: r0 0–3, r1 3–4, r3 4–8 (r2 skips). execute: r2 1–2, r0 3–5, r1 5–10.
  t.same(Array.from(out.stageStartS[0]!), [0, 3, NaN, 4])
  t.same(Array.from(out.stageStartS[1]!), [3, 5, 1, NaN])
  t.same(Array.from(out.requestCompletionS), [5, 10, 2, 8])
  t.same(out.batchEarliestS, [7], 'T = max(0+3+2, 1+1+5, 1+0+1, 2+4+0)')
})

t.test('Running requests keep their workers even above the allocation; queued ones keep their rank', async t => {
  const requests = [
    req(0, [3], 0, { running: true }),
    req(0, [3], 0, { running: true }),
    req(0, [1], 0, { queuedSinceS: -2 }),
    req(0, [1], 0, { queuedSinceS: -5 }),
  ]
  const out = prepareBatchSimulation({ stages: oneStage, requests, batchPriorityS: [0], maxExtraDelayS: 0, discipline: 'fcfs', timeoutAware: false }).run([1])
  t.same(Array.from(out.stageStartS[0]!), [0, 0, 4, 3], 'both running start at once; the one queued since -5 goes first when a worker frees at 3')
})

t.test('a stage with 0 workers never completes its requests', async t => {
  const out = prepareBatchSimulation(input({ maxExtraDelayS: 100 })).run([0])
  t.equal(out.satisfied, false)
  t.same(out.batchCompletionS, [Infinity])
})

t.test('the deadline is max(T_start + D, E_b): earlier delay is not forgiven, the impossible not demanded', async t => {
  // The batch's T at its start was 5; its remaining requests cannot finish before 6.
  const late = prepareBatchSimulation(input({ batchEarliestS: [5], maxExtraDelayS: 0 }))
  t.equal(late.meetsConstraint([3]), true, 'E_b = 6 > 5: no queuing is all one can ask')
  const strict = prepareBatchSimulation(input({ batchEarliestS: [6], maxExtraDelayS: 0.5, requests: figure9.slice(0, 4) }))
  // Without request 4, E_b = 2; the start estimate 6 + 0.5 is the deadline, so 1 worker (done at 6) is enough.
  t.equal(strict.meetsConstraint([1]), true)
  t.equal(prepareBatchSimulation(input({ maxExtraDelayS: 0.5, requests: figure9.slice(0, 4) })).meetsConstraint([1]), false, 'E_b + D = 2.5 alone is stricter')
})

t.test('bad input is refused', async t => {
  t.throws(() => prepareBatchSimulation(input({ requests: [req(0, [1], 3)] })), /request 0 names batch 3, but there are 1 batches/)
  t.throws(() => prepareBatchSimulation(input({})).meetsConstraint([1, 2]), /need 1 worker counts, got 2/)
})
