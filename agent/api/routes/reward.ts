/**
 * /v1/reward: thin adapters over the reward service (ERR_UNAVAILABLE with its
 * reason when it is not running).
 *   POST /v1/reward/batches             batch-start hint { task, batch, size }
 *   POST /v1/reward/requests            submit { task, batch, requestId, payload, batchSize? }; answers once the leader holds it
 *                                       (with `result` when the request is already done: a resubmission, through any agent)
 *   GET  /v1/reward/requests/:id        the result (?waitMs= long-polls up to 20 s); state pending or done; through any agent
 *   POST /v1/reward/cancel              cancel { task, batch, requestIds? }: the batch, or those requests, end as cancelled
 *   GET  /v1/reward/status              tasks, batches in flight, queues per stage, workers per stage per node
 *   POST /v1/reward/workers             a process started outside the supervisor registers as a worker of a stage { stage, slots? }
 *   POST /v1/reward/workers/leave       ... and leaves (its process exiting does too)
 *   POST /v1/reward/work/fetch          a supervised worker takes a request of its stage (long-poll)
 *   POST /v1/reward/work/complete       ... and posts its reward, output or error
 */
import type { FastifyInstance } from 'fastify'
import { Type, type Static } from '@sinclair/typebox'
import { AgentError } from '../../../core/errors.ts'
import type { Caller, RewardService } from '../../reward/reward-service.ts'
import { BatchStartBody, CancelAnswerSchema, CancelBody, CompleteBody, ExternalWorkerBody, FetchWorkBodySchema, RequestId, RewardSubmitAnswerSchema, SubmitBody, WaitMsSchema, type FetchWorkBody } from '../wire/reward.ts'
import { errorResponses } from '../wire/errors.ts'
import { hangUpSignal } from './hang-up.ts'

export interface RewardSource {
  reward(): RewardService | { unavailable: string }
}

const conflict = { 409: Type.Ref('ErrorBody'), 410: Type.Ref('ErrorBody'), 429: Type.Ref('ErrorBody') }

export function registerRewardRoutes (app: FastifyInstance, source: RewardSource): void {
  const service = (): RewardService => {
    const s = source.reward()
    if ('unavailable' in s) throw new AgentError('ERR_UNAVAILABLE', `the reward service is not running: ${s.unavailable}`)
    return s
  }
  /** The calling process (SO_PEERCRED), or null when the agent cannot tell. */
  const callerOf = (request: { caller?: { pid: number } | null }): Caller => request.caller != null ? { pid: request.caller.pid } : null

  app.post<{ Body: Static<typeof BatchStartBody> }>('/v1/reward/batches', {
    schema: { summary: 'Batch-start hint: the batch starts now with `size` requests (the planner scales for it)', body: BatchStartBody, response: { ...errorResponses, ...conflict } },
  }, async request => await service().batchStart(request.body))

  app.post<{ Body: Static<typeof SubmitBody> }>('/v1/reward/requests', {
    schema: {
      summary: 'Submit a reward request; answers once the leader holds it (idempotent by requestId)',
      body: SubmitBody,
      response: { 200: RewardSubmitAnswerSchema, ...errorResponses, ...conflict },
    },
  }, async request => await service().submit(request.body))

  app.get<{ Params: { id: string }, Querystring: { waitMs?: number } }>('/v1/reward/requests/:id', {
    schema: {
      summary: 'The result of a request submitted through any agent (kept until fetched); waitMs long-polls',
      params: Type.Object({ id: RequestId }),
      querystring: Type.Object({ waitMs: Type.Optional(WaitMsSchema) }, { additionalProperties: false }),
      response: errorResponses,
    },
  }, async (request, reply) => await service().result(request.params.id, request.query.waitMs ?? 0, hangUpSignal(reply)))

  app.post<{ Body: Static<typeof CancelBody> }>('/v1/reward/cancel', {
    schema: {
      summary: 'Cancel a batch (every request of it not done yet; the batch ends) or some of its requests: they end with status cancelled',
      body: CancelBody,
      response: { 200: CancelAnswerSchema, ...errorResponses, ...conflict },
    },
  }, async request => await service().cancel(request.body))

  app.get('/v1/reward/status', {
    schema: { summary: 'The reward service: tasks, batches in flight, queue lengths per stage, workers per stage per node', response: errorResponses },
  }, async () => await service().status())

  app.post<{ Body: Static<typeof ExternalWorkerBody> }>('/v1/reward/workers', {
    schema: {
      summary: 'A process started outside the agent registers as an external worker of a stage, with `slots` requests at once: one worker id each, to fetch and complete with; planned as the stage\'s workers',
      body: ExternalWorkerBody,
      response: { 200: Type.Object({ stage: Type.String(), workerIds: Type.Array(Type.String()) }), ...errorResponses },
    },
  }, async request => service().registerWorker(request.body, callerOf(request)))

  app.post('/v1/reward/workers/leave', {
    schema: { summary: 'The calling process\'s external workers leave (so does a process that exits)', response: { 200: Type.Object({ workerIds: Type.Array(Type.String()) }), ...errorResponses } },
  }, async request => service().leave(callerOf(request)))

  app.post<{ Body: FetchWorkBody }>('/v1/reward/work/fetch', {
    schema: { summary: 'A supervised worker takes the next request of its stage (lease), waiting up to waitMs', body: FetchWorkBodySchema, response: { ...errorResponses, ...conflict } },
  }, async (request, reply) => await service().fetchWork(request.body, callerOf(request), hangUpSignal(reply)))

  app.post<{ Body: Static<typeof CompleteBody> }>('/v1/reward/work/complete', {
    schema: { summary: 'A worker posts the reward (ends the request), the output for the next stage, or an error', body: CompleteBody, response: { ...errorResponses, ...conflict } },
  }, async request => await service().completeWork(request.body, callerOf(request)))
}
