/**
 * DistRS acceptance figures (issue "Reward service scaling"), every policy
 * measured against its baseline in the same run:
 *
 * 1. resources: a generated trace of 6 concurrent tasks x batch 2048 x 11
 *    iterations (batch 0 of each task is history, 10 replayed). Goals:
 *    distrs uses >= 3x fewer GPU-seconds and >= 1.8x fewer CPU-seconds than
 *    zq-dedicated with average extra delay <= 1 s per batch (DistRS Fig. 10:
 *    3.79x, 1.98x, 0.62 s); history shows clearly more extra delay than
 *    distrs (Fig. 13b); ideal for reference.
 * 2. ebf: two batches, the second starting 100 s after the first, CPU fixed
 *    large, GPUs swept; EBF needs fewer GPUs than FCFS for the same extra
 *    delay (Fig. 14: 1.5x).
 * 3. planner: one distrs decision over 16,000 estimated requests < 200 ms
 *    (DistRS Fig. 15: about 2 s); history and zq-dedicated decisions on the
 *    same snapshot for comparison. Wall and CPU time (the CPU time is the
 *    fairer number on a shared machine).
 *
 *   node_modules/.bin/node test/bench/reward-scaling.bench.ts [--part all|resources|ebf|planner] [--seed 1] [--iterations 11] [--runs 7]
 */
import { parseArgs } from 'node:util'
import { createRewardScalingPolicy, rewardPolicyNames, staticAllocationPolicy } from '../../mesh/policies/reward-scaling/policies.ts'
import type { ActiveBatch, BatchHistory } from '../../mesh/policies/reward-scaling/types.ts'
import { simulateRewardService, type RewardSimulationResult } from '../../mesh/sim/reward-sim.ts'
import { generateRewardTrace } from '../../mesh/sim/reward-trace-generator.ts'
import type { RewardTrace } from '../../mesh/sim/reward-trace.ts'
import { median } from './bench-stats.ts'

const { values } = parseArgs({
  options: {
    part: { type: 'string', default: 'all' },
    seed: { type: 'string', default: '1' },
    iterations: { type: 'string', default: '11' },
    runs: { type: 'string', default: '7' },
  },
})
const seed = Number(values.seed)
const part = values.part!

if (part === 'all' || part === 'resources') resources()
if (part === 'all' || part === 'ebf') earliestBatchFirstVersusFcfs()
if (part === 'all' || part === 'planner') plannerTime()

function resources (): void {
  const iterations = Number(values.iterations)
  const trace = generateRewardTrace({ tasks: 6, batchSize: 2048, iterations, seed })
  console.log(`\n== resources: 6 tasks x 2048 x ${iterations} iterations (${iterations - 1} replayed), seed ${seed}, D = ${trace.maxExtraDelayS} s`)
  const results = new Map<string, RewardSimulationResult>()
  for (const name of rewardPolicyNames) results.set(name, simulateRewardService(trace, createRewardScalingPolicy(name)))
  const zq = results.get('zq-dedicated')!
  const busy = busySeconds(trace)
  console.log(`busy (work actually done): cpu ${busy.cpu.toFixed(0)} s, gpu ${busy.gpu.toFixed(0)} s`)
  console.log('policy        cpu-s        gpu-s      zq/cpu  zq/gpu  gpu/busy  avg d (s)  p90 d  max d   planner mean/max ms')
  for (const [name, r] of results) {
    const delays = r.batches.map(b => b.extraDelayS).sort((a, b) => a - b)
    console.log(`${name.padEnd(12)}  ${r.cpuSeconds.toFixed(0).padStart(10)}  ${r.gpuSeconds.toFixed(0).padStart(10)}  ` +
      `${(zq.cpuSeconds / r.cpuSeconds).toFixed(2).padStart(6)}  ${(zq.gpuSeconds / r.gpuSeconds).toFixed(2).padStart(6)}  ` +
      `${(r.gpuSeconds / busy.gpu).toFixed(2).padStart(8)}  ${r.avgExtraDelayS.toFixed(2).padStart(9)}  ${delays[Math.floor(0.9 * (delays.length - 1))]!.toFixed(2).padStart(5)}  ` +
      `${r.maxExtraDelayS.toFixed(2).padStart(5)}   ${r.planner.meanMs.toFixed(0)}/${r.planner.maxMs.toFixed(0)}`)
  }
  const distrs = results.get('distrs')!
  const history = results.get('history')!
  console.log(`distrs vs zq-dedicated: ${(zq.gpuSeconds / distrs.gpuSeconds).toFixed(2)}x fewer GPU-s (goal >= 3), ${(zq.cpuSeconds / distrs.cpuSeconds).toFixed(2)}x fewer CPU-s (goal >= 1.8), ` +
    `avg extra delay ${distrs.avgExtraDelayS.toFixed(2)} s (goal <= 1)`)
  console.log(`history vs distrs: avg extra delay ${history.avgExtraDelayS.toFixed(2)} s vs ${distrs.avgExtraDelayS.toFixed(2)} s (goal: clearly higher)`)
}

