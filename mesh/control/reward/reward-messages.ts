/**
 * The bodies of the reward service's leader calls (`reward.*`, mesh/election/
 * leader-calls.ts) and local API routes, declared once. The proxy validates
 * every body it gets over the mesh with these (a leader call is not trusted
 * to come from our own API), the API routes validate with the same schemas.
 */
import { createHash } from 'node:crypto'
import { Type, type Static } from '@sinclair/typebox'
import { createInputValidator, type InputValidator } from '../../../core/validate-input.ts'
import type { TSchema } from '@sinclair/typebox'

export const TaskName = Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$', description: 'the trainer\'s task (one RL job)' })
export const BatchIndex = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: 'the batch\'s index in its task' })
export const BatchSize = Type.Integer({ minimum: 1, maximum: 1_000_000, description: 'requests in the batch (B)' })
export const RequestId = Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$', description: 'the trainer\'s id of the request; submitting it again is answered, not run again' })
export const WorkerId = Type.String({ pattern: '^[A-Za-z0-9._:/-]{1,200}$' })
const PeerId = Type.String({ minLength: 1, maxLength: 128 })
const WaitMs = Type.Integer({ minimum: 0, maximum: 20_000, description: 'how long to wait for something to arrive, ms' })

export const BatchStartBody = Type.Object({ task: TaskName, batch: BatchIndex, size: BatchSize }, { additionalProperties: false })

export const SubmitBody = Type.Object({
  task: TaskName,
  batch: BatchIndex,
  requestId: RequestId,
  payload: Type.Unknown({ description: 'what the first stage\'s worker gets (JSON, at most reward.maxPayloadBytes)' }),
  batchSize: Type.Optional(BatchSize),
}, { additionalProperties: false })

/**
 * A submission as the submitting agent forwards it to the leader: the
 * trainer's fields, and whether the request already used its one retry after
 * a lost worker under an earlier leader (the leader's `reward.await` answer
 * lists such requests in `retried`), so a leader change does not give it a
 * second one; and the id of the trainer's submit call, so that the call's own
 * retry (after a lost answer) is not reported as a duplicate.
 */
export const LeaderSubmitBody = Type.Object({
  ...SubmitBody.properties,
  retried: Type.Optional(Type.Boolean({ description: 'the request lost a worker before: it is not retried again' })),
  submission: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9-]{1,64}$', description: 'the submitting agent\'s id of this submit call: the call asked again (its answer was lost) is not answered as a duplicate' })),
}, { additionalProperties: false })

/**
 * Order of an agent's worker reports (HeartbeatBody.seq): strictly increasing
 * for the life of the agent's supervisor, and across its restarts (it starts
 * from the wall clock in ms). A fetch carries the seq of the last report its
 * agent built before forwarding it, so the leader can tell a report that was
 * built before the lease (and says nothing about its worker) from one built after.
 */
const ReportSeq = Type.Integer({ minimum: 0, description: 'the agent\'s worker-report sequence number' })

export const FetchBody = Type.Object({
  node: PeerId, workerId: WorkerId, stage: Type.String({ minLength: 1, maxLength: 32 }), waitMs: WaitMs,
  reportSeq: Type.Optional(ReportSeq),
  pid: Type.Optional(Type.Integer({ minimum: 1, description: 'the worker\'s process id (its agent\'s supervisor knows it): tells a retried fetch from a restarted worker' })),
}, { additionalProperties: false })

export const CompleteBody = Type.Object({
  workerId: WorkerId,
  leaseId: Type.String({ minLength: 1, maxLength: 64 }),
  reward: Type.Optional(Type.Number({ description: 'the request\'s reward: ends the request at this stage (required at the last stage)' })),
  output: Type.Optional(Type.Unknown({ description: 'what the next stage\'s worker gets as input' })),
  error: Type.Optional(Type.String({ maxLength: 4096, description: 'the reward function failed on this request: it ends as failed' })),
}, { additionalProperties: false })

/**
 * A trainer cancels a batch (no requestIds: every request of it not done yet,
 * and the batch ends: nothing more of it is expected) or some of its requests.
 * A cancelled request ends with status `cancelled` and the timeout reward; one
 * a worker is running is abandoned (the worker's completion is refused).
 */
export const CancelBody = Type.Object({
  task: TaskName,
  batch: BatchIndex,
  requestIds: Type.Optional(Type.Array(RequestId, { minItems: 1, maxItems: 10_000, uniqueItems: true, description: 'only these requests (default: the whole batch)' })),
}, { additionalProperties: false })

export const CancelAnswerSchema = Type.Object({
  cancelled: Type.Array(Type.String(), { description: 'requests that were pending and are cancelled now' }),
  finished: Type.Array(Type.String(), { description: 'requests that had a result already (kept: fetch it)' }),
  unknown: Type.Array(Type.String(), { description: 'requests of the list that the service does not know in this batch' }),
}, { additionalProperties: false })
export type CancelAnswer = Static<typeof CancelAnswerSchema>

