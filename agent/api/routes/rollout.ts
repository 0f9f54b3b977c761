/**
 * /v1/rollout: thin adapters over the rollout service (agent/rollout/;
 * ERR_UNAVAILABLE with its reason when it is not running).
 *   GET    /v1/rollout                   instances registered here, instances seen in the cluster, steps running here
 *   POST   /v1/rollout/instances         register an engine of this node { id, url, model, weightVersion?, gpus? }
 *   DELETE /v1/rollout/instances/:id     deregister it
 *   POST   /v1/rollout/terminate         termination notice { instances?, reason? }: their requests move now
 *   POST   /v1/rollout/steps             run a rollout step { model?, requests, options?, stepId?, stream? }; answers with every
 *                                       response complete, or (stream) as server-sent events: each response as it completes, then
 *                                       `done` (a caller that hangs up ends the step; a named one can be submitted again)
 */
import type { FastifyInstance } from 'fastify'
import { Type } from '@sinclair/typebox'
import { AgentError } from '../../../core/errors.ts'
import type { RolloutService } from '../../rollout/rollout-service.ts'
import { LocalInstanceSchema, RegisterInstanceBodySchema, RolloutStatusSchema, RolloutStepAnswerSchema, RolloutStepBodySchema, TerminateBodySchema, type RegisterInstanceBody, type RolloutStepBody, type RolloutStepEvent, type TerminateBody } from '../wire/rollout.ts'
import { errorResponses } from '../wire/errors.ts'
import { hangUpSignal } from './hang-up.ts'

export interface RolloutSource {
  rollout(): RolloutService | { unavailable: string }
}

export function registerRolloutRoutes (app: FastifyInstance, source: RolloutSource): void {
  const service = (): RolloutService => {
    const s = source.rollout()
    if ('unavailable' in s) throw new AgentError('ERR_UNAVAILABLE', `the rollout service is not running: ${s.unavailable}`)
    return s
  }

  app.get('/v1/rollout', {
    schema: { summary: 'Rollout instances registered with this agent, those it sees in the cluster, and the steps running through it', response: { 200: RolloutStatusSchema, ...errorResponses } },
  }, async () => service().status())

  app.post<{ Body: RegisterInstanceBody }>('/v1/rollout/instances', {
    schema: {
      summary: 'Register an OpenAI-compatible streaming completion server of this node (probed with GET <url>/v1/models first; the same id again replaces it)',
      body: RegisterInstanceBodySchema,
      response: { 200: LocalInstanceSchema, ...errorResponses },
    },
  }, async request => await service().instances.register(request.body))

  app.delete<{ Params: { id: string } }>('/v1/rollout/instances/:id', {
    schema: { summary: 'Deregister a rollout instance of this node', params: Type.Object({ id: Type.String({ maxLength: 128 }) }), response: { 200: LocalInstanceSchema, ...errorResponses } },
  }, async request => await service().instances.deregister(request.params.id))

  app.post<{ Body: TerminateBody }>('/v1/rollout/terminate', {
    schema: {
      summary: 'Termination notice: this node (or these instances) will be preempted; every step moves their requests now',
      body: TerminateBodySchema,
      response: { 200: Type.Object({ terminating: Type.Array(LocalInstanceSchema) }), ...errorResponses },
    },
  }, async request => ({ terminating: await service().instances.terminate(request.body) }))

  app.post<{ Body: RolloutStepBody }>('/v1/rollout/steps', {
    bodyLimit: Math.max(app.initialConfig.bodyLimit ?? 0, stepBodyLimitBytes),
    schema: {
      summary: 'Run a rollout step over the cluster\'s instances (RLBoost Algorithm 2, token-level collection and migration); answers with every response complete',
      body: RolloutStepBodySchema,
      response: { 200: RolloutStepAnswerSchema, ...errorResponses },
    },
  }, async (request, reply) => {
    const signal = hangUpSignal(reply)
    if (request.body.stream !== true) return await service().runStep(request.body, signal)
    // Streamed: the first response opens the event stream; a failure before it is the usual coded answer.
    const raw = reply.raw
    let keepalive: NodeJS.Timeout | undefined
    const send = (event: RolloutStepEvent['event'], data: RolloutStepEvent['data']): void => { if (!raw.destroyed) raw.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`) }
    const open = (): void => {
      if (keepalive !== undefined) return
      reply.hijack()
      raw.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' })
      keepalive = setInterval(() => { if (!raw.destroyed) raw.write(': keepalive\n\n') }, streamKeepaliveMs)
    }
    try {
      const { responses: _responses, ...summary } = await service().runStep(request.body, signal, response => { open(); send('response', response) })
      open()
      send('done', summary)
    } catch (err) {
      if (keepalive === undefined) throw err // (the service logged it)
      send('error', err instanceof AgentError ? { code: err.code, message: err.message } : { code: 'ERR_INTERNAL', message: 'internal error (see the agent log)' })
    } finally {
      clearInterval(keepalive)
    }
    if (!raw.destroyed) raw.end()
  })
}

/**
 * A step's prompts travel in its body: a thousand prompts of a few KiB already exceed the API's default
 * 1 MiB limit (api.bodyLimitBytes), so this route takes up to 64 MiB (or api.bodyLimitBytes, if larger).
 */
const stepBodyLimitBytes = 64 * 1024 * 1024

/** How often an open step stream carries a comment, so a client's read timeout tells a hung agent from a slow step. */
const streamKeepaliveMs = 15_000
