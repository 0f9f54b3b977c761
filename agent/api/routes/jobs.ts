/**
 * /v1/jobs: thin adapters over the jobs service (mesh/control/jobs/), ERR_UNAVAILABLE
 * with its reason when it is not running.
 *   GET  /v1/jobs                this agent's applied job table (no leader contact)
 *   POST /v1/jobs                submit a job spec (mesh/control/jobs/job-spec.ts); forwarded to the acting leader,
 *                                answered once the decision holding it is published; idempotent by id
 *   POST /v1/jobs/:id/complete   a job reports it finished (idempotent)
 *   POST /v1/jobs/:id/ops        run an operation of a live job on all its ranks (agent/workers/PROTOCOL.md);
 *                                answered when every rank ran it; idempotent by opId
 *   GET  /v1/jobs/top            the leader's operation scheduler: residency, queues, switches (leader call)
 */
import type { FastifyInstance } from 'fastify'
import { Type } from '@sinclair/typebox'
import { AgentError } from '../../../core/errors.ts'
import type { JobsService } from '../../../mesh/control/jobs/jobs-service.ts'
import { JobCompleteAnswerSchema, JobSubmitAnswerSchema, JobsViewSchema, jobIdPattern } from '../wire/jobs.ts'
import { errorResponses } from '../wire/errors.ts'
import { JobsTopSchema, OpAnswerSchema, OpBodySchema } from '../wire/workers.ts'

export interface JobsSource {
  jobs(): JobsService | { unavailable: string }
}

const conflictResponses = { 409: Type.Ref('ErrorBody'), 507: Type.Ref('ErrorBody') }

export function registerJobsRoutes (app: FastifyInstance, source: JobsSource): void {
  const jobs = (): JobsService => {
    const j = source.jobs()
    if ('unavailable' in j) throw new AgentError('ERR_UNAVAILABLE', `jobs are not available: ${j.unavailable}`)
    return j
  }
  app.get('/v1/jobs', {
    schema: { summary: 'The job table this agent applied: every job, its state and nodes, the decision it came from, the jobs placed on this node', response: { 200: JobsViewSchema, ...errorResponses } },
  }, async () => jobs().list())

  app.post('/v1/jobs', {
    schema: {
      summary: 'Submit a job (id, nodes, gpusPerNode, periodS, iterations, segments, maxSlowdown, profiled, switchS); the acting leader places it or queues it',
      body: Type.Unknown({ description: 'a job spec; validated with per-field messages (ERR_JOB_INVALID)' }),
      response: { 200: JobSubmitAnswerSchema, ...conflictResponses, ...errorResponses },
    },
  }, async request => jobs().submit(request.body))

  app.post<{ Params: { id: string } }>('/v1/jobs/:id/complete', {
    schema: {
      summary: 'A running job reports that it finished',
      params: Type.Object({ id: Type.String({ pattern: jobIdPattern }) }),
      response: { 200: JobCompleteAnswerSchema, ...conflictResponses, ...errorResponses },
    },
  }, async request => jobs().complete(request.params.id))

  app.post<{ Params: { id: string } }>('/v1/jobs/:id/ops', {
    schema: {
      summary: 'Run an operation on every rank of a live job (admitted by the leader, state switched in first when another job is resident); answered with each rank\'s result and the measured times',
      params: Type.Object({ id: Type.String({ pattern: jobIdPattern }) }),
      body: OpBodySchema,
      response: { 200: OpAnswerSchema, 409: Type.Ref('ErrorBody'), 502: Type.Ref('ErrorBody'), ...errorResponses },
    },
  }, async (request, reply) => {
    const gone = new AbortController()
    reply.raw.once('close', () => { if (!reply.raw.writableFinished) gone.abort() })
    return await jobs().runOp(request.params.id, request.body, { signal: gone.signal })
  })

  app.get('/v1/jobs/top', {
    schema: { summary: 'The acting leader\'s operation scheduler: per node the resident job and the running operation; per job its queue, switches, run and switch time', response: { 200: JobsTopSchema, ...errorResponses } },
  }, async () => await jobs().top())
}
