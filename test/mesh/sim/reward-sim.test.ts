// The reward-service replay: decisions, accounting, extra delay, and agreement with the planner's SIMULATE.
import t from 'tap'
import { simulateRewardService, type DecisionRecord } from '../../../mesh/sim/reward-sim.ts'
import { generateRewardTrace } from '../../../mesh/sim/reward-trace-generator.ts'
import type { RewardTrace } from '../../../mesh/sim/reward-trace.ts'
import { createRewardScalingPolicy, idealTimeoutAwarePolicy, rewardPolicyNames, staticAllocationPolicy } from '../../../mesh/policies/reward-scaling/policies.ts'
import { prepareBatchSimulation } from '../../../mesh/policies/reward-scaling/batch-simulation.ts'
import type { RewardScalingPolicy, ScalingDecision } from '../../../mesh/policies/reward-scaling/types.ts'

// One CPU stage; batch 0 is history, batch 1 starts at 100 with arrivals 100.5, 100.5, 101.5, 101.5, 102.5.
const shape: Array<[number, number]> = [[0.5, 2], [0.5, 2], [1.5, 1], [1.5, 1], [2.5, 4]]
const handTrace: RewardTrace = {
  stages: [{ name: 'run', resource: 'cpu', cost: 1, timeoutS: 10 }],
  maxExtraDelayS: 1,
  tasks: [{ id: 'a', batches: [0, 100].map(startS => ({ startS, requests: shape.map(([r, s]) => ({ arrivalS: startS + r, stageS: [s] })) })) }],
}

t.test('static workers: completion, extra delay and worker-seconds by hand', async t => {
  const result = simulateRewardService(handTrace, staticAllocationPolicy([2], 'fcfs'))
  // 100.5–102.5 ×2, 102.5–103.5 ×2, 103.5–107.5: T = 106.5, done 107.5.
  t.same(result.batches, [{ task: 'a', index: 1, earliestS: 106.5, completedS: 107.5, extraDelayS: 1 }])
  t.equal(result.cpuSeconds, 2 * 7, 'two workers held from the first arrival (100.5) to the completion')
  t.equal(result.gpuSeconds, 0)
  t.equal(result.avgExtraDelayS, 1)
  t.equal(result.maxExtraDelayS, 1)
  t.match(result.planner, { calls: 2, maxRequests: 0 })
})

t.test('the live dispatch overhead lengthens every stage a request runs, the worker busy meanwhile', async t => {
  const seen: number[][] = []
  const fixed = staticAllocationPolicy([2], 'fcfs')
  const recording: RewardScalingPolicy = { ...fixed, decide: s => { seen.push(s.history.a!.requests.map(r => r.stageS[0]!)); return fixed.decide(s) } }
  const result = simulateRewardService(handTrace, recording, { workers: { startS: 0, keepWarmS: 0, startConcurrency: Infinity, dispatchS: 0.25 } })
  // 100.5–102.75 ×2, 102.75–104 ×2, 104–108.25: T = 106.5 as without overhead.
  t.same(result.batches, [{ task: 'a', index: 1, earliestS: 106.5, completedS: 108.25, extraDelayS: 1.75 }])
  t.equal(result.cpuSeconds, 2 * 7.75)
  t.same(seen[0], [2.25, 2.25, 1.25, 1.25, 4.25], 'the planner\'s history holds stage times as live measures them, overhead included')
  t.throws(() => simulateRewardService(handTrace, staticAllocationPolicy([2], 'fcfs'), { workers: { startS: 0, keepWarmS: 0, startConcurrency: 1, dispatchS: -0.1 } }), /dispatch overhead .* got -0.1/)
})

t.test('distrs decides when the batch arrives (its first request) and when it completes', async t => {
  const records: DecisionRecord[] = []
  const result = simulateRewardService(handTrace, createRewardScalingPolicy('distrs'), { onDecision: r => records.push(r) })
  t.same(records.map(r => [r.atS, r.reason, r.task, r.index, r.decision.pools.map(p => p.workers)]), [
    [100.5, 'batch-arrival', 'a', 1, [[4]]],
    [106.5, 'batch-complete', 'a', 1, []],
  ])
  t.equal(result.batches[0]!.extraDelayS, 0)
  t.equal(result.cpuSeconds, 4 * 6, 'nothing is held during the rollout before the first request (the hint hides warm-up)')
  t.equal(result.planner.maxRequests, 5)
})

