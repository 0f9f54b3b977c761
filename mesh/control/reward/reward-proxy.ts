/**
 * The reward proxy (DistRS §4–5) that the acting leader hosts, one per epoch:
 * trainers' requests in per-stage Earliest-Batch-First queues, leases for the
 * workers that fetch them, stage timeouts, results until the submitting agent
 * collected them, and the active batches and history the scaling planner
 * reads (plannerSnapshot).
 *
 * Contract:
 * - submit is idempotent by requestId: the same id with the same task, batch
 *   and payload answers the request's state; different content is
 *   ERR_REWARD_CONFLICT. A batch starts with its hint (batchStart) or with the
 *   first request that carries batchSize; it completes when `size` of its
 *   requests have results (here, or reported done by resync).
 * - A fetch from a worker that already holds a lease (the answer to its
 *   earlier fetch was lost, and the call was retried) gets that lease again,
 *   unless it comes from another process (pid) of that worker id: the
 *   restarted worker's lease is lost (retried once) and it gets a new one.
 *   A worker fetches one request at a time, so a new fetch of a worker ends
 *   its earlier one still waiting (answered with no lease: its caller gave
 *   up, and a lease handed to it would reach nobody).
 * - A request runs its stages in order. A worker fetches a lease (long-poll),
 *   then completes it with a reward (the request ends at that stage; required
 *   at the last one), an output for the next stage, or an error (the request
 *   fails). A lease ends with the timeout result (status timeout, reward
 *   timeoutReward) stageTimeoutMs after it was handed out, whatever the worker
 *   does later. The stage timeout also bounds the time a request waits in a
 *   stage's queue while the latest plan gives the stage no worker (checked
 *   at every tick): it then ends with the timeout result too, so nothing
 *   waits for ever. Waiting behind other requests, or for planned workers
 *   that are still starting, is not bounded here (the planner sizes for it).
 * - A lease is lost when its worker is reported dead (workerLost), is missing
 *   from a heartbeat its agent built after the lease's fetch (report seq; a
 *   report delayed across the fetch says nothing about the worker, and one
 *   older than the last report taken from that agent is ignored), or its agent
 *   has not reported for leaseTimeoutMs. The request is then queued again at the same stage for a
 *   different worker, once; a second loss ends it as failed. A loss noticed
 *   after the lease's stage timeout ran out ends it with the timeout result
 *   instead (never retried). The one retry is counted across leader changes:
 *   `reward.await` tells the submitting agent which requests used it, and a
 *   resubmission marked `retried` starts at attempt 2.
 * - Acknowledged requests survive a leader change through the submitting
 *   agents (agent/reward/reward-submitter.ts): each keeps every request it got an answer for
 *   until it holds the result, and a new leader that answers `unknown` for one
 *   gets the batch (resync) and the request again. This proxy's requests
 *   live only in the leader's memory; a new epoch starts without any.
 * - A result is kept here until the trainer fetched it, through any agent
 *   (the submitting agent reports its fetches in `ack`; another agent asks
 *   with `result`), then resultRetentionMs more for a repeated fetch; one
 *   never fetched is dropped unfetchedResultRetentionMs after it finished.
 *   So it survives the submitting agent. It survives this leader through the
 *   submitting agent, which holds it too and hands the results its trainer
 *   has not fetched to every new leader (resync `results`). A resubmission
 *   of a request with a result, through any agent, is answered with it.
 * - The planner's history (the last completed batch of each task) is cluster
 *   state: a new epoch starts from the history in the desired state
 *   (`history`, planner-history.ts), and the leader task publishes it again
 *   at every batch completion. A batch in flight at a leader change is
 *   rebuilt from its submitting agents: the resync gives its age (so it keeps
 *   its start and EBF priority) and the arrival offset and stage times of
 *   each of its requests with a result, so its history, once it completes,
 *   holds every request, not only those finished under the new leader.
 *   A batch completes into the history of its task unless none of its
 *   requests ran here and the history already holds that batch or a later
 *   one (a completed batch a submitting agent hands over again).
 *
 * Times: `now()` is a monotonic clock in ms; the planner gets seconds on it.
 */
import { randomUUID } from 'node:crypto'
import type { Logger } from 'pino'
import { AgentError } from '../../../core/errors.ts'
import { createPriorityHeap, type PriorityHeap } from '../../../core/priority-heap.ts'
import { earliestBatchFirst, type QueueKey } from '../../policies/reward-scaling/queue-order.ts'
import type { ActiveBatch, InFlightRequest, PlannerSnapshot, RewardScalingPolicy, RewardStage } from '../../policies/reward-scaling/types.ts'
import type { TaskHistory } from './planner-history.ts'
import type { PlacementNode } from '../../policies/reward-scaling/worker-placement.ts'
import type { RewardStageSpec } from './reward-config.ts'
import { stageCost } from './reward-config.ts'
import {
  AwaitBody, BatchStartBody, CancelBody, CompleteBody, FetchBody, HeartbeatBody, LeaderSubmitBody, ResultBody, ResyncBody, WorkerLostBody, requestDigest, validatorOf,
  type CancelAnswer, type RewardLease, type RewardResult, type RewardStatus, type RewardWorkersPayload,
} from './reward-messages.ts'

