/**
 * agentctl sim reward --trace F --policy P: replays a reward trace
 * (mesh/sim/reward-trace.ts) through one scaling policy and prints allocated
 * CPU/GPU worker-seconds, extra delay per batch and the planner's cost. Runs
 * locally; no agent needed.
 */
import { createRewardScalingPolicy, rewardPolicyNames } from '../../mesh/policies/reward-scaling/policies.ts'
import { simulateRewardService, type RewardSimulationResult } from '../../mesh/sim/reward-sim.ts'
import { parseRewardTrace } from '../../mesh/sim/reward-trace.ts'
import { UsageError, type Command } from './command.ts'
import { choiceFlag, readInputFile } from './flags.ts'
import { formatTable } from './table.ts'

export const simRewardCommand: Command = {
  summary: 'replay a reward trace through a scaling policy (local, no agent)',
  usage: `--trace F --policy ${rewardPolicyNames.join('|')}`,
  options: {
    trace: { type: 'string', value: 'F', description: 'the reward trace, JSON (mesh/sim/reward-trace.ts; agentctl sim trace reward makes one)', complete: 'file' },
    policy: { type: 'string', description: 'the scaling policy: DistRS\'s (distrs) or a baseline', complete: rewardPolicyNames },
  },
  examples: [
    { what: 'replay a generated trace under DistRS\'s policy', run: 'agentctl sim reward --trace reward.json --policy distrs' },
    { what: 'the same trace under the dedicated-workers baseline, as JSON', run: 'agentctl sim reward --trace reward.json --policy zq-dedicated --json' },
  ],
  async run ({ values }) {
    const file = values.trace
    if (typeof file !== 'string') throw new UsageError('sim reward: --trace F is required (a file from `agentctl sim trace reward`)')
    const policy = choiceFlag('sim reward', values.policy, 'policy', rewardPolicyNames)
    const trace = parseRewardTrace(await readInputFile(file, 'trace file'), file)
    const result = simulateRewardService(trace, createRewardScalingPolicy(policy))
    return { json: result, human: renderRewardSimulation(result) }
  },
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