t.test('a worker scaled away finishes its request and counts until then', async t => {
  const trace: RewardTrace = {
    stages: [{ name: 'run', resource: 'gpu', cost: 1, timeoutS: 20 }],
    maxExtraDelayS: 0,
    tasks: ['a', 'b'].map((id, k) => ({
      id,
      batches: [0, 100].map(startS => ({ startS, requests: [{ arrivalS: startS, stageS: [k === 0 ? 10 : 2] }] })),
    })),
  }
  // Two workers while both batches run, none otherwise (the pool stays, so a's request can wait in it).
  const shrinking: RewardScalingPolicy = {
    ...staticAllocationPolicy([0], 'fcfs'),
    decide: (s): ScalingDecision => ({ pools: [{ id: 'p', tasks: 'all', workers: [s.batches.length === 2 ? 2 : 0] }], estimatedRequests: 0 }),
  }
  const result = simulateRewardService(trace, shrinking)
  t.same(result.batches.map(b => [b.task, b.completedS, b.extraDelayS]), [['a', 110, 0], ['b', 102, 0]])
  t.equal(result.gpuSeconds, 2 * 2 + 1 * 8, 'the busy worker is held 102–110 although the target is 0')
})

t.test('live workers: decided at the hint, started one at a time, kept warm between batches', async t => {
  const paced = simulateRewardService(handTrace, staticAllocationPolicy([2], 'fcfs'), { workers: { startS: 1, keepWarmS: 0, startConcurrency: 1 } })
  // Up at 101 and 102: 101–103, 102–104 (s=2), 103–104, 104–105 (s=1), 104–108 (s=4); T = 106.5.
  t.same(paced.batches, [{ task: 'a', index: 1, earliestS: 106.5, completedS: 108, extraDelayS: 1.5 }])
  t.equal(paced.cpuSeconds, 1 * 1 + 2 * 7, 'one worker starting from the hint (100), two from 101 (the second starting) to the completion')

  // One request per batch, s = 2; a worker while a batch is active.
  const twoBatches: RewardTrace = {
    stages: [{ name: 'run', resource: 'cpu', cost: 1, timeoutS: 10 }],
    maxExtraDelayS: 1,
    tasks: [{ id: 'a', batches: [0, 100, 105].map(startS => ({ startS, requests: [{ arrivalS: startS, stageS: [2] }] })) }],
  }
  const records: DecisionRecord[] = []
  const warm = simulateRewardService(twoBatches, staticAllocationPolicy([1], 'fcfs'), { workers: { startS: 1, keepWarmS: 10, startConcurrency: 4 }, onDecision: r => records.push(r) })
  t.same(records.map(r => [r.atS, r.reason, r.index]), [[100, 'batch-start', 1], [100, 'batch-arrival', 1], [103, 'batch-complete', 1], [105, 'batch-start', 2], [105, 'batch-arrival', 2], [107, 'batch-complete', 2]])
  t.same(warm.batches.map(b => [b.completedS, b.extraDelayS]), [[103, 1], [107, 0]], 'the second batch finds its worker warm')
  t.equal(warm.cpuSeconds, 117 - 100, 'held from the hint until the keep-warm after the last batch ran out')
  const cold = simulateRewardService(twoBatches, staticAllocationPolicy([1], 'fcfs'), { workers: { startS: 1, keepWarmS: 0, startConcurrency: 4 } })
  t.same(cold.batches.map(b => [b.completedS, b.extraDelayS]), [[103, 1], [108, 1]], 'without keep-warm each batch waits for a start')
  t.equal(cold.cpuSeconds, 3 + 3)
  t.throws(() => simulateRewardService(twoBatches, staticAllocationPolicy([1], 'fcfs'), { workers: { startS: -1, keepWarmS: 0, startConcurrency: 4 } }), /start-up time/, 'the replay checks the life cycle it is given')
})