function earliestBatchFirstVersusFcfs (): void {
  // Two tasks from one generated trace (batch 0 = history, batch 1 replayed),
  // the second task shifted so its replayed batch starts exactly 100 s after the first's.
  const full = generateRewardTrace({ tasks: 2, batchSize: 2048, iterations: 2, seed })
  const [first, second] = full.tasks.map(task => task.batches)
  const shiftS = first![1]!.startS + 100 - second![1]!.startS
  const trace: RewardTrace = {
    ...full,
    tasks: [
      { id: 'first', batches: first! },
      { id: 'second', batches: second!.map(b => ({ startS: b.startS + shiftS, requests: b.requests.map(r => ({ ...r, arrivalS: r.arrivalS + shiftS })) })) },
    ],
  }
  const cpuWorkers = 2 * 2048
  console.log(`\n== ebf vs fcfs: two batches of 2048, the second 100 s after the first, ${cpuWorkers} CPU workers, seed ${seed}`)
  console.log('gpus  ebf avg d (first, second)      fcfs avg d (first, second)')
  const sweep: Array<{ gpus: number, ebf: number, fcfs: number }> = []
  for (let gpus = 4; ; gpus += 2) {
    const ebf = simulateRewardService(trace, staticAllocationPolicy([cpuWorkers, gpus], 'ebf'))
    const fcfs = simulateRewardService(trace, staticAllocationPolicy([cpuWorkers, gpus], 'fcfs'))
    sweep.push({ gpus, ebf: ebf.avgExtraDelayS, fcfs: fcfs.avgExtraDelayS })
    const pair = (r: RewardSimulationResult): string => `${r.avgExtraDelayS.toFixed(2).padStart(8)} (${r.batches.map(b => b.extraDelayS.toFixed(1)).join(', ')})`
    console.log(`${String(gpus).padStart(4)}  ${pair(ebf).padEnd(28)}  ${pair(fcfs)}`)
    if (fcfs.avgExtraDelayS === 0 && ebf.avgExtraDelayS === 0) break
  }
  for (const target of [30, 10, 5, 1]) {
    const need = (key: 'ebf' | 'fcfs'): number => sweep.find(s => s[key] <= target)!.gpus
    console.log(`avg extra delay <= ${String(target).padStart(2)} s: ebf ${need('ebf')} GPUs, fcfs ${need('fcfs')} GPUs, ratio ${(need('fcfs') / need('ebf')).toFixed(2)}`)
  }
}

function plannerTime (): void {
  // 8 tasks x 2000 requests of history, all batches just started: 16,000 Future requests.
  const trace = generateRewardTrace({ tasks: 8, batchSize: 2000, iterations: 2, seed })
  const history: Record<string, BatchHistory> = {}
  for (const task of trace.tasks) {
    const start = task.batches[0]!.startS
    history[task.id] = { requests: task.batches[0]!.requests.map(r => ({ offsetS: r.arrivalS - start, stageS: r.stageS })) }
  }
  const nowS = Math.min(...trace.tasks.map(task => task.batches[1]!.startS))
  const runs = Number(values.runs)
  console.log(`\n== planner: one decision over 8 active batches x 2000 = 16,000 estimated requests, ${runs} runs after 1 warm-up`)
  for (const name of ['distrs', 'history', 'zq-dedicated'] as const) {
    const policy = createRewardScalingPolicy(name)
    const batches: ActiveBatch[] = trace.tasks.map(task => ({
      task: task.id, index: 1, startS: task.batches[1]!.startS, size: 2000, completed: 0, inFlight: [],
      priorityS: policy.batchPriorityS({ startS: task.batches[1]!.startS, history: history[task.id], stages: trace.stages }),
    }))
    const wallMs: number[] = []
    const cpuMs: number[] = []
    let decision
    for (let run = 0; run <= runs; run++) {
      const cpu = process.cpuUsage()
      const began = performance.now()
      decision = policy.decide({ nowS, stages: trace.stages, maxExtraDelayS: trace.maxExtraDelayS, batches, history, seed: run })
      const wall = performance.now() - began
      const used = process.cpuUsage(cpu)
      if (run === 0) continue
      wallMs.push(wall)
      cpuMs.push((used.user + used.system) / 1000)
    }
    console.log(`${name.padEnd(12)} ${decision!.estimatedRequests} requests  wall median ${median(wallMs).toFixed(1)} ms  cpu median ${median(cpuMs).toFixed(1)} ms  ` +
      `[${wallMs.map(ms => ms.toFixed(0)).join(', ')}]  workers ${JSON.stringify(decision!.pools.map(p => p.workers))}${decision!.pools.length > 1 ? ' (first pool of 8)' : ''}`)
  }
  console.log('goal: distrs < 200 ms')
}

function busySeconds (trace: RewardTrace): { cpu: number, gpu: number } {
  const busy = { cpu: 0, gpu: 0 }
  for (const task of trace.tasks) {
    for (const batch of task.batches.slice(1)) for (const r of batch.requests) r.stageS.forEach((s, j) => { busy[trace.stages[j]!.resource] += s })
  }
  return busy
}
