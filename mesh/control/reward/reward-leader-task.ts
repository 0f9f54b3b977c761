/**
 * The reward service's leader task: while this agent acts as leader it hosts
 * the proxy (reward-proxy.ts) for the epoch, answers the `reward.*` leader
 * calls with it, and scales the workers: at every batch start and completion
 * (DistRS §5.2) it runs the configured policy (Alg. 2 + Alg. 1 over the live
 * queues and the history) and places the result on the agents that report
 * capacity (worker-placement.ts), published as the fenced decision
 * `reward-workers` (each agent's supervisor applies its own part). It also
 * re-plans when an agent first reports (new capacity) while workers are
 * unplaced, and when requests wait at a stage the plan gives no worker. Each
 * plan is cut down to the cores and GPUs the reporting agents offer
 * (capacity-fit.ts) before it is placed. A new leader starts from the
 * placement in the desired state and, for takeoverGraceMs, plans no fewer workers per stage than that placement
 * wanted and keeps the workers of agents that have not reported to it yet
 * where they are: it learns the batches in flight only as the submitting
 * agents resync them (agent/reward/reward-submitter.ts) and the agents' capacity only from
 * their heartbeats, and planning from what it knows at takeover would stop the
 * workers running those batches' requests.
 *
 * The planner's state is cluster state, so a takeover changes no plan: the
 * per-task history lives in the fenced desired state (the `reward-history`
 * decision, planner-history.ts), published at every batch completion and
 * read by the next leader, which plans from it as this one did; the batches
 * in flight come back from the submitting agents (their resync gives each
 * batch's age and its finished requests' timings). History changes once per
 * batch and must outlive any agent: a decision. Batches in flight change
 * with every request and are already held, request by request, by the
 * agents that submitted them: publishing them at that rate would turn every
 * result into a replicated decision.
 */
import type { Logger } from 'pino'
import type { LeaderContext, LeaderTask } from '../../election/leader-service.ts'
import { fitWorkersToCapacity, type ClusterCapacity } from '../../policies/reward-scaling/capacity-fit.ts'
import { createRewardScalingPolicy } from '../../policies/reward-scaling/policies.ts'
import { placeRewardWorkers, type PlacementNode, type WorkerAssignment } from '../../policies/reward-scaling/worker-placement.ts'
import { stageCost, type RewardConfig } from './reward-config.ts'
import { createRewardProxy, type RewardProxy } from './reward-proxy.ts'
import { rewardWorkersKind, rewardWorkersProblem, type RewardWorkersPayload } from './reward-messages.ts'
import { decodeRewardHistory, encodeRewardHistory, rewardHistoryKind, rewardHistoryProblem } from './planner-history.ts'

export interface RewardLeaderTaskOptions {
  config: RewardConfig
  /** How often leases of silent agents and idle batches are checked, ms. Default: config.heartbeatIntervalMs. */
  tickMs?: number
  /** After taking over, a new leader scales no stage below the inherited plan for this long, ms. Default: 2 × config.leaseTimeoutMs. */
  takeoverGraceMs?: number
  /** Largest JSON size of the `reward-history` decision, bytes (the desired state travels in one mesh message). Default: 16384. */
  maxHistoryBytes?: number
}

export interface RewardLeaderTaskComponents {
  logger: Logger
  /** This agent's mesh peer id (the leader id in status). */
  selfId(): string
}

export interface RewardLeaderTask extends LeaderTask {
  /** The proxy of the epoch this agent leads now; undefined while it does not. */
  proxy(): RewardProxy | undefined
}

/** Cores and GPUs of the agents that run stages of each resource: what a plan is fitted to. */
function clusterCapacity (nodes: readonly PlacementNode[], stages: ReadonlyArray<{ name: string, resource: 'cpu' | 'gpu', coresPerWorker: number }>): ClusterCapacity {
  const runs = (node: PlacementNode, resource: 'cpu' | 'gpu'): boolean => stages.some(s => s.resource === resource && node.stages.includes(s.name))
  return {
    cpuCores: nodes.reduce((sum, n) => sum + (runs(n, 'cpu') ? n.cpuCores : 0), 0),
    gpus: nodes.reduce((sum, n) => sum + (runs(n, 'gpu') ? n.gpus : 0), 0),
    unitsPerWorker: stages.map(s => s.resource === 'gpu' ? 1 : s.coresPerWorker),
  }
}

