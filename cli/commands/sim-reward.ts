/**
 * agentctl sim reward --trace F --policy P: replays a reward trace
 * (mesh/sim/reward-trace.ts) through one scaling policy and prints allocated
 * CPU/GPU worker-seconds, extra delay per batch and the planner's cost. Runs
 * locally; no agent needed.
 */
import { readFileSync } from 'node:fs'
import { AgentError } from '../../agent/errors.ts'
import { closestName } from '../../agent/config/schema-walk.ts'
import { createRewardScalingPolicy, rewardPolicyNames, type RewardPolicyName } from '../../mesh/policies/reward-scaling/policies.ts'
import { simulateRewardService, type RewardSimulationResult } from '../../mesh/sim/reward-sim.ts'
import { parseRewardTrace } from '../../mesh/sim/reward-trace.ts'
import { UsageError, type Command } from '../command.ts'
import { formatTable } from '../table.ts'

export const simRewardCommand: Command = {
  summary: 'replay a reward trace through a scaling policy (local, no agent)',
  usage: `--trace F --policy ${rewardPolicyNames.join('|')}`,
  options: { trace: { type: 'string' }, policy: { type: 'string' } },
  async run ({ values }) {
    const file = values.trace
    if (typeof file !== 'string') throw new UsageError('sim reward: --trace F is required (a file from `agentctl sim trace reward`)')
    const policy = parsePolicyName(values.policy)
    const trace = parseRewardTrace(readTraceFile(file), file)
    const result = simulateRewardService(trace, createRewardScalingPolicy(policy))
    return { json: result, human: renderRewardSimulation(result) }
  },
}

function parsePolicyName (value: unknown): RewardPolicyName {
  if (typeof value !== 'string') throw new UsageError(`sim reward: --policy is required, one of ${rewardPolicyNames.join(', ')}`)
  if ((rewardPolicyNames as readonly string[]).includes(value)) return value as RewardPolicyName
  const hint = closestName(value, rewardPolicyNames)
  throw new UsageError(`sim reward: unknown policy "${value}"${hint !== undefined ? `; did you mean "${hint}"?` : ''} (one of ${rewardPolicyNames.join(', ')})`)
}

function readTraceFile (file: string): string {
  try {
    return readFileSync(file, 'utf8')
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT') throw new AgentError('ERR_NOT_FOUND', `trace file ${file} does not exist`, { cause: err })
    throw new AgentError('ERR_IO', `cannot read trace file ${file}: ${(err as Error).message}`, { cause: err })
  }
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