t.test('replayHistory: the first batch runs as live runs it, planned cold, and leaves its workers warm for the next', async t => {
  // One request per batch, s = 2; batch 1's hint comes while batch 0's worker is still warm.
  const trace: RewardTrace = {
    stages: [{ name: 'run', resource: 'cpu', cost: 1, timeoutS: 10 }],
    maxExtraDelayS: 1,
    tasks: [{ id: 'a', batches: [0, 3].map(startS => ({ startS, requests: [{ arrivalS: startS, stageS: [2] }] })) }],
  }
  const fixed = staticAllocationPolicy([1], 'fcfs')
  const histories: Array<[number, number | undefined]> = []
  const recording: RewardScalingPolicy = { ...fixed, decide: s => { histories.push([s.nowS, s.history.a?.requests.length]); return fixed.decide(s) } }
  const workers = { startS: 1, keepWarmS: 10, startConcurrency: 4 }
  const replayed = simulateRewardService(trace, recording, { workers, replayHistory: true })
  // Batch 0: hint at 0, worker up at 1, runs 1-3. Batch 1 (hint and arrival at 3) takes the warm worker: 3-5, T = 5.
  t.same(replayed.batches, [{ task: 'a', index: 1, earliestS: 5, completedS: 5, extraDelayS: 0 }], 'only the second batch is reported; it finds a warm worker')
  t.same(histories[0], [0, undefined], 'the first batch is planned without history (a cold start)')
  t.same(histories.at(-1), [5, 1], 'the second with the first batch\'s, as it ran')
  t.equal(replayed.cpuSeconds, 15, 'held from the first hint until the keep-warm after the last batch ran out; the first batch\'s worker counts')
  const historyOnly = simulateRewardService(trace, fixed, { workers })
  t.same(historyOnly.batches, [{ task: 'a', index: 1, earliestS: 5, completedS: 6, extraDelayS: 1 }], 'without it the second batch starts cold')
})

t.test('the replay and the planner\'s SIMULATE agree on batch completions (EBF and FCFS)', async t => {
  for (let seed = 1; seed <= 12; seed++) {
    const trace = generateRewardTrace({ tasks: 2, batchSize: 40, iterations: 2, seed, staggerS: 30 })
    const workers = [1 + seed % 6, 1 + seed % 3]
    for (const discipline of ['ebf', 'fcfs'] as const) {
      const policy = staticAllocationPolicy(workers, discipline)
      const replay = simulateRewardService(trace, policy)
      const priorities = trace.tasks.map(task => policy.batchPriorityS({
        startS: task.batches[1]!.startS,
        history: { requests: task.batches[0]!.requests.map(r => ({ offsetS: r.arrivalS - task.batches[0]!.startS, stageS: r.stageS })) },
        stages: trace.stages,
      }))
      const requests = trace.tasks.flatMap((task, b) => task.batches[1]!.requests.map(r => ({ batch: b, readyS: r.arrivalS, stageS: r.stageS, running: false })))
      const planned = prepareBatchSimulation({ stages: trace.stages, requests, batchPriorityS: priorities, maxExtraDelayS: 0, discipline, timeoutAware: false }).run(workers)
      t.same(replay.batches.map(b => b.completedS), planned.batchCompletionS, `seed ${seed} ${discipline} ${workers}`)
    }
  }
})

t.test('every policy replays a generated trace; ideal keeps every batch within D', async t => {
  const trace = generateRewardTrace({ tasks: 2, batchSize: 48, iterations: 3, seed: 4, maxExtraDelayS: 1 })
  for (const name of rewardPolicyNames) {
    const result = simulateRewardService(trace, createRewardScalingPolicy(name))
    t.equal(result.policy, name)
    t.equal(result.batches.length, 4)
    t.ok(result.batches.every(b => b.completedS >= b.earliestS && b.extraDelayS >= 0), `${name}: no batch before its T`)
    t.ok(result.cpuSeconds > 0 && result.gpuSeconds > 0)
    t.equal(result.planner.calls, 8)
    if (name === 'ideal') t.ok(result.maxExtraDelayS <= trace.maxExtraDelayS + 1e-9, `ideal max extra delay ${result.maxExtraDelayS}`)
  }
  const again = simulateRewardService(trace, createRewardScalingPolicy('distrs'))
  const first = simulateRewardService(trace, createRewardScalingPolicy('distrs'))
  t.same({ ...again, planner: null }, { ...first, planner: null }, 'deterministic apart from planner wall time')
})

