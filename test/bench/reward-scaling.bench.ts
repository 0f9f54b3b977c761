/**
 * DistRS acceptance figures (issue "Reward service scaling"), every policy
 * measured against its baseline in the same run:
 *
 * 1. resources: a generated trace of 6 concurrent tasks x batch 2048 x 11
 *    iterations (batch 0 of each task is history, 10 replayed). Goals:
 *    distrs uses >= 3x fewer GPU-seconds and >= 1.8x fewer CPU-seconds than
 *    zq-dedicated with average extra delay <= 1 s per batch (DistRS Fig. 10:
 *    3.79x, 1.98x, 0.62 s); history shows clearly more extra delay than
 *    distrs (Fig. 13b); ideal for reference, and ideal+check (perfect
 *    knowledge with distrs's timeout-aware check), then GPU-s per wave.
 *
 *    What the GPU goal comes down to on this trace: distrs is within a few
 *    per cent of ideal+check, wave by wave (its history estimates, Alg. 2's
 *    sampling and T from the previous batch cost nothing measurable; T taken
 *    from the future instead moves it by -7 % to +5 % on seeds 1-3).
 *    The gap to ideal is the timeout-aware check itself (§5.1): a request
 *    found queued at stage k within Σ_{j>=k} T_j of its batch's T + D fails
 *    the allocation, and here a batch's last requests arrive at the
 *    generation cap and run compile + execute (~55 s) just before T, inside
 *    the execute window (60 s), while the other tasks' batches still peak. So
 *    those requests must find a free GPU the instant they arrive. zq-dedicated
 *    / ideal is 3.2-3.5x; zq-dedicated / (ideal+check) 2.6-3.0x on seeds 1-5;
 *    D (2 -> 6 s) changes it by about 1 %. Making capped (max-length)
 *    responses fail the text check, as a previous analysis proposed, does not
 *    help (seeds 1-3, same draws: GPU 2.98 / 2.77 / 2.70x -> 2.70 / 2.78 /
 *    2.37x, avg extra delay 0.23 / 0.08 / 0.09 -> 1.34 / 2.10 / 0.08 s), so
 *    the generator is unchanged.
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
import { createRewardScalingPolicy, idealTimeoutAwarePolicy, rewardPolicyNames, staticAllocationPolicy } from '../../mesh/policies/reward-scaling/policies.ts'
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
  for (const name of rewardPolicyNames) results.set(name, simulateRewardService(trace, createRewardScalingPolicy(name), { recordAllocation: true }))
  results.set('ideal+check', simulateRewardService(trace, idealTimeoutAwarePolicy(), { recordAllocation: true }))
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
  const check = results.get('ideal+check')!
  const ideal = results.get('ideal')!
  console.log(`where distrs's GPU-s go: ideal ${(ideal.gpuSeconds / busy.gpu).toFixed(2)} x busy; + the timeout-aware check with perfect knowledge (ideal+check) ` +
    `${(check.gpuSeconds / busy.gpu).toFixed(2)}; distrs (history estimates + the check) ${(distrs.gpuSeconds / busy.gpu).toFixed(2)}`)
  waveBreakdown(trace, results)
}

/**
 * GPU-seconds per iteration wave: wave k is batch k of every task (the tasks
 * run in step, staggered), from the first arrival of one of them to the last
 * completion under each policy; time is given to the lowest wave whose window
 * holds it. `timed-out T` counts the wave's batches whose critical request
 * (the one that sets T, Eq. 2) ran into a stage timeout.
 */
function waveBreakdown (trace: RewardTrace, results: Map<string, RewardSimulationResult>): void {
  const names = ['zq-dedicated', 'distrs', 'ideal+check', 'ideal']
  const waves = trace.tasks[0]!.batches.length
  const timeoutS = trace.stages.map(stage => stage.timeoutS)
  console.log(`GPU-s per wave (batch k of the ${trace.tasks.length} tasks):`)
  console.log('wave  timed-out T  ' + names.map(n => n.padStart(12)).join('') + '   zq/distrs  distrs/(ideal+check)  distrs avg d')
  const perPolicy = names.map(name => {
    const r = results.get(name)!
    const windows = Array.from({ length: waves }, (_, k) => {
      const batches = r.batches.filter(b => b.index === k)
      const first = Math.min(...trace.tasks.map(task => Math.min(...(task.batches[k]?.requests ?? []).map(q => q.arrivalS))))
      return { fromS: first, toS: Math.max(...batches.map(b => b.completedS)) }
    })
    const byWave = new Array<number>(waves).fill(0)
    const timeline = r.allocation!
    for (let i = 0; i + 1 < timeline.length; i++) {
      const { atS, gpu } = timeline[i]!
      const untilS = timeline[i + 1]!.atS
      let at = atS
      while (at < untilS) {
        const k = windows.findIndex(w => w.fromS <= at && at < w.toS)
        const end = k === -1 ? untilS : Math.min(untilS, windows[k]!.toS)
        if (k !== -1) byWave[k]! += gpu * (end - at)
        at = end
      }
    }
    return byWave
  })
  for (let k = 1; k < waves; k++) {
    const timedOut = trace.tasks.filter(task => {
      const batch = task.batches[k]!
      let critical = batch.requests[0]!
      for (const q of batch.requests) if (q.arrivalS + q.stageS.reduce((a, b) => a + b, 0) > critical.arrivalS + critical.stageS.reduce((a, b) => a + b, 0)) critical = q
      return critical.stageS.some((s, j) => s >= timeoutS[j]!)
    }).length
    const delays = results.get('distrs')!.batches.filter(b => b.index === k).map(b => b.extraDelayS)
    const [zq, distrs, check] = [perPolicy[0]![k]!, perPolicy[1]![k]!, perPolicy[2]![k]!]
    console.log(`${String(k).padStart(4)}  ${String(timedOut).padStart(6)} of ${trace.tasks.length} ` + perPolicy.map(p => p[k]!.toFixed(0).padStart(12)).join('') +
      `   ${(zq / distrs).toFixed(2).padStart(9)}  ${(distrs / check).toFixed(2).padStart(20)}  ${(delays.reduce((a, b) => a + b, 0) / delays.length).toFixed(2).padStart(12)}`)
  }
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
    // Rounding leaves a delay of ~1e-12 s where nothing queues (completion and T sum the same times in another order).
    if (fcfs.avgExtraDelayS < 1e-6 && ebf.avgExtraDelayS < 1e-6) break
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