/** `nodes` plus every agent of `inherited` not among them, with the capacity its workers there hold (so they stay, and none are added). */
function withUnreported (nodes: PlacementNode[], inherited: RewardWorkersPayload, stages: ReadonlyArray<{ name: string, resource: 'cpu' | 'gpu', coresPerWorker: number }>): PlacementNode[] {
  const reported = new Set(nodes.map(n => n.id))
  const assumed: PlacementNode[] = []
  for (const [id, counts] of Object.entries(inherited.workers)) {
    if (reported.has(id)) continue
    let cpuCores = 0
    let gpus = 0
    for (const s of stages) {
      const n = counts[s.name] ?? 0
      if (s.resource === 'gpu') gpus += n
      else cpuCores += n * s.coresPerWorker
    }
    assumed.push({ id, cpuCores, gpus, stages: stages.filter(s => (counts[s.name] ?? 0) > 0).map(s => s.name) })
  }
  return [...nodes, ...assumed]
}

export function createRewardLeaderTask (options: RewardLeaderTaskOptions, components: RewardLeaderTaskComponents): RewardLeaderTask {
  const { config } = options
  const log = components.logger
  let current: RewardProxy | undefined
  const policy = createRewardScalingPolicy(config.policy)
  const placementStages = config.stages.map(s => ({ name: s.name, resource: s.resource, coresPerWorker: s.coresPerWorker, cost: stageCost(s) }))

  return {
    name: 'reward-proxy',
    kinds: { [rewardWorkersKind]: rewardWorkersProblem, [rewardHistoryKind]: rewardHistoryProblem },
    proxy: () => current,
    start (context: LeaderContext) {
      let plan = (context.desiredState()[rewardWorkersKind] as RewardWorkersPayload | undefined) ?? null
      const inherited = plan
      const graceMs = options.takeoverGraceMs ?? 2 * config.leaseTimeoutMs
      // Ended by its timer, not by comparing clocks: a timer may fire a fraction of a ms before performance.now() says it is due.
      let graceOver = inherited === null
      let planCalls = 0
      let planPending = false
      const knownNodes = new Set<string>()
      const tickMs = options.tickMs ?? config.heartbeatIntervalMs
      let starvedReplanMs = -Infinity
      const maxHistoryBytes = options.maxHistoryBytes ?? 16 * 1024
      let publishedHistory = JSON.stringify(context.desiredState()[rewardHistoryKind] ?? null)

      /** A batch completed: the history as the next leader will read it, planned from here too. */
      const publishHistory = (): void => {
        const payload = encodeRewardHistory(proxy.history(), maxHistoryBytes)
        proxy.adoptHistory(decodeRewardHistory(payload, config.stages.length))
        const json = JSON.stringify(payload)
        if (json === publishedHistory) return
        publishedHistory = json
        context.decide(rewardHistoryKind, payload).catch(err => log.warn({ err: (err as Error).message }, 'reward-history decision not published'))
      }

      const replan = (why: string): void => {
        if (planPending || context.signal.aborted) return
        planPending = true
        // Coalesces the boundaries of one instant (a batch completing as another starts).
        setImmediate(() => {
          planPending = false
          if (context.signal.aborted) return
          const planStartMs = performance.now()
          const snapshot = proxy.plannerSnapshot((Math.imul(context.epoch, 0x9e3779b1) + planCalls++) >>> 0)
          const decision = policy.decide(snapshot)
          const inGrace = !graceOver && inherited !== null
          const wanted = config.stages.map((s, j) => Math.max(
            decision.pools.reduce((sum, pool) => sum + (pool.workers[j] ?? 0), 0),
            inGrace ? inherited.wanted[s.name] ?? 0 : 0))
          const nodes = inGrace ? withUnreported(proxy.nodes(), inherited, placementStages) : proxy.nodes()
          const capacity = clusterCapacity(nodes, placementStages)
          // External workers (registered processes) serve their stage like supervised ones: only the rest is placed.
          const external = proxy.externalWorkers()
          const fit = fitWorkersToCapacity(snapshot, wanted.map((n, j) => Math.max(0, n - (external[j] ?? 0))), capacity)
          const placed = placeRewardWorkers(placementStages, fit.workers, nodes, plan?.workers ?? {} as WorkerAssignment)
          const byStage = (counts: readonly number[]): Record<string, number> => Object.fromEntries(config.stages.map((s, j) => [s.name, counts[j]!]))
          const next: RewardWorkersPayload = {
            workers: placed.workers,
            wanted: byStage(fit.workers),
            unplaced: placed.unplaced,
            capacity: {
              bound: fit.capacityBound,
              cpuCores: capacity.cpuCores,
              gpus: capacity.gpus,
              unconstrained: byStage(wanted),
              shortBy: byStage(fit.shortBy),
              waiting: fit.waiting.map(j => config.stages[j]!.name),
            },
          }
          const planMs = Math.round(performance.now() - planStartMs)
          if (planMs >= 50) log.warn({ why, planMs, batches: snapshot.batches.length }, 'reward planning held the event loop')
          if (plan !== null && JSON.stringify(plan) === JSON.stringify(next)) return
          plan = next
          log.info({ why, planMs, wanted: next.wanted, unplaced: next.unplaced, workers: next.workers, capacity: next.capacity, predictedCompletionS: fit.predictedCompletionS, batches: snapshot.batches.length }, 'reward workers planned')
          context.decide(rewardWorkersKind, next).catch(err => log.warn({ err: (err as Error).message }, 'reward-workers decision not published'))
        })
      }

      const proxy = createRewardProxy({
        stages: config.stages,
        timeoutReward: config.timeoutReward,
        maxPayloadBytes: config.maxPayloadBytes,
        maxPendingRequests: config.maxPendingRequests,
        leaseTimeoutMs: config.leaseTimeoutMs,
        resultRetentionMs: config.resultRetentionMs,
        unfetchedResultRetentionMs: config.unfetchedResultRetentionMs,
        maxExtraDelayMs: config.maxExtraDelayMs,
        policy,
        history: decodeRewardHistory(context.desiredState()[rewardHistoryKind], config.stages.length),
      }, {
        logger: log,
        now: () => performance.now(),
        onBatchBoundary: (reason, task, batch) => {
          if (reason === 'batch-complete') publishHistory()
          replan(`${reason} ${task}#${batch}`)
        },
        onStageWithoutWorkers: (stage, queued) => {
          // At most once a tick: the proxy calls again at every tick while the stage waits.
          const t = performance.now()
          if (t - starvedReplanMs < tickMs) return
          starvedReplanMs = t
          replan(`${queued} requests wait at stage ${stage}, which the plan gives no worker`)
        },
        plan: () => plan,
        leaderId: components.selfId(),
      })
      current = proxy

      context.handleCalls('reward.batch-start', async body => proxy.batchStart(body))
      context.handleCalls('reward.submit', async (body, caller) => proxy.submit(body, caller.peerId))
      context.handleCalls('reward.fetch', async body => await proxy.fetch(body, context.signal))
      context.handleCalls('reward.complete', async body => proxy.complete(body))
      context.handleCalls('reward.cancel', async body => proxy.cancel(body))
      context.handleCalls('reward.heartbeat', async body => {
        const answer = proxy.heartbeat(body)
        const node = (body as { node: string }).node
        if (!knownNodes.has(node)) {
          knownNodes.add(node)
          if (plan !== null && Object.values(plan.unplaced).some(n => n > 0)) replan(`agent ${node} reported capacity`)
        }
        return answer
      })
      context.handleCalls('reward.worker-lost', async body => proxy.workerLost(body))
      context.handleCalls('reward.await', async body => await proxy.awaitResults(body, context.signal))
      context.handleCalls('reward.resync', async body => proxy.resync(body))
      context.handleCalls('reward.status', async () => proxy.status())
      context.handleCalls('reward.result', async body => await proxy.result(body, context.signal))

      const ticker = setInterval(() => proxy.tick(), tickMs)
      ticker.unref()
      // The grace ends: what the resynced batches need, and no more.
      const graceEnd = graceOver ? undefined : setTimeout(() => { graceOver = true; replan('takeover grace over') }, graceMs)
      graceEnd?.unref()
      context.signal.addEventListener('abort', () => {
        clearInterval(ticker)
        clearTimeout(graceEnd)
        proxy.stop()
        if (current === proxy) current = undefined
      }, { once: true })
      log.info({ epoch: context.epoch, stages: config.stages.map(s => s.name), policy: config.policy }, 'reward proxy serving')
    },
  }
}
