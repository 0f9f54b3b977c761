/**
 * The `reward` config section: the live reward service (DistRS §4–5). Every
 * agent of a cluster carries the same `stages` (like the cluster key): the
 * leader plans workers for them, and each agent's supervisor runs a stage's
 * `command` for the workers placed on it. Cross-field rules (unique stage
 * names, cores per worker within the node) are checked by
 * validateRewardConfig when the subsystem starts.
 */
import { Type, type Static } from '@sinclair/typebox'
import { AgentError } from '../../../core/errors.ts'
import { rewardPolicyNames } from '../../policies/reward-scaling/policies.ts'

/** Policies the live service may run: every one but the `ideal` oracle (it needs the future). */
export const liveRewardPolicies = rewardPolicyNames.filter(name => name !== 'ideal')

export const RewardStageConfig = Type.Object({
  name: Type.String({ pattern: '^[a-z][a-z0-9-]{0,31}$', description: 'stage name, in pipeline order in the list' }),
  resource: Type.Union([Type.Literal('cpu'), Type.Literal('gpu')], { description: 'what one worker holds exclusively: coresPerWorker CPU cores, or one GPU (CUDA_VISIBLE_DEVICES)' }),
  command: Type.Array(Type.String({ minLength: 1 }), { minItems: 1, description: 'argv of one worker process; it gets AGENTD_SOCKET, AGENTD_REWARD_STAGE and AGENTD_REWARD_WORKER_ID' }),
  coresPerWorker: Type.Integer({ minimum: 1, maximum: 1024, description: 'CPU cores one worker of a cpu stage holds (ignored for gpu stages)' }),
  timeoutMs: Type.Integer({ minimum: 10, maximum: 3_600_000, description: 'T_j: a request running longer at this stage ends with the timeout result (reward.timeoutReward), and its worker is terminated (then restarted) if still on it max(1 s, heartbeatIntervalMs) later, ms' }),
  cost: Type.Optional(Type.Number({ exclusiveMinimum: 0, description: 'C_j: relative cost of one worker (Alg. 1 searches the costliest stage first); default 1 for cpu, 10 for gpu' })),
}, { additionalProperties: false })

