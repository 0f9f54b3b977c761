/**
 * Replays a reward trace through a scaling policy on the discrete-event
 * engine (event-queue.ts) and reports what the issue's `agentctl sim reward`
 * prints: allocated worker-seconds per resource, extra delay per batch, and
 * the planner's cost.
 *
 * Model (DistRS §4–5):
 * - The first batch of each task is its history (not replayed); later batches
 *   start at their `startS` (the trainer's hint) and their requests arrive at
 *   `arrivalS`, open loop: a late batch does not shift the task's later batches.
 *   With options.replayHistory the first batch runs too, as it does live: planned
 *   without history (a cold start), its workers held, and kept warm into the
 *   next batch with the live life cycle; it is not reported (nothing predicts it).
 * - The policy decides when a batch arrives, i.e. when its first request
 *   reaches the service (§5.1: "decisions are made only when the first
 *   requests of a new batch arrive"), and when a batch completes; its pools
 *   hold until the next decision. The live proxy decides at the same two
 *   points (mesh/control/reward/reward-proxy.ts: batch-arrival, batch-complete). The
 *   trainer's batch-start hint (`startS`) anchors the batch (AT of Alg. 2, the
 *   EBF priority) and lets the service warm workers up during the rollout's
 *   first part (§4): the live proxy makes one more decision at the hint for
 *   that, because its worker processes take time to start. By default
 *   (options.workers: idealWorkers) workers start at once when a decision is
 *   applied, so that decision would only hold idle workers (and charge them)
 *   until the first arrival, and is not made: a batch joins the planner's
 *   snapshot when it arrives. With the live life cycle (start-up time,
 *   keep-warm, start pacing: stage-workers.ts) the replay decides at the hint
 *   and the batch joins the snapshot then, as live; its dispatch overhead
 *   lengthens every stage a request runs. Workers are whole, one
 *   request at a time, and never preempted: a stage scaled below its busy
 *   workers keeps them until their requests finish, and they count as
 *   allocated until then.
 * - Stage queues are per pool and follow the policy's discipline (EBF with the
 *   batch's priority fixed at its start, or FCFS). At one instant every
 *   arrival and completion is applied before free workers take requests (the
 *   same rule as the planner's SIMULATE).
 * - Extra delay of a batch = its completion − T, T = max_i (arrivalS_i + Σ_j s_ij) (Eq. 1–2).
 */
import { createEventQueue } from '../../core/event-queue.ts'
import { checkWorkerLifecycle, createStageWorkers, createStartPacer, idealWorkers, type StageWorkers, type WorkerLifecycle } from './stage-workers.ts'
import type { RewardTrace } from './reward-trace.ts'
import { createPriorityHeap, type PriorityHeap } from '../../core/priority-heap.ts'
import { queueOrder } from '../policies/reward-scaling/queue-order.ts'
import type {
  ActiveBatch, BatchHistory, EstimatedRequest, InFlightRequest, RewardScalingPolicy, ScalingDecision,
} from '../policies/reward-scaling/types.ts'

export interface RewardSimulationResult {
  policy: string
  /** Allocated CPU-stage worker-seconds. */
  cpuSeconds: number
  /** Allocated GPU-stage worker-seconds. */
  gpuSeconds: number
  avgExtraDelayS: number
  maxExtraDelayS: number
  batches: Array<{ task: string, index: number, earliestS: number, completedS: number, extraDelayS: number }>
  /** Held workers per resource from each change on (when options.recordAllocation), in time order. */
  allocation?: Array<{ atS: number, cpu: number, gpu: number }>
  /** Wall time of the policy's decide() calls (the only non-deterministic numbers here). */
  planner: { calls: number, meanMs: number, maxMs: number, maxRequests: number }
}

export interface DecisionRecord {
  atS: number
  /**
   * batch-start: the trainer's hint (only when workers take time to start);
   * batch-arrival: the batch's first request arrived.
   */
  reason: 'batch-start' | 'batch-arrival' | 'batch-complete'
  task: string
  index: number
  decision: ScalingDecision
}

