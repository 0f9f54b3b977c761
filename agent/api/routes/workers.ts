/**
 * /v1/workers: the workers of live jobs on this node (agent/workers/PROTOCOL.md).
 *   POST   /v1/workers              register (validated in full; the initial state is stored as version 0)
 *   GET    /v1/workers              this node's workers and where their state is
 *   GET    /v1/workers/:id/events   the worker's event stream (server-sent events); its closing is the worker's death
 *   POST   /v1/workers/:id/replies  the worker's answer to one event
 *   DELETE /v1/workers/:id          a clean exit (its stored state is kept)
 *
 * A registration stores the worker's state under its job's namespaces for
 * the caller: the caller must be allowed to write them, and claims those
 * nobody owns (authorization.ts NamespaceGuard). The job id counts as a
 * namespace too, so that a job's workers on a node are one uid's (another
 * uid's rank would receive the job's operations). A registered worker's event
 * stream, replies and deregistration belong to the uid that registered it
 * (or an admin): its id is listed by GET /v1/workers, so the id alone proves nothing.
 */
import { setInterval as every } from 'node:timers/promises'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { Type } from '@sinclair/typebox'
import { AgentError } from '../../../core/errors.ts'
import type { WorkersService } from '../../workers/workers-service.ts'
import { errorResponses } from '../wire/errors.ts'
import type { Authorization, NamespaceGuard } from './route-guards.ts'
import { RegisterAnswerSchema, WorkerReplySchema, WorkersListSchema } from '../wire/workers.ts'
import { eventKeepaliveIntervalMs } from './locks.ts'

export interface WorkersSource {
  workers(): WorkersService | { unavailable: string }
}

const IdParams = Type.Object({ id: Type.String({ pattern: '^w-[0-9a-f-]{36}$' }) })

export function registerWorkersRoutes (app: FastifyInstance, source: WorkersSource, authorization: Authorization, guard: NamespaceGuard): void {
  const workers = (): WorkersService => {
    const w = source.workers()
    if ('unavailable' in w) throw new AgentError('ERR_UNAVAILABLE', `live workers are not available: ${w.unavailable}`)
    return w
  }
  /** The uid that registered each worker still registered (workers registered by an unidentified caller have none). */
  const registrants = new Map<string, number>()
  /** ERR_FORBIDDEN unless the caller registered worker `id` (or is an admin); an unknown id is left to the registry (404). */
  const checkRegistrant = (request: FastifyRequest, id: string, action: string): void => {
    const uid = registrants.get(id)
    if (uid === undefined || request.admin || request.caller?.uid === uid) return
    throw authorization.forbidden(request, `${action} worker ${id}`, `it was registered by uid ${uid}; only that uid or an admin (${authorization.admins()}) may`, { worker: id, owner: uid, needed: 'owner' })
  }

  app.post('/v1/workers', {
    schema: {
      summary: 'Register a worker of a live job: job, rank, gpu, the operations it runs and the tensors of its state (key + memory); stores that state as version 0',
      body: Type.Unknown({ description: 'a registration (agent/workers/PROTOCOL.md); validated with per-field messages' }),
      response: { 200: RegisterAnswerSchema, 409: Type.Ref('ErrorBody'), ...errorResponses },
    },
  }, async request => {
    const registry = workers().registry
    const job = (request.body as { job?: unknown } | null)?.job
    const namespaces = [...guard.ofKeys(registrationKeys(request.body)), ...(typeof job === 'string' && job !== '' ? [job] : [])]
    const release = guard.claimForStore(request, namespaces, 'register a worker of its job')
    try {
      const answer = await registry.register(request.body, request.caller?.pid ?? null)
      const live = new Set(registry.list().map(w => w.workerId))
      for (const id of registrants.keys()) if (!live.has(id)) registrants.delete(id)
      if (request.caller !== null) registrants.set(answer.workerId, request.caller.uid)
      return answer
    } finally {
      release()
    }
  })

  app.get('/v1/workers', {
    schema: { summary: 'This node\'s workers: job, rank, whether their state is on the device, its stored versions', response: { 200: WorkersListSchema, ...errorResponses } },
  }, async () => ({ workers: workers().registry.list() }))

  app.get<{ Params: { id: string } }>('/v1/workers/:id/events', {
    schema: {
      summary: 'The worker\'s events (allocate, release, run, stop) as server-sent events; closing the stream is the worker\'s death',
      params: IdParams,
      response: { 200: { description: 'text/event-stream', content: { 'text/event-stream': { schema: Type.Unknown() } } }, ...errorResponses },
    },
  }, async (request, reply) => {
    const registry = workers().registry
    checkRegistrant(request, request.params.id, 'open the event stream of')
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
    const registry = workers().registry
    checkRegistrant(request, request.params.id, 'reply for')
    registry.reply(request.params.id, request.body)
    return { accepted: true as const }
  })

  app.delete<{ Params: { id: string } }>('/v1/workers/:id', {
    schema: { summary: 'Deregister a worker (a clean exit; its stored state is kept)', params: IdParams, response: { 200: Type.Object({ deregistered: Type.Literal(true) }), ...errorResponses } },
  }, async request => {
    const registry = workers().registry
    checkRegistrant(request, request.params.id, 'deregister')
    registry.deregister(request.params.id)
    return { deregistered: true as const }
  })
}

/** The keys a registration body names (tensors[].key), before the registry validates it. */
function registrationKeys (body: unknown): string[] {
  const tensors = (body as { tensors?: unknown } | null)?.tensors
  if (!Array.isArray(tensors)) return []
  return tensors.map(t => (t as { key?: unknown } | null)?.key).filter((k): k is string => typeof k === 'string')
}