export interface RewardProxyOptions {
  stages: readonly RewardStageSpec[]
  /** Reward of a timed-out or failed request. */
  timeoutReward: number
  /** Largest payload / output, JSON bytes. */
  maxPayloadBytes: number
  /** Requests held at once (any state); beyond it submit is ERR_REWARD_FULL. */
  maxPendingRequests: number
  /** An agent silent this long loses its leases, ms. */
  leaseTimeoutMs: number
  /** A result the trainer fetched is kept this long for a repeated fetch, ms. */
  resultRetentionMs: number
  /** A result the trainer never fetched is forgotten this long after its request finished, ms. Default 3600000. */
  unfetchedResultRetentionMs?: number
  /** A batch with no submission or result for this long is dropped (its trainer is gone), ms. Default 600000. */
  batchIdleTimeoutMs?: number
  /** D of the planner's constraint, ms. */
  maxExtraDelayMs: number
  /** Gives a starting batch its EBF priority (the scaling policy's estimate, DistRS §5.2). */
  policy: Pick<RewardScalingPolicy, 'batchPriorityS'>
  /** The planner's history to start from (the desired state's, planner-history.ts), least recently completed task first. Default: none. */
  history?: ReadonlyMap<string, TaskHistory>
}

export interface RewardProxyComponents {
  logger: Logger
  /** Monotonic clock, ms. */
  now(): number
  /**
   * Tells the scaler to decide now. DistRS decides when a batch's first
   * request arrives and when a batch completes (§5.1–5.2, `batch-arrival`,
   * `batch-complete`: the decision points of the simulator, mesh/sim/reward-sim.ts);
   * the live service also decides at the trainer's batch-start hint
   * (`batch-start`, §4) so that worker processes, which take time to start,
   * are up when the first request arrives (the simulator's workers start at
   * once, so it needs no such decision).
   */
  onBatchBoundary(reason: 'batch-start' | 'batch-arrival' | 'batch-complete', task: string, batch: number): void
  /** The scaler's latest decision, for status and to tell a stage it gives no worker. */
  plan(): RewardWorkersPayload | null
  /**
   * Requests wait at `stage` and the latest plan gives the stage no worker:
   * the scaler should plan again (with fewer cores than stages, stages take
   * turns). Called when such a request is queued and at every tick while one
   * waits; the scaler rate-limits. Optional.
   */
  onStageWithoutWorkers?(stage: string, queued: number): void
  leaderId: string
}

export interface RewardProxy {
  batchStart(body: unknown): { task: string, batch: number, size: number, started: boolean }
  /** With the result when the request is done (a resubmission of a finished request). */
  submit(body: unknown, submitter: string): { requestId: string, state: RequestState, duplicate: boolean, result?: RewardResult }
  /**
   * A trainer's fetch through an agent that does not hold the request (its
   * submitting agent may be gone): its result, waiting up to waitMs; the
   * fetch counts as the trainer's. ERR_NOT_FOUND for a request this leader
   * does not know.
   */
  result(body: unknown, signal: AbortSignal): Promise<{ requestId: string, state: 'pending' } | { requestId: string, state: 'done', result: RewardResult }>
  /** Long-poll: a lease of the worker's stage, or null after waitMs. */
  fetch(body: unknown, signal: AbortSignal): Promise<{ lease: RewardLease | null }>
  complete(body: unknown): { accepted: true }
  /**
   * The trainer cancels a batch or some of its requests (CancelBody): those
   * not done end as `cancelled` (a running one's lease ends; its worker's
   * completion is refused) and do not count in the planner's history; a whole
   * batch completes. ERR_NOT_FOUND for a batch this leader does not know.
   */
  cancel(body: unknown): CancelAnswer
  heartbeat(body: unknown): { ok: true }
  workerLost(body: unknown): { ok: true }
  /**
   * Long-poll: results among `ids` (at least one, or none after waitMs), the
   * ids this leader does not know, and those (without a result) that used
   * their one retry after a lost worker: the submitting agent passes that on
   * if it has to submit them to a later leader.
   */
  awaitResults(body: unknown, signal: AbortSignal): Promise<AwaitAnswer>
  resync(body: unknown): { batches: number }
  status(): RewardStatus
  /** Checks silent agents' leases and idle batches; call periodically. */
  tick(): void
  plannerSnapshot(seed: number): PlannerSnapshot
  /** The planner's history: per task its last completed batch, least recently completed first. */
  history(): Array<{ task: string, history: TaskHistory }>
  /** Replaces the history (with what the leader publishes of it: the same, rounded and cut to size). */
  adoptHistory(history: ReadonlyMap<string, TaskHistory>): void
  /** Agents that reported within leaseTimeoutMs, with their capacity. */
  nodes(): PlacementNode[]
  /** Per stage: live external workers (registered processes, not started by a supervisor) by the reports within leaseTimeoutMs. */
  externalWorkers(): number[]
  stop(): void
}

export type RequestState = 'queued' | 'running' | 'done'

export interface AwaitAnswer { results: RewardResult[], unknown: string[], retried: string[] }

interface Batch {
  task: string
  index: number
  key: string
  startMs: number
  size: number
  priorityS: number
  requests: Set<ProxyRequest>
  /** Ids with a result: here or, after a leader change, reported by resync. */
  doneIds: Set<string>
  /** Every id submitted to it or reported done (at most size). */
  known: Set<string>
  /**
   * Its requests with a result, as the planner's history of this batch (DistRS
   * Alg. 2 input): arrival (on now()'s clock) and seconds per stage, by id.
   * Those finished here, and those a resync reported.
   */
  finished: Map<string, { arrivedMs: number, stageS: readonly number[] }>
  /** A request of it finished here (not only reported by a resync). */
  ranHere: boolean
  completed: boolean
  /** A request of it was submitted to this proxy (its first arrival was a decision point). */
  arrived: boolean
  /** The trainer cancelled the whole batch: what finished of it is not its task's history. */
  cancelled: boolean
  lastActivityMs: number
}