export interface RewardSimulationOptions {
  /** Seeds the planner's sampling; decision n gets a seed derived from this and n. Default 1. */
  seed?: number
  /** Called after every decision (tests and tools that plot allocations). */
  onDecision?: (record: DecisionRecord) => void
  /** Return the held-workers timeline (result.allocation). Default false. */
  recordAllocation?: boolean
  /**
   * The workers' life cycle (stage-workers.ts). Default idealWorkers (DistRS's
   * model: a worker is there when a decision wants it). With the live
   * supervisor's start-up time, keep-warm and start pacing, the replay also
   * decides at each batch's start hint, and a batch joins the planner's
   * snapshot then, as the live proxy does.
   */
  workers?: WorkerLifecycle
  /**
   * Run each task's first batch as well, as the live service does: its task
   * has no history yet (a cold-start plan), its workers are held and, with a
   * keep-warm, still there for the next batch. It is left out of `batches` and
   * the delays (the comparison starts at the second batch); its workers count
   * in the worker-seconds and the allocation. Default false: the first batch
   * is only history (DistRS's replay).
   */
  replayHistory?: boolean
}

interface SimRequest {
  readonly batch: SimBatch
  readonly arrivalS: number
  readonly stageS: readonly number[]
  /** Current stage; stageCount once done. */
  stage: number
  state: 'pending' | 'queued' | 'running' | 'done'
  startedS: number
  // QueueKey of the stage queue it waits in.
  priorityS: number
  enqueuedS: number
  seq: number
}

interface SimBatch {
  readonly task: string
  readonly index: number
  readonly startS: number
  readonly earliestS: number
  readonly requests: SimRequest[]
  remaining: number
  priorityS: number
  completedS: number
}

interface PoolState {
  readonly id: string
  tasks: 'all' | ReadonlySet<string>
  readonly workers: StageWorkers[]
  readonly queues: Array<PriorityHeap<SimRequest>>
  readonly dispatchPending: boolean[]
}