export const WorkerReport = Type.Object({
  workerId: WorkerId,
  stage: Type.String({ minLength: 1, maxLength: 32 }),
  pid: Type.Integer({ minimum: 0 }),
  external: Type.Optional(Type.Boolean({ description: 'a process started outside the agent that registered for the stage: planned as one of its workers, placed on no node\'s capacity' })),
}, { additionalProperties: false })

/** POST /v1/reward/workers: a process started outside the agent's supervisor registers to serve a stage with `slots` requests at once. */
export const ExternalWorkerBody = Type.Object({
  stage: Type.String({ minLength: 1, maxLength: 32 }),
  slots: Type.Optional(Type.Integer({ minimum: 1, maximum: 64, description: 'requests it serves at once: one worker id each (default 1)' })),
}, { additionalProperties: false })
export type ExternalWorkerRequest = Static<typeof ExternalWorkerBody>

export const HeartbeatBody = Type.Object({
  node: PeerId,
  nodeName: Type.String({ minLength: 1, maxLength: 253 }),
  cpuCores: Type.Integer({ minimum: 0 }),
  gpus: Type.Integer({ minimum: 0 }),
  stages: Type.Array(Type.String({ maxLength: 32 }), { maxItems: 16, description: 'stages this agent can run workers of' }),
  workers: Type.Array(WorkerReport, { maxItems: 100_000, description: 'its live workers' }),
  seq: Type.Optional(ReportSeq),
}, { additionalProperties: false })

export const WorkerLostBody = Type.Object({ node: PeerId, workerId: WorkerId, why: Type.String({ maxLength: 1024 }) }, { additionalProperties: false })

export const AwaitBody = Type.Object({
  ids: Type.Array(RequestId, { maxItems: 10_000, description: 'requests the submitting agent still waits for' }),
  ack: Type.Array(RequestId, { maxItems: 10_000, description: 'results the trainer has fetched through the submitting agent: the leader forgets them reward.resultRetentionMs later' }),
  waitMs: WaitMs,
}, { additionalProperties: false })

/** A request's result as it travels between agents and the leader (RewardResult). */
export const RewardResultBody = Type.Object({
  requestId: RequestId,
  task: TaskName,
  batch: BatchIndex,
  status: Type.Union([Type.Literal('ok'), Type.Literal('timeout'), Type.Literal('failed'), Type.Literal('cancelled')]),
  reward: Type.Number(),
  output: Type.Optional(Type.Unknown()),
  stage: Type.Optional(Type.String({ maxLength: 32 })),
  message: Type.Optional(Type.String({ maxLength: 8192 })),
  stageS: Type.Array(Type.Number({ minimum: 0 }), { maxItems: 16 }),
}, { additionalProperties: false })

export const ResyncBody = Type.Object({
  batches: Type.Array(Type.Object({
    task: TaskName,
    batch: BatchIndex,
    size: BatchSize,
    doneIds: Type.Array(RequestId, { maxItems: 1_000_000 }),
    ageMs: Type.Optional(Type.Number({ minimum: 0, maximum: 7 * 86_400_000, description: 'how long ago the batch started, as the submitting agent saw it (its hint, or its first request), ms: the new leader keeps its start and EBF priority' })),
    finished: Type.Optional(Type.Array(Type.Object({
      requestId: RequestId,
      offsetMs: Type.Number({ minimum: 0, maximum: 7 * 86_400_000, description: 'its arrival after the batch\'s start, as the submitting agent saw it, ms' }),
      stageS: Type.Array(Type.Number({ minimum: 0 }), { maxItems: 16, description: 'its result\'s seconds per stage' }),
    }, { additionalProperties: false }), { maxItems: 1_000_000, description: 'requests of the batch with a result here: the planner\'s history of the batch, once it completes, holds them' })),
  }, { additionalProperties: false }), { maxItems: 10_000 }),
  results: Type.Optional(Type.Array(Type.Object({
    result: RewardResultBody,
    digest: Type.String({ pattern: '^[0-9a-f]{64}$', description: 'requestDigest of the submission: a resubmission must match it' }),
  }, { additionalProperties: false }), { maxItems: 10_000, description: 'results the submitting agent holds that its trainer has not fetched: a new leader keeps them for fetches through any agent' })),
}, { additionalProperties: false })

/** A trainer asks an agent for a result it does not hold (the request was submitted through another agent). */
export const ResultBody = Type.Object({ requestId: RequestId, waitMs: WaitMs }, { additionalProperties: false })

export type BatchStartRequest = Static<typeof BatchStartBody>
export type SubmitRequest = Static<typeof SubmitBody>
export type LeaderSubmitRequest = Static<typeof LeaderSubmitBody>
export type FetchRequest = Static<typeof FetchBody>
export type CompleteRequest = Static<typeof CompleteBody>
export type HeartbeatRequest = Static<typeof HeartbeatBody>
export type WorkerLostRequest = Static<typeof WorkerLostBody>
export type AwaitRequest = Static<typeof AwaitBody>
export type ResyncRequest = Static<typeof ResyncBody>
export type ResultRequest = Static<typeof ResultBody>
export type CancelRequest = Static<typeof CancelBody>