/** reportSeq: the agent's last report seq when it forwarded the fetch (-1: not given, any later report counts). */
interface Lease { id: string, workerId: string, node: string, pid: number | undefined, reportSeq: number, startedMs: number, timer: NodeJS.Timeout, delivered: RewardLease }

interface ProxyRequest {
  id: string
  batch: Batch
  payload: unknown
  digest: string
  submitter: string
  /** The submitting agent's id of the submit call (LeaderSubmitBody.submission). */
  submission: string | undefined
  arrivedMs: number
  stage: number
  state: RequestState
  /** The previous stage's output. */
  input: unknown
  /** 1, or 2 once the one retry after a lost worker is used (here or before a resubmission). */
  attempt: number
  excludeWorker: string | undefined
  queueEntry: QueueEntry | undefined
  enqueuedMs: number
  lease: Lease | undefined
  stageMs: number[]
  result: RewardResult | undefined
  finishedMs: number
  /** When the trainer fetched the result (through any agent), or undefined. */
  fetchedMs: number | undefined
}

interface QueueEntry extends QueueKey { request: ProxyRequest }

interface NodeReport { node: string, nodeName: string, cpuCores: number, gpus: number, stages: string[], workers: Map<string, string>, external: Set<string>, seq: number, atMs: number }

interface FetchWaiter { workerId: string, node: string, pid: number | undefined, reportSeq: number, resolve(lease: RewardLease | null): void }

const validators = {
  batchStart: validatorOf(BatchStartBody, 'batch-start hint'),
  submit: validatorOf(LeaderSubmitBody, 'reward request'),
  fetch: validatorOf(FetchBody, 'fetch'),
  complete: validatorOf(CompleteBody, 'completion'),
  heartbeat: validatorOf(HeartbeatBody, 'worker report'),
  workerLost: validatorOf(WorkerLostBody, 'lost-worker report'),
  await: validatorOf(AwaitBody, 'result wait'),
  resync: validatorOf(ResyncBody, 'resync'),
  result: validatorOf(ResultBody, 'result fetch'),
  cancel: validatorOf(CancelBody, 'cancellation'),
}

const batchKey = (task: string, batch: number): string => `${task}#${batch}`

export function jsonBytes (value: unknown): number {
  return value === undefined ? 0 : Buffer.byteLength(JSON.stringify(value))
}

