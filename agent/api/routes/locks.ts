/**
 * The device lock over HTTP: thin adapters over agent/state/device-lock.ts.
 *
 *   POST /v1/locks/gpu/:n/acquire  { holder?, timeoutMs? }  waits until granted
 *   POST /v1/locks/gpu/:n/release  { holder? }
 *   GET  /v1/locks                 every GPU: holder, pids, depth, since, waiters
 *   GET  /v1/locks/gpu/:n/events   server-sent events for one holder
 *
 * The calling process (SO_PEERCRED) is the default holder and is tied to any
 * holder it acquires for, so its exit releases the lock. A waiting acquire
 * whose connection closes leaves the queue; a grant whose response could not
 * be delivered (the connection closed first) is released again, so a holder
 * never holds a lock it was not told about.
 *
 * An explicit holder name belongs to the uid of the process that first
 * acquired under it, while the name holds or waits for any GPU; meanwhile a
 * process of another uid may neither acquire nor release under it
 * (ERR_FORBIDDEN) unless it is an admin (authorization.ts). A default holder
 * ("pid:<pid>") is its own process's: explicit names cannot start with "pid:".
 */
import { setInterval as every } from 'node:timers/promises'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { Type, type TObject } from '@sinclair/typebox'
import { closestName } from '../../../core/schema-walk.ts'
import { AgentError } from '../../../core/errors.ts'
import { errorResponses } from '../wire/errors.ts'
import type { Authorization } from './route-guards.ts'
import type { DeviceLockService } from '../../state/device-lock.ts'
import {
  AcquireGpuBodySchema, AcquireGpuResultSchema, DeviceLockEventSchema, GpuLockStateSchema, HolderNameSchema, LocksBodySchema,
  ReleaseGpuBodySchema, ReleaseGpuResultSchema, type AcquireGpuResult, type DeviceLockEvent, type GpuLockState,
} from '../wire/locks.ts'

export interface DeviceLockSource {
  /** The running device lock, or why this agent has none (e.g. "no GPUs in the inventory"). */
  deviceLock(): DeviceLockService | { unavailable: string }
}

/** How often an idle event stream carries a comment line, so dead peers are noticed, ms. */
export const eventKeepaliveIntervalMs = 15_000

const GpuParamsSchema = Type.Object({ n: Type.Integer({ minimum: 0, description: 'GPU index, as in GET /v1/node' }) })
const lockErrorResponses = { ...errorResponses, 409: Type.Ref('ErrorBody'), 423: Type.Ref('ErrorBody') }

interface GpuParams { n: number }

/**
 * No body means `{}` (so `curl -X POST …/acquire` works), and an unknown field
 * is an error with a hint instead of being dropped: `{ "timeoutMS": 100 }`
 * must not turn into a wait without a timeout.
 */
function lockBody (schema: TObject): (request: FastifyRequest) => Promise<void> {
  const known = Object.keys(schema.properties)
  return async request => {
    request.body ??= {}
    const body = request.body
    if (typeof body !== 'object' || body === null || Array.isArray(body)) return // the schema rejects it
    for (const key of Object.keys(body)) {
      if (known.includes(key)) continue
      const hint = closestName(key, known)
      throw new AgentError('ERR_BAD_REQUEST', `invalid body: unknown field "${key}"${hint !== undefined ? `; did you mean "${hint}"?` : ''} (accepted: ${known.join(', ')})`)
    }
  }
}