/** How a request ended. `reward` is the timeout reward for timeout, failed and cancelled. */
export interface RewardResult {
  requestId: string
  task: string
  batch: number
  status: 'ok' | 'timeout' | 'failed' | 'cancelled'
  reward: number
  /** The output the last stage's worker posted with its reward (ok only). */
  output?: unknown
  /** The stage it timed out or failed at. */
  stage?: string
  message?: string
  /** Seconds at each stage, in pipeline order (0 for a stage it never ran). */
  stageS: number[]
}

/** What a worker gets from a fetch. */
export interface RewardLease {
  leaseId: string
  requestId: string
  task: string
  batch: number
  stage: string
  /** 1, or 2 for the one retry after a lost worker. */
  attempt: number
  payload: unknown
  /** The previous stage's output (absent at the first stage). */
  input?: unknown
  /** The stage's timeout: the leader ends the request this long after handing it out, ms. */
  timeoutMs: number
  /** This is the pipeline's last stage: the completion must carry the reward. */
  lastStage: boolean
}

export interface RewardStatus {
  leaderId: string
  stages: Array<{ name: string, resource: 'cpu' | 'gpu', queued: number, running: number, workers: number }>
  /**
   * historyBatch: the completed batch the planner's history of the task comes from (null: none yet);
   * historyStageMs: per stage, the mean time of the history's requests that ran it, ms (null: none ran it).
   */
  tasks: Array<{ task: string, activeBatches: number, completedBatches: number, historyRequests: number, historyBatch: number | null, historyStageMs: Array<number | null> }>
  batches: Array<{ task: string, batch: number, size: number, done: number, queued: number, running: number, ageS: number }>
  nodes: Array<{ node: string, nodeName: string, cpuCores: number, gpus: number, lastReportS: number, workers: Record<string, number> }>
  requests: { held: number, queued: number, running: number, done: number }
  /** The latest scaling decision: workers per stage per node, and what did not fit. */
  plan: RewardWorkersPayload | null
}

/** Payload of the fenced decision `reward-workers`: workers per stage, per node (mesh peer id). */
export interface RewardWorkersPayload {
  workers: Record<string, Record<string, number>>
  /** Workers per stage the policy asked for, and how many found no node. */
  wanted: Record<string, number>
  unplaced: Record<string, number>
  /**
   * How the policy's plan met the cluster's capacity (mesh/policies/reward-scaling/capacity-fit.ts):
   * `wanted` is the plan cut down to it. Absent in plans made before capacity was fitted.
   */
  capacity?: PlanCapacity
}

export interface PlanCapacity {
  /** The policy wanted more workers than the cores or GPUs hold: `wanted` was cut down. */
  bound: boolean
  /** Capacity the plan was fitted to: cores and GPUs of the agents that run reward stages. */
  cpuCores: number
  gpus: number
  /** Workers per stage the policy wanted before the cut. */
  unconstrained: Record<string, number>
  /** unconstrained − wanted, per stage. */
  shortBy: Record<string, number>
  /** Stages with work but no worker in this plan (more stages than capacity): they take turns. */
  waiting: string[]
}

export const rewardWorkersKind = 'reward-workers'

/** Why a payload is not a reward-workers plan (null: no plan), or undefined when it is one. */
export function rewardWorkersProblem (payload: unknown): string | undefined {
  if (payload === null) return undefined
  const p = payload as Partial<RewardWorkersPayload> | undefined
  if (p === undefined || typeof p !== 'object' || Array.isArray(p)) return 'a reward-workers plan is { workers, wanted, unplaced, capacity? }'
  const counts = (r: unknown): boolean => r !== null && typeof r === 'object' && !Array.isArray(r) && Object.values(r).every(n => Number.isInteger(n) && (n as number) >= 0)
  if (p.workers === null || typeof p.workers !== 'object' || !Object.values(p.workers).every(counts)) return 'workers: per node, per stage, a count of workers'
  if (!counts(p.wanted)) return 'wanted: per stage, a count of workers'
  if (!counts(p.unplaced)) return 'unplaced: per stage, a count of workers'
  return undefined
}

export function validatorOf<S extends TSchema> (schema: S, what: string): InputValidator<S> {
  return createInputValidator(schema, 'ERR_BAD_REQUEST', what, () => {})
}

/** What idempotency compares: the same id must come with the same task, batch and payload. */
export function requestDigest (b: Pick<SubmitRequest, 'task' | 'batch' | 'payload'>): string {
  return createHash('sha256').update(JSON.stringify([b.task, b.batch, b.payload ?? null])).digest('hex')
}