export function createRewardProxy (options: RewardProxyOptions, components: RewardProxyComponents): RewardProxy {
  const { stages } = options
  const log = components.logger
  const now = components.now
  const stageIndex = new Map(stages.map((s, i) => [s.name, i]))
  const plannerStages: RewardStage[] = stages.map(s => ({ name: s.name, resource: s.resource, cost: stageCost(s), timeoutS: s.timeoutMs / 1000 }))
  const batchIdleTimeoutMs = options.batchIdleTimeoutMs ?? 600_000
  const unfetchedResultRetentionMs = options.unfetchedResultRetentionMs ?? 3_600_000
  const requests = new Map<string, ProxyRequest>()
  const batches = new Map<string, Batch>()
  /** Per task, its last completed batch; Map order: least recently completed first. */
  let history = new Map<string, TaskHistory>(options.history ?? [])
  const completedBatches = new Map<string, number>()
  const queues: Array<PriorityHeap<QueueEntry>> = stages.map(() => createPriorityHeap<QueueEntry>(earliestBatchFirst))
  const queued = stages.map(() => 0)
  const running = stages.map(() => 0)
  const leases = new Map<string, ProxyRequest>()
  const fetchWaiters: FetchWaiter[][] = stages.map(() => [])
  const resultWaiters = new Set<() => void>()
  const reports = new Map<string, NodeReport>()
  let seq = 0
  let stopped = false

  const secondsOf = (ms: number): number => ms / 1000

  const startBatch = (task: string, index: number, size: number): { batch: Batch, started: boolean } => {
    const key = batchKey(task, index)
    const existing = batches.get(key)
    if (existing !== undefined) {
      if (size > existing.size) existing.size = size
      return { batch: existing, started: false }
    }
    if (completedBatches.has(key)) throw new AgentError('ERR_BAD_REQUEST', `batch ${index} of task ${task} has already completed`)
    const startMs = now()
    const priorityS = priorityOf(task, startMs)
    const batch: Batch = { task, index, key, startMs, size, priorityS, requests: new Set(), doneIds: new Set(), known: new Set(), finished: new Map(), ranHere: false, completed: false, arrived: false, cancelled: false, lastActivityMs: startMs }
    batches.set(key, batch)
    log.info({ task, batch: index, size }, 'reward batch started')
    components.onBatchBoundary('batch-start', task, index)
    return { batch, started: true }
  }

  const priorityOf = (task: string, startMs: number): number => options.policy.batchPriorityS({ startS: secondsOf(startMs), history: history.get(task), stages: plannerStages })

  const enqueue = (request: ProxyRequest): void => {
    request.state = 'queued'
    request.enqueuedMs = now()
    const entry: QueueEntry = { request, priorityS: request.batch.priorityS, enqueuedS: secondsOf(request.enqueuedMs), seq: seq++ }
    request.queueEntry = entry
    queues[request.stage]!.push(entry)
    queued[request.stage]!++
    dispatch(request.stage)
    if (queued[request.stage]! > 0 && plannedWorkersOf(request.stage) === 0) {
      workerlessSinceMs[request.stage] ??= now()
      components.onStageWithoutWorkers?.(stages[request.stage]!.name, queued[request.stage]!)
    }
  }

  /**
   * Per stage: since when requests wait at it and the plan gives it no worker
   * (undefined: not so at the last look). A request queued there longer than
   * the stage timeout, all of it in such a spell, times out (tick).
   */
  const workerlessSinceMs: Array<number | undefined> = stages.map(() => undefined)
  const checkWorkerlessStage = (k: number, t: number): void => {
    if (queued[k] === 0 || plannedWorkersOf(k) > 0) { workerlessSinceMs[k] = undefined; return }
    const since = workerlessSinceMs[k] ??= t
    const stage = stages[k]!
    components.onStageWithoutWorkers?.(stage.name, queued[k]!)
    // No plan at all yet (none published): not a stage the plan leaves out.
    if (components.plan() === null || t - since < stage.timeoutMs) return
    for (const r of [...requests.values()]) {
      if (r.state !== 'queued' || r.stage !== k || t - Math.max(r.enqueuedMs, since) < stage.timeoutMs) continue
      log.info({ requestId: r.id, stage: stage.name, timeoutMs: stage.timeoutMs }, 'reward request timed out in the queue of a stage without workers')
      finish(r, { status: 'timeout', reward: options.timeoutReward, stage: stage.name, message: `waited longer than the ${stage.timeoutMs} ms timeout of stage ${stage.name} in its queue, with no worker planned for the stage` })
    }
  }

  /** Workers the latest plan places for a stage, on all agents. */
  const plannedWorkersOf = (stage: number): number => {
    const workers = components.plan()?.workers ?? {}
    let n = 0
    for (const counts of Object.values(workers)) n += counts[stages[stage]!.name] ?? 0
    return n
  }

  /** Live workers of a stage by the latest reports, other than `except`. */
  const liveWorkersOf = (stage: number, except?: string): number => {
    const name = stages[stage]!.name
    let n = 0
    for (const r of reports.values()) for (const [id, s] of r.workers) if (s === name && id !== except) n++
    return n
  }

  /** Takes the first request a worker may run (a retried one skips the worker that lost it, when the stage has another). */
  const take = (stage: number, workerId: string): ProxyRequest | undefined => {
    const queue = queues[stage]!
    const aside: QueueEntry[] = []
    let found: ProxyRequest | undefined
    while (queue.size > 0) {
      const entry = queue.pop()!
      const r = entry.request
      if (r.queueEntry !== entry || r.state !== 'queued') continue
      if (r.excludeWorker === workerId && liveWorkersOf(stage, workerId) > 0) { aside.push(entry); continue }
      found = r
      break
    }
    for (const entry of aside) queue.push(entry)
    return found
  }

  const leaseFor = (r: ProxyRequest, workerId: string, node: string, pid: number | undefined, reportSeq: number): RewardLease => {
    const stage = stages[r.stage]!
    queued[r.stage]!--
    running[r.stage]!++
    r.queueEntry = undefined
    r.state = 'running'
    const id = randomUUID()
    const timer = setTimeout(() => timeOut(r, id), stage.timeoutMs)
    timer.unref()
    const delivered: RewardLease = {
      leaseId: id, requestId: r.id, task: r.batch.task, batch: r.batch.index, stage: stage.name, attempt: r.attempt, payload: r.payload,
      ...(r.stage > 0 ? { input: r.input } : {}), timeoutMs: stage.timeoutMs, lastStage: r.stage === stages.length - 1,
    }
    r.lease = { id, workerId, node, pid, reportSeq, startedMs: now(), timer, delivered }
    leases.set(id, r)
    return delivered
  }

  /** The lease `workerId` of `node` already holds, if the same process asks again; a restarted process's lease is lost. */
  const heldLease = (node: string, workerId: string, pid: number | undefined): RewardLease | undefined => {
    for (const r of leases.values()) {
      const lease = r.lease!
      if (lease.node !== node || lease.workerId !== workerId) continue
      if (pid === undefined || lease.pid === undefined || lease.pid === pid) return lease.delivered
      loseLease(r, `worker ${workerId} restarted (pid ${lease.pid} → ${pid})`)
    }
    return undefined
  }

  const dispatch = (stage: number): void => {
    const waiters = fetchWaiters[stage]!
    while (waiters.length > 0 && queued[stage]! > 0) {
      const waiter = waiters[0]!
      const r = take(stage, waiter.workerId)
      if (r === undefined) return
      waiters.shift()
      waiter.resolve(leaseFor(r, waiter.workerId, waiter.node, waiter.pid, waiter.reportSeq))
    }
  }

  /** Ends the lease of a running request; returns the seconds it ran. */
  const endLease = (r: ProxyRequest): void => {
    const lease = r.lease
    if (lease === undefined) return
    clearTimeout(lease.timer)
    leases.delete(lease.id)
    running[r.stage]!--
    r.stageMs[r.stage] = (r.stageMs[r.stage] ?? 0) + now() - lease.startedMs
    r.lease = undefined
  }

  /** Ends a request with `result`; `history`: its timings are the planner's history of its batch (not for a cancelled one). */
  const finish = (r: ProxyRequest, result: Omit<RewardResult, 'requestId' | 'task' | 'batch' | 'stageS'>, history = true): void => {
    if (r.state === 'queued' && r.queueEntry !== undefined) { queued[r.stage]!--; r.queueEntry = undefined }
    endLease(r)
    r.state = 'done'
    r.finishedMs = now()
    r.result = { requestId: r.id, task: r.batch.task, batch: r.batch.index, ...result, stageS: r.stageMs.map(secondsOf) }
    const batch = r.batch
    batch.doneIds.add(r.id)
    if (history) batch.finished.set(r.id, { arrivedMs: r.arrivedMs, stageS: r.stageMs.map(secondsOf) })
    batch.ranHere = true
    batch.lastActivityMs = r.finishedMs
    for (const wake of resultWaiters) wake()
    if (!batch.completed && batch.doneIds.size >= batch.size) completeBatch(batch)
  }

  const completeBatch = (batch: Batch): void => {
    batch.completed = true
    batches.delete(batch.key)
    completedBatches.set(batch.key, now())
    const previous = history.get(batch.task)
    if (!batch.cancelled && batch.finished.size > 0 && (batch.ranHere || previous === undefined || batch.index > previous.batch)) {
      const requests = [...batch.finished.values()].map(f => ({ offsetS: Math.max(0, secondsOf(f.arrivedMs - batch.startMs)), stageS: f.stageS }))
      history.delete(batch.task)
      history.set(batch.task, { batch: batch.index, requests })
    }
    log.info({ task: batch.task, batch: batch.index, size: batch.size, seconds: secondsOf(now() - batch.startMs) }, 'reward batch completed')
    components.onBatchBoundary('batch-complete', batch.task, batch.index)
  }

  /**
   * A result a submitting agent held across a leader change (resync): kept as
   * a done request, so a fetch or a resubmission through any agent gets it.
   * Its batch is the active one if this leader has it, else a record of its own.
   */
  const adoptResult = (result: RewardResult, digest: string): void => {
    if (requests.has(result.requestId)) return
    const key = batchKey(result.task, result.batch)
    const batch: Batch = batches.get(key) ?? {
      task: result.task, index: result.batch, key, startMs: now(), size: 1, priorityS: 0, requests: new Set(), doneIds: new Set(), known: new Set(),
      finished: new Map(), ranHere: false, completed: true, arrived: true, cancelled: false, lastActivityMs: now(),
    }
    const r: ProxyRequest = {
      id: result.requestId, batch, payload: undefined, digest, submitter: '', submission: undefined, arrivedMs: now(), stage: stages.length - 1, state: 'done', input: undefined,
      attempt: 1, excludeWorker: undefined, queueEntry: undefined, enqueuedMs: 0, lease: undefined,
      stageMs: stages.map(() => 0), result, finishedMs: now(), fetchedMs: undefined,
    }
    requests.set(r.id, r)
    batch.requests.add(r)
    batch.known.add(r.id)
    if (!batch.doneIds.has(r.id)) {
      batch.doneIds.add(r.id)
      if (!batch.completed && batch.doneIds.size >= batch.size) completeBatch(batch)
    }
  }

  const timeOut = (r: ProxyRequest, leaseId: string): void => {
    if (r.lease?.id !== leaseId || stopped) return
    const stage = stages[r.stage]!
    log.info({ requestId: r.id, stage: stage.name, timeoutMs: stage.timeoutMs }, 'reward request timed out')
    finish(r, { status: 'timeout', reward: options.timeoutReward, stage: stage.name, message: `stage ${stage.name} took longer than ${stage.timeoutMs} ms` })
  }

  /** The worker holding the request's lease is gone: once more on another worker, then failed. */
  const loseLease = (r: ProxyRequest, why: string): void => {
    const lease = r.lease
    if (lease === undefined) return
    // Its stage timeout ran out before the loss was noticed (the timer is late
    // behind a busy event loop, or leaseTimeoutMs > the stage timeout): the
    // request timed out, whatever became of the worker. Never retried.
    if (now() - lease.startedMs >= stages[r.stage]!.timeoutMs) { timeOut(r, lease.id); return }
    endLease(r)
    const stage = stages[r.stage]!.name
    if (r.attempt > 1) {
      log.warn({ requestId: r.id, stage, worker: lease.workerId, why }, 'reward request lost its worker twice: failed')
      finish(r, { status: 'failed', reward: options.timeoutReward, stage, message: `lost its worker twice at stage ${stage} (last: ${lease.workerId}: ${why})` })
      return
    }
    log.info({ requestId: r.id, stage, worker: lease.workerId, why }, 'reward request lost its worker: retried once')
    r.attempt++
    r.excludeWorker = lease.workerId
    enqueue(r)
  }

  const loseLeasesWhere = (match: (lease: Lease) => boolean, why: (lease: Lease) => string): void => {
    for (const r of [...leases.values()]) if (r.lease !== undefined && match(r.lease)) loseLease(r, why(r.lease))
  }

  const checkPayload = (value: unknown, what: string): void => {
    const bytes = jsonBytes(value)
    if (bytes > options.maxPayloadBytes) throw new AgentError('ERR_BODY_TOO_LARGE', `${what} is ${bytes} bytes of JSON; the limit is reward.maxPayloadBytes = ${options.maxPayloadBytes}`)
  }

  const requireStages = (): void => {
    if (stages.length === 0) throw new AgentError('ERR_UNAVAILABLE', 'the reward service has no stages configured (reward.stages)')
  }

  const proxy: RewardProxy = {
    batchStart (body) {
      requireStages()
      const b = validators.batchStart.parse(body)
      const { batch, started } = startBatch(b.task, b.batch, b.size)
      return { task: batch.task, batch: batch.index, size: batch.size, started }
    },

    submit (body, submitter) {
      requireStages()
      const b = validators.submit.parse(body)
      checkPayload(b.payload, `the payload of request ${b.requestId}`)
      const digest = requestDigest(b)
      const known = requests.get(b.requestId)
      if (known !== undefined) {
        if (known.digest !== digest) {
          throw new AgentError('ERR_REWARD_CONFLICT', `request ${b.requestId} was submitted before with another task, batch or payload (task ${known.batch.task}, batch ${known.batch.index})`)
        }
        // The same submit call asked again (its answer was lost on the way back) is no duplicate to its trainer.
        const duplicate = b.submission === undefined || known.submission !== b.submission || known.submitter !== submitter
        return { requestId: b.requestId, state: known.state, duplicate, ...(known.result !== undefined ? { result: known.result } : {}) }
      }
      if (requests.size >= options.maxPendingRequests) throw new AgentError('ERR_REWARD_FULL', `the reward proxy holds ${requests.size} requests (reward.maxPendingRequests); retry later`)
      let batch = batches.get(batchKey(b.task, b.batch))
      if (batch === undefined) {
        if (b.batchSize === undefined) {
          throw new AgentError('ERR_BAD_REQUEST', completedBatches.has(batchKey(b.task, b.batch))
            ? `batch ${b.batch} of task ${b.task} has already completed`
            : `no batch-start hint for batch ${b.batch} of task ${b.task}: send it first (POST /v1/reward/batches) or give batchSize`)
        }
        batch = startBatch(b.task, b.batch, b.batchSize).batch
      }
      if (batch.known.size >= batch.size && !batch.known.has(b.requestId)) {
        throw new AgentError('ERR_BAD_REQUEST', `batch ${b.batch} of task ${b.task} already has its ${batch.size} requests`)
      }
      const r: ProxyRequest = {
        id: b.requestId, batch, payload: b.payload, digest, submitter, submission: b.submission, arrivedMs: now(), stage: 0, state: 'queued', input: undefined,
        attempt: b.retried === true ? 2 : 1, excludeWorker: undefined, queueEntry: undefined, enqueuedMs: 0, lease: undefined,
        stageMs: stages.map(() => 0), result: undefined, finishedMs: 0, fetchedMs: undefined,
      }
      requests.set(r.id, r)
      batch.requests.add(r)
      batch.known.add(r.id)
      batch.lastActivityMs = r.arrivedMs
      enqueue(r)
      if (!batch.arrived) {
        batch.arrived = true
        components.onBatchBoundary('batch-arrival', batch.task, batch.index)
      }
      return { requestId: r.id, state: r.state, duplicate: false }
    },

    async fetch (body, signal) {
      const b = validators.fetch.parse(body)
      const stage = stageIndex.get(b.stage)
      if (stage === undefined) throw new AgentError('ERR_BAD_REQUEST', `unknown stage ${JSON.stringify(b.stage)}; the stages are ${stages.map(s => s.name).join(', ') || 'none'}`)
      const reportSeq = b.reportSeq ?? -1
      const held = heldLease(b.node, b.workerId, b.pid)
      if (held !== undefined) return { lease: held }
      const r = take(stage, b.workerId)
      if (r !== undefined) return { lease: leaseFor(r, b.workerId, b.node, b.pid, reportSeq) }
      if (b.waitMs === 0 || stopped) return { lease: null }
      return await new Promise(resolve => {
        const waiters = fetchWaiters[stage]!
        const done = (lease: RewardLease | null): void => {
          clearTimeout(timer)
          signal.removeEventListener('abort', onAbort)
          resolve({ lease })
        }
        for (const earlier of waiters.filter(w => w.node === b.node && w.workerId === b.workerId)) {
          waiters.splice(waiters.indexOf(earlier), 1)
          earlier.resolve(null)
        }
        const waiter: FetchWaiter = { workerId: b.workerId, node: b.node, pid: b.pid, reportSeq, resolve: done }
        const leave = (): void => { const i = waiters.indexOf(waiter); if (i >= 0) { waiters.splice(i, 1); done(null) } }
        const onAbort = leave
        const timer = setTimeout(leave, b.waitMs)
        signal.addEventListener('abort', onAbort, { once: true })
        waiters.push(waiter)
      })
    },

    complete (body) {
      const b = validators.complete.parse(body)
      const r = leases.get(b.leaseId)
      if (r === undefined || r.lease?.workerId !== b.workerId) {
        throw new AgentError('ERR_REWARD_LEASE_LOST', `lease ${b.leaseId} is not held by ${b.workerId} (it timed out, was lost, its request was cancelled, or it belongs to an earlier leader)`)
      }
      const stage = stages[r.stage]!
      const last = r.stage === stages.length - 1
      if (b.error !== undefined) {
        finish(r, { status: 'failed', reward: options.timeoutReward, stage: stage.name, message: `worker ${b.workerId} failed at stage ${stage.name}: ${b.error}` })
        return { accepted: true }
      }
      if (b.reward === undefined && last) throw new AgentError('ERR_BAD_REQUEST', `stage ${stage.name} is the last stage: its completion needs a reward (or an error)`)
      checkPayload(b.output, `the output of request ${r.id} at stage ${stage.name}`)
      if (b.reward !== undefined) {
        finish(r, { status: 'ok', reward: b.reward, ...(b.output !== undefined ? { output: b.output } : {}) })
        return { accepted: true }
      }
      endLease(r)
      r.input = b.output
      r.stage++
      r.excludeWorker = undefined
      enqueue(r)
      return { accepted: true }
    },

    cancel (body) {
      const b = validators.cancel.parse(body)
      const key = batchKey(b.task, b.batch)
      const batch = batches.get(key)
      const answer: CancelAnswer = { cancelled: [], finished: [], unknown: [] }
      if (batch === undefined) {
        if (!completedBatches.has(key)) throw new AgentError('ERR_NOT_FOUND', `no batch ${b.batch} of task ${b.task} here (never started, or forgotten: it completed more than reward.unfetchedResultRetentionMs ago)`)
        // Completed: whatever it held has a result.
        const ids = b.requestIds ?? [...requests.values()].filter(r => r.batch.key === key).map(r => r.id)
        for (const id of ids) (requests.get(id)?.batch.key === key ? answer.finished : answer.unknown).push(id)
        return answer
      }
      if (b.requestIds === undefined) batch.cancelled = true
      const targets = b.requestIds ?? [...batch.requests].map(r => r.id)
      for (const id of targets) {
        const r = requests.get(id)
        if (r === undefined || r.batch !== batch) { answer.unknown.push(id); continue }
        if (r.state === 'done') { answer.finished.push(id); continue }
        finish(r, { status: 'cancelled', reward: options.timeoutReward, stage: stages[r.stage]!.name, message: `cancelled by the trainer at stage ${stages[r.stage]!.name}` }, false)
        answer.cancelled.push(id)
      }
      if (b.requestIds === undefined && !batch.completed) completeBatch(batch) // nothing more of it is expected
      if (answer.cancelled.length > 0) log.info({ task: b.task, batch: b.batch, cancelled: answer.cancelled.length, whole: b.requestIds === undefined }, 'reward requests cancelled')
      return answer
    },

    heartbeat (body) {
      const b = validators.heartbeat.parse(body)
      const seq = b.seq ?? Number.MAX_SAFE_INTEGER
      const previous = reports.get(b.node)
      // Overtaken by a later report of the same agent (delivered out of order): nothing in it is news.
      if (previous !== undefined && b.seq !== undefined && b.seq <= previous.seq) return { ok: true }
      const workers = new Map(b.workers.map(w => [w.workerId, w.stage]))
      reports.set(b.node, { node: b.node, nodeName: b.nodeName, cpuCores: b.cpuCores, gpus: b.gpus, stages: b.stages, workers, external: new Set(b.workers.filter(w => w.external === true).map(w => w.workerId)), seq: b.seq ?? -1, atMs: now() })
      loseLeasesWhere(l => l.node === b.node && seq > l.reportSeq && !workers.has(l.workerId), l => `worker ${l.workerId} is no longer running on its agent`)
      for (let k = 0; k < stages.length; k++) dispatch(k)
      return { ok: true }
    },

    workerLost (body) {
      const b = validators.workerLost.parse(body)
      loseLeasesWhere(l => l.node === b.node && l.workerId === b.workerId, () => b.why)
      const report = reports.get(b.node)
      report?.workers.delete(b.workerId)
      return { ok: true }
    },

    async awaitResults (body, signal) {
      const b = validators.await.parse(body)
      for (const id of b.ack) {
        const r = requests.get(id)
        if (r?.state === 'done') r.fetchedMs ??= now()
      }
      const collect = (): AwaitAnswer => {
        const results: RewardResult[] = []
        const unknown: string[] = []
        const retried: string[] = []
        for (const id of b.ids) {
          const r = requests.get(id)
          if (r === undefined) unknown.push(id)
          else if (r.result !== undefined) results.push(r.result)
          else if (r.attempt > 1) retried.push(id)
        }
        return { results, unknown, retried }
      }
      let answer = collect()
      if (answer.results.length > 0 || answer.unknown.length > 0 || b.waitMs === 0 || stopped) return answer
      return await new Promise(resolve => {
        const done = (): void => {
          clearTimeout(timer)
          signal.removeEventListener('abort', done)
          resultWaiters.delete(wake)
          resolve(collect())
        }
        const wake = (): void => { answer = collect(); if (answer.results.length > 0) done() }
        const timer = setTimeout(done, b.waitMs)
        signal.addEventListener('abort', done, { once: true })
        resultWaiters.add(wake)
      })
    },

    resync (body) {
      requireStages()
      const b = validators.resync.parse(body)
      for (const s of b.batches) {
        const key = batchKey(s.task, s.batch)
        if (completedBatches.has(key)) continue
        const { batch } = startBatch(s.task, s.batch, s.size)
        // It started before this leader heard of it: as the submitting agent saw it (the earliest, when several report it).
        const startMs = s.ageMs === undefined ? batch.startMs : Math.min(batch.startMs, now() - s.ageMs)
        if (startMs < batch.startMs) {
          batch.startMs = startMs
          batch.priorityS = priorityOf(batch.task, startMs)
        }
        for (const f of s.finished ?? []) {
          if (f.stageS.length === stages.length && !batch.finished.has(f.requestId)) batch.finished.set(f.requestId, { arrivedMs: batch.startMs + f.offsetMs, stageS: f.stageS })
        }
        for (const id of s.doneIds) { batch.doneIds.add(id); batch.known.add(id) }
        if (!batch.completed && batch.doneIds.size >= batch.size) completeBatch(batch)
      }
      for (const { result, digest } of b.results ?? []) adoptResult(result, digest)
      return { batches: b.batches.length }
    },

    async result (body, signal) {
      const b = validators.result.parse(body)
      const r = requests.get(b.requestId)
      if (r === undefined) {
        throw new AgentError('ERR_NOT_FOUND', `reward request ${b.requestId} is not known: not submitted, or its result was fetched more than reward.resultRetentionMs ago (never fetched: reward.unfetchedResultRetentionMs)`)
      }
      if (r.result === undefined && b.waitMs > 0 && !stopped) {
        await new Promise<void>(resolve => {
          const done = (): void => { clearTimeout(timer); signal.removeEventListener('abort', done); resultWaiters.delete(wake); resolve() }
          const wake = (): void => { if (r.result !== undefined) done() }
          const timer = setTimeout(done, b.waitMs)
          signal.addEventListener('abort', done, { once: true })
          resultWaiters.add(wake)
        })
      }
      if (r.result === undefined) return { requestId: r.id, state: 'pending' }
      r.fetchedMs ??= now()
      return { requestId: r.id, state: 'done', result: r.result }
    },

    status () {
      const workersOf = (report: NodeReport): Record<string, number> => {
        const out: Record<string, number> = {}
        for (const stage of report.workers.values()) out[stage] = (out[stage] ?? 0) + 1
        return out
      }
      const t = now()
      const tasks = new Map<string, RewardStatus['tasks'][number]>()
      const taskOf = (task: string): RewardStatus['tasks'][number] => {
        let entry = tasks.get(task)
        if (entry === undefined) {
          const h = history.get(task)
          const stageMs = plannerStages.map((_, j) => {
            const ran = (h?.requests ?? []).filter(r => r.stageS[j]! > 0)
            return ran.length === 0 ? null : Math.round(ran.reduce((sum, r) => sum + r.stageS[j]!, 0) / ran.length * 1e4) / 10
          })
          tasks.set(task, entry = { task, activeBatches: 0, completedBatches: 0, historyRequests: h?.requests.length ?? 0, historyBatch: h?.batch ?? null, historyStageMs: stageMs })
        }
        return entry
      }
      for (const key of completedBatches.keys()) taskOf(key.slice(0, key.lastIndexOf('#'))).completedBatches++
      for (const task of history.keys()) taskOf(task)
      const active = [...batches.values()].map(b => {
        taskOf(b.task).activeBatches++
        let q = 0
        let run = 0
        for (const r of b.requests) { if (r.state === 'queued') q++; else if (r.state === 'running') run++ }
        return { task: b.task, batch: b.index, size: b.size, done: b.doneIds.size, queued: q, running: run, ageS: secondsOf(t - b.startMs) }
      })
      let done = 0
      for (const r of requests.values()) if (r.state === 'done') done++
      const live = [...reports.values()].filter(r => t - r.atMs <= options.leaseTimeoutMs)
      return {
        leaderId: components.leaderId,
        stages: stages.map((s, k) => ({ name: s.name, resource: s.resource, queued: queued[k]!, running: running[k]!, workers: liveWorkersOf(k) })),
        tasks: [...tasks.values()],
        batches: active,
        nodes: live.map(r => ({ node: r.node, nodeName: r.nodeName, cpuCores: r.cpuCores, gpus: r.gpus, lastReportS: secondsOf(t - r.atMs), workers: workersOf(r) })),
        requests: { held: requests.size, queued: queued.reduce((a, b) => a + b, 0), running: running.reduce((a, b) => a + b, 0), done },
        plan: components.plan(),
      }
    },

    tick () {
      const t = now()
      // An agent that has not reported for leaseTimeoutMs (or never did, since the lease began) loses its leases.
      const silent = (node: string, since: number): boolean => t - (reports.get(node)?.atMs ?? since) > options.leaseTimeoutMs
      loseLeasesWhere(l => silent(l.node, l.startedMs), () => `its agent has not reported for ${options.leaseTimeoutMs} ms`)
      for (const report of reports.values()) if (silent(report.node, 0)) report.workers.clear()
      for (const [id, r] of requests) {
        if (r.state !== 'done') continue
        const expired = r.fetchedMs !== undefined ? t - r.fetchedMs > options.resultRetentionMs : t - r.finishedMs > unfetchedResultRetentionMs
        if (expired) { requests.delete(id); r.batch.requests.delete(r) }
      }
      for (const batch of [...batches.values()]) {
        if (t - batch.lastActivityMs > batchIdleTimeoutMs && [...batch.requests].every(r => r.state === 'done')) {
          log.warn({ task: batch.task, batch: batch.index, size: batch.size, done: batch.doneIds.size }, 'reward batch idle: dropped')
          batches.delete(batch.key)
          components.onBatchBoundary('batch-complete', batch.task, batch.index)
        }
      }
      for (const [key, at] of completedBatches) if (t - at > batchIdleTimeoutMs) completedBatches.delete(key)
      for (let k = 0; k < stages.length; k++) checkWorkerlessStage(k, t)
    },

    plannerSnapshot (seed) {
      const nowMs = now()
      const active: ActiveBatch[] = [...batches.values()].map(b => {
        const inFlight: InFlightRequest[] = []
        for (const r of b.requests) {
          if (r.state === 'queued') inFlight.push({ stage: r.stage, elapsedS: null, queuedSinceS: secondsOf(r.enqueuedMs) })
          else if (r.state === 'running') inFlight.push({ stage: r.stage, elapsedS: secondsOf(nowMs - r.lease!.startedMs) })
        }
        return { task: b.task, index: b.index, startS: secondsOf(b.startMs), size: b.size, completed: b.doneIds.size, priorityS: b.priorityS, inFlight }
      })
      return { nowS: secondsOf(nowMs), stages: plannerStages, maxExtraDelayS: options.maxExtraDelayMs / 1000, batches: active, history: Object.fromEntries(history), seed }
    },

    history () {
      return [...history].map(([task, h]) => ({ task, history: h }))
    },

    adoptHistory (next) {
      history = new Map(next)
    },

    nodes () {
      const t = now()
      return [...reports.values()].filter(r => t - r.atMs <= options.leaseTimeoutMs).map(r => ({ id: r.node, cpuCores: r.cpuCores, gpus: r.gpus, stages: r.stages }))
    },

    externalWorkers () {
      const t = now()
      const counts = stages.map(() => 0)
      for (const r of reports.values()) {
        if (t - r.atMs > options.leaseTimeoutMs) continue
        for (const id of r.external) {
          const k = stageIndex.get(r.workers.get(id) ?? '')
          if (k !== undefined) counts[k]!++
        }
      }
      return counts
    },

    stop () {
      if (stopped) return
      stopped = true
      for (const r of leases.values()) clearTimeout(r.lease!.timer)
      for (const waiters of fetchWaiters) for (const w of waiters.splice(0)) w.resolve(null)
      for (const wake of [...resultWaiters]) wake()
    },
  }
  return proxy
}
