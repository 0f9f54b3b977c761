/**
 * /v1/workers: the workers of live jobs on this node (agent/workers/PROTOCOL.md).
 *   POST   /v1/workers              register (validated in full; the initial state is stored as version 0)
 *   GET    /v1/workers              this node's workers and where their state is
 *   GET    /v1/workers/:id/events   the worker's event stream (server-sent events); its closing is the worker's death
 *   POST   /v1/workers/:id/replies  the worker's answer to one event
 *   DELETE /v1/workers/:id          a clean exit (its stored state is kept)
 */
import { setInterval as every } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import { Type } from '@sinclair/typebox'
import { AgentError } from '../../../core/errors.ts'
import type { WorkersService } from '../../workers/workers-service.ts'
import { errorResponses } from '../wire/errors.ts'
import { RegisterAnswerSchema, WorkerReplySchema, WorkersListSchema } from '../wire/workers.ts'
import { eventKeepaliveIntervalMs } from './locks.ts'

export interface WorkersSource {
  workers(): WorkersService | { unavailable: string }
}

const IdParams = Type.Object({ id: Type.String({ pattern: '^w-[0-9a-f-]{36}$' }) })

export function registerWorkersRoutes (app: FastifyInstance, source: WorkersSource): void {
  const workers = (): WorkersService => {
    const w = source.workers()
    if ('unavailable' in w) throw new AgentError('ERR_UNAVAILABLE', `live workers are not available: ${w.unavailable}`)
    return w
  }

  app.post('/v1/workers', {
    schema: {
      summary: 'Register a worker of a live job: job, rank, gpu, the operations it runs and the tensors of its state (key + memory); stores that state as version 0',
      body: Type.Unknown({ description: 'a registration (agent/workers/PROTOCOL.md); validated with per-field messages' }),
      response: { 200: RegisterAnswerSchema, 409: Type.Ref('ErrorBody'), ...errorResponses },
    },
  }, async request => await workers().registry.register(request.body, request.caller?.pid ?? null))

  app.get('/v1/workers', {
    schema: { summary: 'This node\'s workers: job, rank, whether their state is on the device, its stored versions', response: { 200: WorkersListSchema, ...errorResponses } },
  }, async () => ({ workers: workers().registry.list() }))

  app.get<{ Params: { id: string } }>('/v1/workers/:id/events', {
    schema: {
      summary: 'The worker\'s events (offload, onload, release, run, stop) as server-sent events; closing the stream is the worker\'s death',
      params: IdParams,
      response: { 200: { description: 'text/event-stream', content: { 'text/event-stream': { schema: Type.Unknown() } } }, ...errorResponses },
    },
  }, async (request, reply) => {
    const registry = workers().registry
    const raw = reply.raw
    let id = 0
    const closed = registry.attach(request.params.id, (type, data) => { raw.write(`id: ${++id}\nevent: ${type}\ndata: ${JSON.stringify(data)}\n\n`) })
    reply.hijack()
    raw.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' })
    raw.write(': attached\n\n')
    const stop = new AbortController()
    raw.once('close', () => { stop.abort(); closed() })
    void (async () => {
      try {
        for await (const _ of every(eventKeepaliveIntervalMs, undefined, { signal: stop.signal })) raw.write(': keepalive\n\n')
      } catch {
        // aborted: the stream closed
      }
    })()
  })

  app.post<{ Params: { id: string } }>('/v1/workers/:id/replies', {
    schema: { summary: 'The worker\'s answer to one event', params: IdParams, body: WorkerReplySchema, response: { 200: Type.Object({ accepted: Type.Literal(true) }), ...errorResponses } },
  }, async request => {
    workers().registry.reply(request.params.id, request.body)
    return { accepted: true as const }
  })

  app.delete<{ Params: { id: string } }>('/v1/workers/:id', {
    schema: { summary: 'Deregister a worker (a clean exit; its stored state is kept)', params: IdParams, response: { 200: Type.Object({ deregistered: Type.Literal(true) }), ...errorResponses } },
  }, async request => {
    workers().registry.deregister(request.params.id)
    return { deregistered: true as const }
  })
}