export function simulateRewardService (trace: RewardTrace, policy: RewardScalingPolicy, options: RewardSimulationOptions = {}): RewardSimulationResult {
  const stages = trace.stages
  const stageCount = stages.length
  const queue = createEventQueue()
  const before = queueOrder(policy.discipline)
  const history: Record<string, BatchHistory> = {}
  const active: SimBatch[] = []
  const replayed: SimBatch[] = []
  /** The first batches, when options.replayHistory: run, not reported. */
  const warmUps: SimBatch[] = []
  const pools = new Map<string, PoolState>()
  const heldBy = { cpu: 0, gpu: 0 }
  const seconds = { cpu: 0, gpu: 0 }
  let accruedUntilS = 0
  let seq = 0
  const planner = { calls: 0, totalMs: 0, maxMs: 0, maxRequests: 0 }
  const baseSeed = options.seed ?? 1
  const allocation: RewardSimulationResult['allocation'] = options.recordAllocation === true ? [] : undefined
  const lifecycle = options.workers !== undefined ? checkWorkerLifecycle(options.workers) : idealWorkers
  const pacer = createStartPacer(queue, lifecycle)
  const decidesAtHint = lifecycle.startS > 0
  const dispatchS = lifecycle.dispatchS ?? 0

  const replayHistory = options.replayHistory === true
  for (const task of trace.tasks) {
    if (!replayHistory) history[task.id] = historyOf(task.batches[0]!.startS, task.batches[0]!.requests, dispatchS)
    for (const [index, recorded] of task.batches.entries()) {
      if (index === 0 && !replayHistory) continue
      const batch: SimBatch = {
        task: task.id,
        index,
        startS: recorded.startS,
        earliestS: Math.max(...recorded.requests.map(r => r.arrivalS + sum(r.stageS))),
        requests: [],
        remaining: recorded.requests.length,
        priorityS: Infinity,
        completedS: Number.NaN,
      }
      for (const r of recorded.requests) {
        batch.requests.push({ batch, arrivalS: r.arrivalS, stageS: r.stageS, stage: 0, state: 'pending', startedS: Number.NaN, priorityS: Infinity, enqueuedS: 0, seq: 0 })
      }
      if (index === 0) warmUps.push(batch)
      else replayed.push(batch)
      queue.at(batch.startS, () => startBatch(batch))
    }
  }
  queue.runUntil()
  const stranded = [...warmUps, ...replayed].filter(b => b.remaining > 0)
  if (stranded.length > 0) {
    throw new Error(`policy ${policy.name} left ${stranded.reduce((n, b) => n + b.remaining, 0)} requests of ${stranded.length} batches without workers (first: task ${stranded[0]!.task} batch ${stranded[0]!.index})`)
  }

  // Clamped at 0: completion and T sum the same durations in different orders (rounding only).
  const delays = replayed.map(b => Math.max(0, b.completedS - b.earliestS))
  return {
    policy: policy.name,
    cpuSeconds: seconds.cpu,
    gpuSeconds: seconds.gpu,
    avgExtraDelayS: delays.length === 0 ? 0 : sum(delays) / delays.length,
    maxExtraDelayS: delays.length === 0 ? 0 : Math.max(...delays),
    batches: replayed.map((b, i) => ({ task: b.task, index: b.index, earliestS: b.earliestS, completedS: b.completedS, extraDelayS: delays[i]! })),
    planner: {
      calls: planner.calls,
      meanMs: planner.calls === 0 ? 0 : planner.totalMs / planner.calls,
      maxMs: planner.maxMs,
      maxRequests: planner.maxRequests,
    },
    ...(allocation !== undefined ? { allocation } : {}),
  }

  function startBatch (batch: SimBatch): void {
    batch.priorityS = policy.batchPriorityS({ startS: batch.startS, history: history[batch.task], stages, exactEarliestS: batch.earliestS })
    let firstArrivalS = Infinity
    for (const request of batch.requests) firstArrivalS = Math.min(firstArrivalS, request.arrivalS)
    if (decidesAtHint) {
      active.push(batch)
      decide('batch-start', batch)
    }
    // Scheduled before the arrivals: at one instant events run in scheduling order, so the pool exists first.
    queue.at(firstArrivalS, () => {
      if (!decidesAtHint) active.push(batch)
      decide('batch-arrival', batch)
    })
    for (const request of batch.requests) queue.at(request.arrivalS, () => advance(request, 0))
  }

  /** Moves a request to its next stage with work from `fromStage` on (or finishes it). */
  function advance (request: SimRequest, fromStage: number): void {
    let k = fromStage
    while (k < stageCount && !(request.stageS[k]! > 0)) k++
    request.stage = k
    if (k === stageCount) {
      request.state = 'done'
      const batch = request.batch
      if (--batch.remaining === 0) completeBatch(batch)
      return
    }
    const pool = poolServing(request.batch.task)
    request.state = 'queued'
    request.priorityS = request.batch.priorityS
    request.enqueuedS = queue.nowS
    request.seq = seq++
    pool.queues[k]!.push(request)
    scheduleDispatch(pool, k)
  }

  function scheduleDispatch (pool: PoolState, k: number): void {
    if (pool.dispatchPending[k]) return
    pool.dispatchPending[k] = true
    // Runs after every event already due at this instant (ties run in scheduling order).
    queue.at(queue.nowS, () => { pool.dispatchPending[k] = false; dispatch(pool, k) })
  }

  function dispatch (pool: PoolState, k: number): void {
    const waiting = pool.queues[k]!
    const workers = pool.workers[k]!
    while (workers.busy < workers.capacity && waiting.size > 0) {
      const request = waiting.pop()!
      workers.take()
      request.state = 'running'
      request.startedS = queue.nowS
      queue.after(request.stageS[k]! + dispatchS, () => {
        workers.release()
        scheduleDispatch(pool, k)
        advance(request, k + 1)
      })
    }
  }

  function completeBatch (batch: SimBatch): void {
    batch.completedS = queue.nowS
    active.splice(active.indexOf(batch), 1)
    history[batch.task] = historyOf(batch.startS, batch.requests, dispatchS)
    decide('batch-complete', batch)
  }

  function decide (reason: DecisionRecord['reason'], cause: SimBatch): void {
    const nowS = queue.nowS
    const batches: ActiveBatch[] = active.map((batch, b) => snapshotOf(batch, b, nowS))
    const began = performance.now()
    const decision = policy.decide({
      nowS,
      stages,
      maxExtraDelayS: trace.maxExtraDelayS,
      batches,
      history,
      seed: (Math.imul(baseSeed, 0x9e3779b1) + planner.calls) >>> 0,
    })
    const ms = performance.now() - began
    planner.calls++
    planner.totalMs += ms
    planner.maxMs = Math.max(planner.maxMs, ms)
    planner.maxRequests = Math.max(planner.maxRequests, decision.estimatedRequests)
    apply(decision)
    options.onDecision?.({ atS: nowS, reason, task: cause.task, index: cause.index, decision })
  }

  function apply (decision: ScalingDecision): void {
    const listed = new Set<string>()
    for (const planned of decision.pools) {
      if (planned.workers.length !== stageCount || planned.workers.some(n => !Number.isInteger(n) || n < 0)) {
        throw new RangeError(`policy ${policy.name}: pool ${planned.id} needs ${stageCount} whole worker counts, got [${planned.workers.join(', ')}]`)
      }
      listed.add(planned.id)
      const pool = pools.get(planned.id) ?? newPool(planned.id)
      pool.tasks = planned.tasks === 'all' ? 'all' : new Set(planned.tasks)
      for (let k = 0; k < stageCount; k++) pool.workers[k]!.setTarget(planned.workers[k]!)
    }
    for (const pool of pools.values()) {
      if (!listed.has(pool.id)) for (const workers of pool.workers) workers.setTarget(0)
      for (let k = 0; k < stageCount; k++) if (pool.queues[k]!.size > 0) scheduleDispatch(pool, k)
    }
  }

  function newPool (id: string): PoolState {
    const pool: PoolState = {
      id,
      tasks: 'all',
      workers: stages.map((stage, k) => createStageWorkers(queue, lifecycle, pacer, {
        held: delta => accrue(stage.resource, delta),
        ready: () => scheduleDispatch(pool, k),
      })),
      queues: stages.map(() => createPriorityHeap<SimRequest>(before)),
      dispatchPending: new Array<boolean>(stageCount).fill(false),
    }
    pools.set(id, pool)
    return pool
  }

  /** Accrues allocated worker-seconds up to now, then changes the held workers of `resource` by `delta`. */
  function accrue (resource: 'cpu' | 'gpu', delta: number): void {
    const nowS = queue.nowS
    seconds.cpu += heldBy.cpu * (nowS - accruedUntilS)
    seconds.gpu += heldBy.gpu * (nowS - accruedUntilS)
    accruedUntilS = nowS
    heldBy[resource] += delta
    if (allocation !== undefined) {
      const last = allocation.at(-1)
      if (last?.atS === nowS) { last.cpu = heldBy.cpu; last.gpu = heldBy.gpu } else allocation.push({ atS: nowS, cpu: heldBy.cpu, gpu: heldBy.gpu })
    }
  }

  /** The task's dedicated pool if it has one, else a shared pool. */
  function poolServing (task: string): PoolState {
    let shared: PoolState | undefined
    for (const pool of pools.values()) {
      if (pool.tasks === 'all') shared ??= pool
      else if (pool.tasks.has(task)) return pool
    }
    if (shared !== undefined) return shared
    throw new Error(`policy ${policy.name} gave task ${task} no pool while its batch is active`)
  }

  function snapshotOf (batch: SimBatch, b: number, nowS: number): ActiveBatch {
    const inFlight: InFlightRequest[] = []
    const exact: EstimatedRequest[] | undefined = policy.perfectKnowledge ? [] : undefined
    for (const r of batch.requests) {
      if (r.state === 'queued' || r.state === 'running') {
        const elapsedS = r.state === 'running' ? nowS - r.startedS : null
        inFlight.push(elapsedS === null ? { stage: r.stage, elapsedS, queuedSinceS: r.enqueuedS } : { stage: r.stage, elapsedS })
        if (exact !== undefined) {
          const stageS = r.stageS.map((s, j) => j < r.stage ? 0 : s)
          stageS[r.stage] = Math.max(0, stageS[r.stage]! - (elapsedS ?? 0))
          exact.push(elapsedS === null
            ? { batch: b, readyS: nowS, stageS, running: false, queuedSinceS: r.enqueuedS }
            : { batch: b, readyS: nowS, stageS, running: true })
        }
      } else if (r.state === 'pending') {
        exact?.push({ batch: b, readyS: r.arrivalS, stageS: r.stageS, running: false })
      }
    }
    const completed = batch.requests.length - batch.remaining
    const view: ActiveBatch = { task: batch.task, index: batch.index, startS: batch.startS, size: batch.requests.length, completed, priorityS: batch.priorityS, inFlight }
    return exact === undefined ? view : { ...view, exactRemaining: exact }
  }
}

/**
 * A batch's history as the planner sees it. Live, a stage's time is measured
 * from the worker's lease to its completion report, so it includes the
 * dispatch overhead of every stage the request ran.
 */
function historyOf (startS: number, requests: ReadonlyArray<{ arrivalS: number, stageS: readonly number[] }>, dispatchS: number): BatchHistory {
  return { requests: requests.map(r => ({ offsetS: r.arrivalS - startS, stageS: r.stageS.map(s => s > 0 ? s + dispatchS : 0) })) }
}

function sum (values: readonly number[]): number {
  let total = 0
  for (const v of values) total += v
  return total
}