export function registerLockRoutes (app: FastifyInstance, source: DeviceLockSource, authorization: Authorization): void {
  const service = (): DeviceLockService => {
    const lock = source.deviceLock()
    if ('unavailable' in lock) throw new AgentError('ERR_UNAVAILABLE', `the device lock is unavailable: ${lock.unavailable}`)
    return lock
  }
  /** The uid that created each explicit holder name still holding or waiting (names that do neither are forgotten). */
  const holderUids = new Map<string, number>()
  /** ERR_FORBIDDEN when `holder` belongs to another uid; records the caller as its creator when it is new. Synchronous, before the lock call. */
  const claimHolder = (request: FastifyRequest, lock: DeviceLockService, holder: string | undefined, action: 'acquire' | 'release'): void => {
    const caller = request.caller
    if (holder === undefined || caller === null) return
    const live = new Set<string>()
    for (const gpu of lock.locks()) {
      if (gpu.holder !== null) live.add(gpu.holder)
      for (const w of gpu.waiters) live.add(w.holder)
    }
    for (const name of holderUids.keys()) if (!live.has(name)) holderUids.delete(name)
    const owner = holderUids.get(holder)
    if (owner !== undefined && owner !== caller.uid && !request.admin) {
      throw authorization.forbidden(request, `${action} the device lock as holder "${holder}"`,
        `that holder was created by uid ${owner} and holds or waits for a GPU; only that uid or an admin (${authorization.admins()}) may use it (pick another holder name)`, { holder, owner, needed: 'owner' })
    }
    if (owner === undefined && action === 'acquire') holderUids.set(holder, caller.uid)
  }

  app.post<{ Params: GpuParams, Body: { holder?: string, timeoutMs?: number } }>('/v1/locks/gpu/:n/acquire', {
    schema: {
      summary: 'Acquire a GPU\'s device lock (RLinf §3.3): FIFO, re-entrant for its holder; answers once granted',
      description: 'Waits until granted. A waiting request whose connection closes leaves the queue. The holder should watch GET /v1/locks/gpu/{n}/events and offload and release when a waiter event arrives. A holder whose processes have all exited releases its locks. Errors: 404 ERR_NOT_FOUND (no such GPU), 423 ERR_LOCK_TIMEOUT, 503 ERR_UNAVAILABLE (no GPUs, agent stopping).',
      params: GpuParamsSchema,
      body: AcquireGpuBodySchema,
      response: { 200: AcquireGpuResultSchema, ...lockErrorResponses },
    },
    preValidation: lockBody(AcquireGpuBodySchema),
  }, async (request, reply) => {
    const lock = service()
    const pid = callerPid(request)
    const { holder, timeoutMs } = request.body
    claimHolder(request, lock, holder, 'acquire')
    const cancel = new AbortController()
    let granted: AcquireGpuResult | undefined
    let givenBack = false
    // Whichever notices the lost connection first gives the grant back, once.
    const giveBack = (): void => {
      if (granted === undefined || givenBack) return
      givenBack = true
      undeliveredGrant(lock, granted, pid, request)
    }
    // 'close' without a finished response: the client went away (or the response could not be sent).
    reply.raw.once('close', () => {
      if (reply.raw.writableFinished) return
      if (granted === undefined) cancel.abort()
      else giveBack()
    })
    granted = await lock.acquire({ gpu: request.params.n, pid, signal: cancel.signal, ...(holder !== undefined ? { holder } : {}), ...(timeoutMs !== undefined ? { timeoutMs } : {}) })
    if (reply.raw.destroyed) giveBack()
    return granted
  })

  app.post<{ Params: GpuParams, Body: { holder?: string } }>('/v1/locks/gpu/:n/release', {
    schema: {
      summary: 'Release one level of a GPU\'s device lock; depth 0 = released and the next waiter granted',
      description: 'Errors: 409 ERR_LOCK_NOT_HELD (the holder does not hold this GPU), 404 ERR_NOT_FOUND.',
      params: GpuParamsSchema,
      body: ReleaseGpuBodySchema,
      response: { 200: ReleaseGpuResultSchema, ...lockErrorResponses },
    },
    preValidation: lockBody(ReleaseGpuBodySchema),
  }, async request => {
    const lock = service()
    const { holder } = request.body
    const pid = callerPid(request)
    claimHolder(request, lock, holder, 'release')
    return lock.release({ gpu: request.params.n, pid, ...(holder !== undefined ? { holder } : {}) })
  })

  app.get('/v1/locks', {
    schema: {
      summary: 'Device locks of every GPU: holder, its processes, depth, since when, waiters in grant order',
      response: { 200: LocksBodySchema, ...errorResponses },
    },
  }, async () => ({ gpus: service().locks() }))

  app.get<{ Params: GpuParams, Querystring: { holder?: string } }>('/v1/locks/gpu/:n/events', {
    schema: {
      summary: 'Server-sent events for one holder of a GPU\'s device lock',
      description: 'text/event-stream. The first event is `state` (the GPU\'s lock, as in GET /v1/locks); then, for the holder named by ?holder= (default: the calling process, "pid:<pid>"): `waiter` (someone queued behind the holder: offload and release; also sent at once when the holder already has waiters), `granted`, `released` (reason released, holder-exited or stopped). Each event\'s data is one JSON object; comment lines keep an idle stream alive.',
      params: GpuParamsSchema,
      querystring: Type.Object({ holder: Type.Optional(HolderNameSchema) }, { additionalProperties: false }),
      response: {
        200: {
          description: 'event stream; each `data:` line is a state or event object',
          content: { 'text/event-stream': { schema: Type.Union([GpuLockStateSchema, DeviceLockEventSchema]) } },
        },
        ...errorResponses,
      },
    },
  }, async (request, reply) => {
    const lock = service()
    const gpu = request.params.n
    const initial = lock.gpuLock(gpu)
    const holder = request.query.holder ?? `pid:${callerPid(request)}`
    streamEvents(reply, lock, gpu, holder, initial)
  })
}

function callerPid (request: FastifyRequest): number {
  if (request.caller === null) {
    throw new AgentError('ERR_UNAVAILABLE', 'the calling process cannot be identified: the device lock needs SO_PEERCRED, i.e. a request over the agent\'s unix socket with the native addon loaded')
  }
  return request.caller.pid
}

/** The grant never reached the client: give that one level back so nobody holds a lock unknowingly. */
function undeliveredGrant (lock: DeviceLockService, granted: AcquireGpuResult, pid: number, request: FastifyRequest): void {
  try {
    lock.release({ gpu: granted.gpu, pid, holder: granted.holder })
    request.log.warn({ gpu: granted.gpu, holder: granted.holder }, 'device lock grant not delivered (connection closed); released again')
  } catch (err) {
    // Already released meanwhile (e.g. the holder exited): nothing to give back.
    if (!(err instanceof AgentError) || err.code !== 'ERR_LOCK_NOT_HELD') throw err
  }
}

function streamEvents (reply: FastifyReply, lock: DeviceLockService, gpu: number, holder: string, initial: GpuLockState): void {
  reply.hijack()
  const raw = reply.raw
  let id = 0
  const send = (type: string, data: unknown): void => {
    raw.write(`id: ${++id}\nevent: ${type}\ndata: ${JSON.stringify(data)}\n\n`)
  }
  raw.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' })
  send('state', initial)
  if (initial.holder === holder && initial.waiters.length > 0) {
    send('waiter', { type: 'waiter', gpu, holder, waiter: initial.waiters[0]!.holder, waiting: initial.waiters.length } satisfies DeviceLockEvent)
  }
  const unsubscribe = lock.subscribe(event => {
    if (event.gpu === gpu && event.holder === holder) send(event.type, event)
  })
  const closed = new AbortController()
  raw.once('close', () => {
    unsubscribe()
    closed.abort()
  })
  void (async () => {
    try {
      for await (const _ of every(eventKeepaliveIntervalMs, undefined, { signal: closed.signal })) raw.write(': keepalive\n\n')
    } catch {
      // aborted: the stream closed
    }
  })()
}
