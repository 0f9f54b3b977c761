/**
 * agentctl sim reward --trace F --policy P: replays a reward trace
 * (mesh/sim/reward-trace.ts) through one scaling policy and prints allocated
 * CPU/GPU worker-seconds, extra delay per batch and the planner's cost. Runs
 * locally; no agent needed.
 */
import { createRewardScalingPolicy, rewardPolicyNames } from '../../mesh/policies/reward-scaling/policies.ts'
import { simulateRewardService, type RewardSimulationResult } from '../../mesh/sim/reward-sim.ts'
import { idealWorkers, type WorkerLifecycle } from '../../mesh/sim/stage-workers.ts'
import { parseRewardTrace } from '../../mesh/sim/reward-trace.ts'
import { UsageError, type Command } from './command.ts'
import { choiceFlag, integerFlag, readInputFile } from './flags.ts'
import { formatTable } from './table.ts'

export const simRewardCommand: Command = {
  summary: 'replay a reward trace through a scaling policy (local, no agent)',
  usage: `--trace F --policy ${rewardPolicyNames.join('|')} [--worker-start-ms N] [--keep-warm-ms N] [--start-concurrency N] [--dispatch-ms N] [--replay-history]`,
  options: {
    trace: { type: 'string', value: 'F', description: 'the reward trace, JSON (mesh/sim/reward-trace.ts; agentctl sim trace reward makes one)', complete: 'file' },
    policy: { type: 'string', description: 'the scaling policy: DistRS\'s (distrs) or a baseline', complete: rewardPolicyNames },
    'worker-start-ms': { type: 'string', value: 'N', description: 'a worker\'s start-up time, from its start to its first request (default 0: workers are there when a decision wants them, DistRS\'s model); above 0 the replay also decides at each batch\'s start hint, as the live service does' },
    'keep-warm-ms': { type: 'string', value: 'N', description: 'how long a worker no longer wanted keeps serving (and counting) before it stops, like the agent\'s reward.workerKeepWarmMs (default 0)' },
    'start-concurrency': { type: 'string', value: 'N', description: 'workers starting at once, like the agent\'s reward.workerStartConcurrency (default: no limit)' },
    'dispatch-ms': { type: 'string', value: 'N', description: 'what the live service adds to each stage a request runs: the worker\'s fetch answer, its completion report, the hand-off (default 0)' },
    'replay-history': { type: 'boolean', description: 'run each task\'s first batch too, as the live service does: planned without history (a cold start), its workers held and kept warm into the next batch; it is not reported (default: the first batch is only history, DistRS\'s replay)' },
  },
  examples: [
    { what: 'replay a generated trace under DistRS\'s policy', run: 'agentctl sim reward --trace reward.json --policy distrs' },
    { what: 'the same trace under the dedicated-workers baseline, as JSON', run: 'agentctl sim reward --trace reward.json --policy zq-dedicated --json' },
    { what: 'predict the live service: workers that start in 300 ms, four at a time, kept warm 60 s', run: 'agentctl sim reward --trace reward.json --policy distrs --worker-start-ms 300 --start-concurrency 4 --keep-warm-ms 60000' },
  ],
  async run ({ values }) {
    const file = values.trace
    if (typeof file !== 'string') throw new UsageError('sim reward: --trace F is required (a file from `agentctl sim trace reward`)')
    const policy = choiceFlag('sim reward', values.policy, 'policy', rewardPolicyNames)
    const workers = workerLifecycleFlags(values)
    const trace = parseRewardTrace(await readInputFile(file, 'trace file'), file)
    const result = simulateRewardService(trace, createRewardScalingPolicy(policy), { workers, replayHistory: values['replay-history'] === true })
    return { json: result, human: renderRewardSimulation(result) }
  },
}

/** The workers' life cycle the flags describe; the ideal one by default. */
function workerLifecycleFlags (values: Record<string, unknown>): WorkerLifecycle {
  const ms = (name: string): number => integerFlag('sim reward', values[name], name, 0, 0) / 1000
  const concurrency = values['start-concurrency'] === undefined ? idealWorkers.startConcurrency : integerFlag('sim reward', values['start-concurrency'], 'start-concurrency', 1)
  return { startS: ms('worker-start-ms'), keepWarmS: ms('keep-warm-ms'), startConcurrency: concurrency, dispatchS: ms('dispatch-ms') }
}

export function renderRewardSimulation (result: RewardSimulationResult): string {
  const head = [
    `policy          ${result.policy}`,
    `cpu seconds     ${result.cpuSeconds.toFixed(0)} (allocated worker-seconds)`,
    `gpu seconds     ${result.gpuSeconds.toFixed(0)}`,
    `extra delay     avg ${result.avgExtraDelayS.toFixed(2)} s, max ${result.maxExtraDelayS.toFixed(2)} s per batch`,
    `planner         ${result.planner.calls} decisions, mean ${result.planner.meanMs.toFixed(1)} ms, max ${result.planner.maxMs.toFixed(1)} ms, up to ${result.planner.maxRequests} estimated requests`,
  ]
  const rows = result.batches.map(b => [b.task, String(b.index), b.earliestS.toFixed(1), b.completedS.toFixed(1), b.extraDelayS.toFixed(2)])
  return `${head.join('\n')}\n\n${formatTable(['TASK', 'BATCH', 'EARLIEST_S', 'COMPLETED_S', 'EXTRA_DELAY_S'], rows)}`
}
