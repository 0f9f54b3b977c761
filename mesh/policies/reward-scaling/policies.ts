/**
 * The reward-service scaling policies compared in DistRS §6:
 * - `distrs`: Alg. 2 estimates + Alg. 1 search, shared workers, EBF, timeout-aware check (§5).
 * - `history`: the same without the timeout-aware check ("History-Based", §6.3).
 * - `zq-dedicated`: per task, dedicated workers for zero queuing of its previous batch, FCFS (§6.1).
 * - `ideal`: shared, EBF, Alg. 1 over the true remaining requests (perfect knowledge, §6.1).
 * Every policy is pure: same snapshot, same decision.
 *
 * Rules common to all (not in the paper's pseudocode, stated here):
 * - A batch whose task has no history cannot be simulated; it adds its size
 *   B (the trainer's hint) to every stage, Alg. 1's starting point (line 6)
 *   at which nothing queues.
 * - While a pool serves an active batch, each of its stages keeps at least 1
 *   worker (Alg. 1 searches from 1), so a request the estimate missed is
 *   served before the next decision; with no active batch nothing is held.
 *   A decision assumes unlimited workers: the live leader cuts it down to the
 *   cores and GPUs the cluster has with fitWorkersToCapacity
 *   (capacity-fit.ts), which keeps a worker per stage with work where the
 *   capacity allows and otherwise lets stages take turns.
 */
import { prepareBatchSimulation } from './batch-simulation.ts'
import { collectRequestInformation, estimatedBatchCompletionS, exactRequestInformation } from './request-information.ts'
import { searchStageWorkers } from './stage-search.ts'
import type { EstimatedRequest, PlannerSnapshot, QueueDiscipline, RewardScalingPolicy, ScalingDecision } from './types.ts'
import { zeroQueuingWorkers } from './zero-queuing.ts'

export const rewardPolicyNames = ['distrs', 'zq-dedicated', 'history', 'ideal'] as const
export type RewardPolicyName = typeof rewardPolicyNames[number]

export const sharedPoolId = 'shared'
export const dedicatedPoolId = (task: string): string => `task:${task}`

export function createRewardScalingPolicy (name: RewardPolicyName): RewardScalingPolicy {
  switch (name) {
    case 'distrs': return simulationSearchPolicy('distrs', { timeoutAware: true, perfectKnowledge: false })
    case 'history': return simulationSearchPolicy('history', { timeoutAware: false, perfectKnowledge: false })
    case 'ideal': return simulationSearchPolicy('ideal', { timeoutAware: false, perfectKnowledge: true })
    case 'zq-dedicated': return zeroQueuingDedicatedPolicy()
  }
}

function simulationSearchPolicy (name: string, options: { timeoutAware: boolean, perfectKnowledge: boolean }): RewardScalingPolicy {
  return {
    name,
    discipline: 'ebf',
    perfectKnowledge: options.perfectKnowledge,
    batchPriorityS ({ startS, history, stages, exactEarliestS }) {
      if (options.perfectKnowledge && exactEarliestS !== undefined) return exactEarliestS
      return estimatedBatchCompletionS(startS, history, stages)
    },
    decide (snapshot) {
      if (snapshot.batches.length === 0) return { pools: [], estimatedRequests: 0 }
      let requests: EstimatedRequest[]
      let withoutHistory: number[] = []
      if (options.perfectKnowledge) requests = exactRequestInformation(snapshot)
      else ({ requests, withoutHistory } = collectRequestInformation(snapshot))
      const simulation = prepareBatchSimulation({
        stages: snapshot.stages,
        requests,
        batchPriorityS: snapshot.batches.map(b => b.priorityS),
        batchEarliestS: snapshot.batches.map(b => b.priorityS),
        maxExtraDelayS: snapshot.maxExtraDelayS,
        discipline: 'ebf',
        timeoutAware: options.timeoutAware,
      })
      const searched = searchStageWorkers(simulation, snapshot.stages)
      const unsimulated = withoutHistory.reduce((sum, b) => sum + snapshot.batches[b]!.size, 0)
      return {
        pools: [{ id: sharedPoolId, tasks: 'all', workers: searched.map(n => Math.max(1, n + unsimulated)) }],
        estimatedRequests: requests.length,
      }
    },
  }
}

/**
 * Not a DistRS policy: `ideal` (perfect knowledge) with the timeout-aware
 * check of `distrs`. It bounds what any estimate of the future can buy
 * `distrs`: the gap between it and `ideal` is the cost of the check itself
 * (test/bench/reward-scaling.bench.ts prints both). Simulation only.
 */
export function idealTimeoutAwarePolicy (): RewardScalingPolicy {
  return simulationSearchPolicy('ideal+check', { timeoutAware: true, perfectKnowledge: true })
}

/**
 * Zero queuing, dedicated (DistRS §6.1): each task is sized on its own by the
 * single-task model of §5.1, "decided when a batch starts, fixed until it
 * completes": the peak concurrency per stage of its previous batch replayed
 * from this batch's start without queuing. Other tasks' batch boundaries do
 * not change it (nothing is shared).
 */
function zeroQueuingDedicatedPolicy (): RewardScalingPolicy {
  return {
    name: 'zq-dedicated',
    discipline: 'fcfs',
    perfectKnowledge: false,
    batchPriorityS: ({ startS, history, stages }) => estimatedBatchCompletionS(startS, history, stages),
    decide (snapshot) {
      const byTask = new Map<string, { requests: EstimatedRequest[], unsimulated: number }>()
      snapshot.batches.forEach((batch, b) => {
        let own = byTask.get(batch.task)
        if (own === undefined) byTask.set(batch.task, own = { requests: [], unsimulated: 0 })
        const history = snapshot.history[batch.task]
        if (history === undefined || history.requests.length === 0) own.unsimulated += batch.size
        else for (const r of history.requests) own.requests.push({ batch: b, readyS: batch.startS + r.offsetS, stageS: r.stageS, running: false })
      })
      let estimatedRequests = 0
      const pools = [...byTask].map(([task, own]) => {
        estimatedRequests += own.requests.length
        const peaks = zeroQueuingWorkers(own.requests, snapshot.stages.length)
        return { id: dedicatedPoolId(task), tasks: [task], workers: peaks.map(n => Math.max(1, n + own.unsimulated)) }
      })
      return { pools, estimatedRequests }
    },
  }
}

/**
 * A fixed shared allocation held while any batch is active, served with
 * `discipline`: the static configurations of DistRS §6.3 (EBF vs FCFS at a
 * given number of workers, Fig. 14).
 */
export function staticAllocationPolicy (workers: readonly number[], discipline: QueueDiscipline): RewardScalingPolicy {
  return {
    name: `static-${discipline}`,
    discipline,
    perfectKnowledge: false,
    batchPriorityS: ({ startS, history, stages }) => estimatedBatchCompletionS(startS, history, stages),
    decide (snapshot: PlannerSnapshot): ScalingDecision {
      if (snapshot.batches.length === 0) return { pools: [], estimatedRequests: 0 }
      return { pools: [{ id: sharedPoolId, tasks: 'all', workers }], estimatedRequests: 0 }
    },
  }
}
