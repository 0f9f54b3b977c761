/**
 * Wire schemas of /v1/reward. The request bodies and the result are declared
 * once in agent/reward/reward-messages.ts (they also travel between agents and
 * the leader); the answers of this agent's submitter and supervisor are
 * declared here and imported by them.
 */
import { Type, type Static } from '@sinclair/typebox'
import { RewardResultBody, WorkerId, type RewardResult, type RewardStatus } from '../../../mesh/control/reward/reward-messages.ts'

export {
  BatchStartBody, CancelAnswerSchema, CancelBody, CompleteBody, ExternalWorkerBody, RequestId, RewardResultBody, SubmitBody, WorkerId,
  type BatchStartRequest, type CancelAnswer, type CancelRequest, type CompleteRequest, type ExternalWorkerRequest, type RewardLease, type RewardResult, type RewardStatus, type SubmitRequest,
} from '../../../mesh/control/reward/reward-messages.ts'

/** How long a long-poll waits at most, ms. */
export const WaitMsSchema = Type.Integer({ minimum: 0, maximum: 20_000 })

/** POST /v1/reward/work/fetch. */
export const FetchWorkBodySchema = Type.Object({ workerId: WorkerId, waitMs: WaitMsSchema }, { additionalProperties: false })
export type FetchWorkBody = Static<typeof FetchWorkBodySchema>

/** POST /v1/reward/requests: `result` when the request is already done (a resubmission of a finished request, through any agent). */
export const RewardSubmitAnswerSchema = Type.Object({ requestId: Type.String(), duplicate: Type.Boolean(), result: Type.Optional(RewardResultBody) })
export interface RewardSubmitAnswer { requestId: string, duplicate: boolean, result?: RewardResult }

/** GET /v1/reward/requests/:id. */
export type RewardResultAnswer = { requestId: string, state: 'pending' } | { requestId: string, state: 'done', result: RewardResult }

/** A reward worker of this agent: queued (waiting for its turn to start), warm (the plan no longer wants it here; it serves until it is stopped), external (a registered process's slot). */
export interface RewardWorkerInfo { workerId: string, stage: string, pid: number, gpu?: number, state: 'queued' | 'running' | 'warm' | 'stopping' | 'restarting' | 'external', crashes: number }

/** GET /v1/reward/status: the reward service from the leader, plus this agent's workers. */
export type RewardStatusBody = RewardStatus & { local: { node: string, pending: number, done: number, workers: RewardWorkerInfo[] } }