export const RewardSection = Type.Object({
  enabled: Type.Boolean({ description: 'Run the reward service on this agent: the /v1/reward API, the worker supervisor, and the proxy while this agent leads. Default: true.' }),
  stages: Type.Array(RewardStageConfig, {
    maxItems: 16,
    description: 'The reward pipeline, in order: [{ name, resource: "cpu"|"gpu", command: [argv], coresPerWorker, timeoutMs, cost? }]; the same on every agent. Default: [] (no stages: submissions are refused).',
  }),
  policy: Type.Union(liveRewardPolicies.map(name => Type.Literal(name)), {
    description: `Scaling policy the leader runs at every batch start and completion: ${liveRewardPolicies.join(', ')} (mesh/policies/reward-scaling/). Default: "distrs".`,
  }),
  maxExtraDelayMs: Type.Integer({ minimum: 0, maximum: 3_600_000, description: 'D: delay a batch may take beyond its estimated earliest completion, the constraint of the scaling search, in milliseconds. Default: 1000.' }),
  timeoutReward: Type.Number({ description: 'The reward of a request that timed out at a stage (the configured negative result). Default: -1.' }),
  cpuCores: Type.Integer({ minimum: 0, maximum: 65_536, description: 'CPU cores this node offers to cpu-stage workers; 0 = every detected core. Default: 0.' }),
  maxPayloadBytes: Type.Integer({ minimum: 64, maximum: 16 * 2 ** 20, description: 'Largest request payload (and worker output), as JSON bytes. Default: 262144 (256 KiB).' }),
  maxPendingRequests: Type.Integer({ minimum: 1, maximum: 10_000_000, description: 'Requests the leader holds (queued, running, or with results not yet collected) and each agent keeps for its trainers; beyond it submissions get ERR_REWARD_FULL. Default: 100000.' }),
  resultRetentionMs: Type.Integer({ minimum: 1000, maximum: 86_400_000, description: 'How long a result stays on the submitting agent and the leader after the trainer fetched it (a repeated fetch gets it again), in milliseconds. Default: 300000.' }),
  unfetchedResultRetentionMs: Type.Integer({ minimum: 1000, maximum: 7 * 86_400_000, description: 'How long a result the trainer has not fetched stays on the submitting agent and the leader (through any agent, whatever dies meanwhile) after its request finished, in milliseconds. Default: 3600000 (1 h).' }),
  abandonedBatchMs: Type.Integer({ minimum: 1000, maximum: 7 * 86_400_000, description: 'A batch whose trainer has not touched it through its submitting agent (a hint, a submit, a result fetch of one of its requests) for this long is abandoned: its requests still pending are cancelled (status cancelled), so they are not held, or sent to every new leader, for ever; in milliseconds. Default: 3600000 (1 h).' }),
  heartbeatIntervalMs: Type.Integer({ minimum: 50, maximum: 60_000, description: 'Each agent reports its capacity and live workers to the leader this often, in milliseconds. Default: 500.' }),
  leaseTimeoutMs: Type.Integer({ minimum: 100, maximum: 600_000, description: 'A request handed to a worker whose agent has not reported for this long is lost and retried once on another worker (once in all, across leader changes; a request whose stage timeout ran out first ends with the timeout result instead), in milliseconds. Default: 3000.' }),
  workerRestartBackoffMs: Type.Integer({ minimum: 10, maximum: 600_000, description: 'First delay before a crashed worker is restarted; doubles per crash in a row, up to 64 times this, in milliseconds. Default: 500.' }),
  workerStopGraceMs: Type.Integer({ minimum: 10, maximum: 600_000, description: 'A worker asked to stop (SIGTERM) is killed after this long, in milliseconds. Default: 5000.' }),
  workerStartConcurrency: Type.Integer({ minimum: 1, maximum: 1024, description: 'Workers an agent starts at once, at most: the next starts when one has fetched work or has run 2 s (a cold start of dozens of workers neither stalls the agent nor starves it of CPU at once). Default: 4.' }),
  workerNice: Type.Integer({ minimum: 0, maximum: 19, description: 'Workers run this much nicer than the agent (its niceness plus this, at most 19): on a node whose cores the workers saturate (a cold start of dozens of them, a stage that computes flat out) the agent\'s heartbeats, gossip and election still get the CPU when they need it, so the node is not declared dead and the leader does not change. Workers lose nothing to it while the node has idle cores. 0 = the agent\'s own. Default: 10.' }),
  workerKeepWarmMs: Type.Integer({ minimum: 0, maximum: 3_600_000, description: 'A worker the plan no longer wants on its agent keeps running (and serving its stage) this long, so the next batch of a task reuses it instead of starting a new one; it is stopped earlier when a wanted worker needs its cores or GPU. 0 = stop at once. In milliseconds. Default: 60000.' }),
}, { additionalProperties: false })

export type RewardConfig = Static<typeof RewardSection>
export type RewardStageSpec = Static<typeof RewardStageConfig>

export const defaultRewardConfig: RewardConfig = {
  enabled: true,
  stages: [],
  policy: 'distrs',
  maxExtraDelayMs: 1000,
  timeoutReward: -1,
  cpuCores: 0,
  maxPayloadBytes: 256 * 1024,
  maxPendingRequests: 100_000,
  resultRetentionMs: 300_000,
  unfetchedResultRetentionMs: 3_600_000,
  abandonedBatchMs: 3_600_000,
  heartbeatIntervalMs: 500,
  leaseTimeoutMs: 3000,
  workerRestartBackoffMs: 500,
  workerStopGraceMs: 5000,
  workerStartConcurrency: 4,
  workerNice: 10,
  workerKeepWarmMs: 60_000,
}

/** Cross-field rules; ERR_CONFIG_INVALID listing every problem. */
export function validateRewardConfig (c: RewardConfig): void {
  const problems: string[] = []
  const seen = new Set<string>()
  for (const [i, stage] of c.stages.entries()) {
    if (seen.has(stage.name)) problems.push(`reward.stages[${i}].name: stage ${stage.name} is listed twice`)
    seen.add(stage.name)
  }
  if (c.leaseTimeoutMs < 2 * c.heartbeatIntervalMs) problems.push('reward.leaseTimeoutMs must be at least 2 × reward.heartbeatIntervalMs (a lease must survive one lost report)')
  if (problems.length > 0) throw new AgentError('ERR_CONFIG_INVALID', problems.join('; '), { details: problems })
}

/** C_j of a stage: its configured cost, else 1 for cpu and 10 for gpu. */
export function stageCost (stage: RewardStageSpec): number {
  return stage.cost ?? (stage.resource === 'gpu' ? 10 : 1)
}