t.test('the held-workers timeline integrates to the worker-seconds; ideal+check keeps every batch within D', async t => {
  const trace = generateRewardTrace({ tasks: 2, batchSize: 48, iterations: 3, seed: 4, maxExtraDelayS: 1 })
  for (const policy of [createRewardScalingPolicy('distrs'), idealTimeoutAwarePolicy()]) {
    const result = simulateRewardService(trace, policy, { recordAllocation: true })
    const timeline = result.allocation!
    const integral = { cpu: 0, gpu: 0 }
    for (let i = 0; i + 1 < timeline.length; i++) {
      integral.cpu += timeline[i]!.cpu * (timeline[i + 1]!.atS - timeline[i]!.atS)
      integral.gpu += timeline[i]!.gpu * (timeline[i + 1]!.atS - timeline[i]!.atS)
    }
    t.ok(Math.abs(integral.cpu - result.cpuSeconds) < 1e-6 * result.cpuSeconds && Math.abs(integral.gpu - result.gpuSeconds) < 1e-6 * result.gpuSeconds, `${policy.name}: timeline matches`)
    t.same(timeline.at(-1)!, { atS: timeline.at(-1)!.atS, cpu: 0, gpu: 0 }, 'nothing held at the end')
    if (policy.name === 'ideal+check') t.ok(result.maxExtraDelayS <= trace.maxExtraDelayS + 1e-9, `ideal+check max extra delay ${result.maxExtraDelayS}`)
  }
  t.equal(simulateRewardService(trace, createRewardScalingPolicy('distrs')).allocation, undefined, 'not recorded unless asked')
})

t.test('a policy that leaves an active batch without workers is an error, not a hang', async t => {
  const none: RewardScalingPolicy = { ...staticAllocationPolicy([0], 'fcfs'), name: 'none', decide: () => ({ pools: [], estimatedRequests: 0 }) }
  t.throws(() => simulateRewardService(handTrace, none), /policy none gave task a no pool while its batch is active/)
  const zero: RewardScalingPolicy = { ...staticAllocationPolicy([0], 'fcfs'), name: 'zero' }
  t.throws(() => simulateRewardService(handTrace, zero), /policy zero left 5 requests of 1 batches without workers/)
  const broken: RewardScalingPolicy = { ...staticAllocationPolicy([1.5], 'fcfs'), name: 'broken' }
  t.throws(() => simulateRewardService(handTrace, broken), /pool shared needs 1 whole worker counts, got \[1.5\]/)
})

t.test('the paper\'s qualitative claims hold on a small trace (the figures are in test/bench/reward-scaling.bench.ts)', async t => {
  const trace = generateRewardTrace({ tasks: 3, batchSize: 256, iterations: 4, seed: 1 })
  const [distrs, zq, history] = (['distrs', 'zq-dedicated', 'history'] as const).map(name => simulateRewardService(trace, createRewardScalingPolicy(name)))
  t.ok(distrs!.gpuSeconds * 2 < zq!.gpuSeconds, `distrs ${distrs!.gpuSeconds.toFixed(0)} GPU-s vs zq-dedicated ${zq!.gpuSeconds.toFixed(0)}`)
  t.ok(distrs!.cpuSeconds * 1.5 < zq!.cpuSeconds, `distrs ${distrs!.cpuSeconds.toFixed(0)} CPU-s vs zq-dedicated ${zq!.cpuSeconds.toFixed(0)}`)
  t.ok(history!.avgExtraDelayS > 5 * distrs!.avgExtraDelayS, `history ${history!.avgExtraDelayS.toFixed(2)} s vs distrs ${distrs!.avgExtraDelayS.toFixed(2)} s average extra delay`)
  t.ok(history!.gpuSeconds <= distrs!.gpuSeconds, 'without the timeout check fewer GPUs are held')
})
