/**
 * Typed client of the local API over the unix socket. `agentctl` and the tests
 * use it; there are no private endpoints. Error bodies from the daemon come
 * back as AgentError with the daemon's code and message (a body over a route's
 * limit: ERR_BODY_TOO_LARGE). No agent to connect to, or no answer within the
 * timeout, gives ERR_AGENT_UNREACHABLE with what to check; a connection the
 * agent closed before answering gives ERR_CONNECTION_LOST (the request may or
 * may not have been carried out).
 */
import type { IncomingMessage } from 'node:http'
import { nodeHttp } from '../../core/node-http.ts'
import { AgentError, isErrorCode, type ErrorBody } from '../../core/errors.ts'
import type { HealthBody, StatusBody } from '../api/wire/status.ts'
import type { NodeInventory } from '../api/wire/node.ts'
import type { MeshInfo, PeersBody } from '../api/wire/mesh.ts'
import type { DecisionLogBody, DecisionPosition, LeaderViewBody } from '../api/wire/leader.ts'
import type { AcquireGpuResult, GpuLockStreamEvent, LocksBody, ReleaseGpuResult } from '../api/wire/locks.ts'
import type { PublishBody, PullBody, PullResult, RegionBody, RetireBody, VersionList, WeightsManifest, WeightsRegion } from '../api/wire/weights.ts'
import type { JobCompleteAnswer, JobSubmitAnswer, JobsView } from '../api/wire/jobs.ts'
import type { JobsTop, OpAnswer, WorkersList } from '../api/wire/workers.ts'
import type { LocalInstance, RegisterInstanceBody, RolloutStatus, RolloutStepAnswer, RolloutStepBody, RolloutStepEvent, TerminateBody } from '../api/wire/rollout.ts'
import type { BatchStartRequest, CancelAnswer, CancelRequest, RewardResultAnswer, RewardStatusBody, RewardSubmitAnswer, SubmitRequest } from '../api/wire/reward.ts'

export type { GpuLockStreamEvent }

export const defaultSocketPath = '/run/agentd/agentd.sock'

export interface AgentClientOptions {
  /** Unix socket of the agent. Default: /run/agentd/agentd.sock. */
  socketPath?: string
  /** Per-request timeout, ms. Default: 30000. */
  timeoutMs?: number
}

export interface RequestOptions {
  signal?: AbortSignal
  /** Socket idle timeout of this request, ms; 0 = none (requests that wait, like a lock acquire). Default: the client's timeoutMs. */
  idleTimeoutMs?: number
}

export interface AcquireGpuOptions {
  /** Explicit holder name shared by several processes. Default: this process ("pid:<pid>"). */
  holder?: string
  /** Give up after this many ms with ERR_LOCK_TIMEOUT; 0 = only if free now. Default: wait until granted. */
  timeoutMs?: number
  /** Aborting a waiting acquire takes it out of the queue. */
  signal?: AbortSignal
}

export interface GpuLockHolderOptions {
  /** Default: this process ("pid:<pid>"). */
  holder?: string
  signal?: AbortSignal
}

export interface AgentClient {
  readonly socketPath: string
  status(options?: RequestOptions): Promise<StatusBody>
  node(options?: RequestOptions): Promise<NodeInventory>
  /** This agent in the mesh (GET /v1/mesh). */
  mesh(options?: RequestOptions): Promise<MeshInfo>
  /** The other agents (GET /v1/mesh/peers). */
  meshPeers(options?: RequestOptions): Promise<PeersBody>
  /** Who leads, epoch, backend, voters, this agent's role (GET /v1/leader). */
  leader(options?: RequestOptions): Promise<LeaderViewBody>
  /** This agent's decision log (GET /v1/leader/decisions). */
  leaderDecisions(options?: RequestOptions): Promise<DecisionLogBody>
  /** Publishes a decision; ERR_NOT_LEADER unless this agent is the acting leader (POST /v1/leader/decisions). */
  decide(kind: string, payload: unknown, options?: RequestOptions): Promise<DecisionPosition>
  health(options?: RequestOptions): Promise<HealthBody>
  openapi(options?: RequestOptions): Promise<Record<string, unknown>>
  /** Waits until the GPU's device lock is granted (FIFO, re-entrant); see AcquireGpuOptions. */
  acquireGpu(gpu: number, options?: AcquireGpuOptions): Promise<AcquireGpuResult>
  /** Releases one level; depth 0 = released. ERR_LOCK_NOT_HELD when the holder does not hold it. */
  releaseGpu(gpu: number, options?: GpuLockHolderOptions): Promise<ReleaseGpuResult>
  /** Every GPU's device lock. */
  locks(options?: RequestOptions): Promise<LocksBody>
  /**
   * The holder's events for one GPU, until the signal aborts, the loop breaks
   * or the agent closes the stream. On a `waiter` event: offload and release.
   */
  gpuLockEvents(gpu: number, options?: GpuLockHolderOptions): AsyncIterable<GpuLockStreamEvent>
  /** Versions on this agent, who pulls from it, the pulls it makes (GET /v1/weights). */
  weights(options?: RequestOptions): Promise<VersionList>
  /** A shared-memory region to write a version into (POST /v1/weights/regions). */
  weightsRegion(body: RegionBody, options?: RequestOptions): Promise<WeightsRegion>
  /** Gives back a handed-out region that will not be published (DELETE /v1/weights/regions/:region). */
  weightsDiscardRegion(region: string, options?: RequestOptions): Promise<{ discarded: true }>
  /** Commits a version; answers when committed (no idle timeout). */
  weightsPublish(body: PublishBody, options?: RequestOptions): Promise<WeightsManifest>
  /** Pulls a version or this rank's slices into the agent; answers when verified (no idle timeout). */
  weightsPull(body: PullBody, options?: RequestOptions): Promise<PullResult>
  weightsRetire(body: RetireBody, options?: RequestOptions): Promise<{ retired: true }>
  /** The job table this agent applied (GET /v1/jobs). */
  jobs(options?: RequestOptions): Promise<JobsView>
  /** Submits a job spec; answers once the leader published it (POST /v1/jobs; may wait out a failover). */
  submitJob(spec: unknown, options?: RequestOptions): Promise<JobSubmitAnswer>
  /** A job reports it finished (POST /v1/jobs/:id/complete). */
  completeJob(id: string, options?: RequestOptions): Promise<JobCompleteAnswer>
  /** Runs an operation on every rank of a live job; answers when all ran it (POST /v1/jobs/:id/ops; no idle timeout). */
  runOp(job: string, body: { name: string, args?: unknown, opId?: string, component?: string, iteration?: number, granularity?: number }, options?: RequestOptions): Promise<OpAnswer>
  /** The leader's operation scheduler (GET /v1/jobs/top). */
  jobsTop(options?: RequestOptions): Promise<JobsTop>
  /** This node's workers of live jobs (GET /v1/workers). */
  workers(options?: RequestOptions): Promise<WorkersList>
  /** Batch-start hint of the reward service (POST /v1/reward/batches). */
  rewardBatchStart(body: BatchStartRequest, options?: RequestOptions): Promise<unknown>
  /** Submits a reward request; answers once the leader holds it (POST /v1/reward/requests). */
  rewardSubmit(body: SubmitRequest, options?: RequestOptions): Promise<RewardSubmitAnswer>
  /** A request's result, long-polling up to waitMs (GET /v1/reward/requests/:id). */
  rewardResult(requestId: string, waitMs?: number, options?: RequestOptions): Promise<RewardResultAnswer>
  /** Cancels a batch, or some of its requests (POST /v1/reward/cancel). */
  rewardCancel(body: CancelRequest, options?: RequestOptions): Promise<CancelAnswer>
  /** The reward service from the leader, plus this agent's workers (GET /v1/reward/status). */
  rewardStatus(options?: RequestOptions): Promise<RewardStatusBody>
  /** Rollout instances here and in the cluster, steps running here (GET /v1/rollout). */
  rollout(options?: RequestOptions): Promise<RolloutStatus>
  /** Registers an engine of this node (POST /v1/rollout/instances). */
  rolloutRegister(body: RegisterInstanceBody, options?: RequestOptions): Promise<LocalInstance>
  /** Deregisters one (DELETE /v1/rollout/instances/:id). */
  rolloutDeregister(id: string, options?: RequestOptions): Promise<LocalInstance>
  /** Termination notice for this node's instances, or some of them (POST /v1/rollout/terminate). */
  rolloutTerminate(body: TerminateBody, options?: RequestOptions): Promise<{ terminating: LocalInstance[] }>
  /** Runs a rollout step and waits for every response (POST /v1/rollout/steps; no idle timeout: a step takes as long as generation does). */
  rolloutStep(body: RolloutStepBody, options?: RequestOptions): Promise<RolloutStepAnswer>
  /** The same, streamed: each response as soon as it is complete, then `done` with the summary (or `error`). */
  rolloutStepEvents(body: RolloutStepBody, options?: RequestOptions): AsyncGenerator<RolloutStepEvent>
  /** Any route: parsed JSON of a 2xx response, AgentError otherwise. */
  call<T>(method: string, path: string, body?: unknown, options?: RequestOptions): Promise<T>
}

export function createAgentClient (options: AgentClientOptions = {}): AgentClient {
  const socketPath = options.socketPath ?? defaultSocketPath
  const timeoutMs = options.timeoutMs ?? 30_000

  function call<T> (method: string, path: string, body?: unknown, requestOptions: RequestOptions = {}): Promise<T> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
    return new Promise<T>((resolve, reject) => {
      const idleTimeoutMs = requestOptions.idleTimeoutMs ?? timeoutMs
      const req = nodeHttp.request({
        socketPath,
        method,
        path,
        timeout: idleTimeoutMs,
        headers: payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': payload.length },
        ...(requestOptions.signal !== undefined ? { signal: requestOptions.signal } : {}),
      }, res => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('error', reject)
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          let parsed: unknown
          try {
            parsed = text === '' ? undefined : JSON.parse(text)
          } catch (cause) {
            reject(new AgentError('ERR_INTERNAL', `agent at ${socketPath} answered ${res.statusCode} with a body that is not JSON`, { cause }))
            return
          }
          if (res.statusCode !== undefined && res.statusCode >= 200 && res.statusCode < 300) resolve(parsed as T)
          else reject(errorFromBody(parsed, res.statusCode ?? 0))
        })
      })
      req.on('timeout', () => req.destroy(new AgentError('ERR_AGENT_UNREACHABLE', `agent at ${socketPath} did not answer within ${idleTimeoutMs} ms`)))
      // An abort by the caller rejects with the signal's AbortError, not as an unreachable agent.
      req.on('error', err => reject(err instanceof AgentError || requestOptions.signal?.aborted === true ? err : connectionError(socketPath, `${method} ${path}`, err as NodeJS.ErrnoException)))
      req.end(payload)
    })
  }

  /** Opens a server-sent events stream (no idle timeout; a POST when `body` is given): the response once the agent answers 200. */
  function openEventStream (path: string, signal: AbortSignal | undefined, body?: unknown): Promise<IncomingMessage> {
    const method = body === undefined ? 'GET' : 'POST'
    return new Promise<IncomingMessage>((resolve, reject) => {
      const headers = { accept: 'text/event-stream', ...(body !== undefined ? { 'content-type': 'application/json' } : {}) }
      const req = nodeHttp.request({ socketPath, method, path, headers, ...(signal !== undefined ? { signal } : {}) }, res => {
        if (res.statusCode === 200) {
          resolve(res)
          return
        }
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('error', reject)
        res.on('end', () => {
          let parsed: unknown
          try {
            parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'))
          } catch {
            parsed = undefined
          }
          reject(errorFromBody(parsed, res.statusCode ?? 0))
        })
      })
      req.on('error', err => reject(err instanceof AgentError || signal?.aborted === true ? err : connectionError(socketPath, `${method} ${path}`, err as NodeJS.ErrnoException)))
      req.end(body !== undefined ? JSON.stringify(body) : undefined)
    })
  }

  /** The events of an open stream, each block parsed by `parse`, until it ends or the signal aborts. */
  async function * eventsOf<E> (res: IncomingMessage, parse: (block: string) => E | undefined, signal: AbortSignal | undefined): AsyncGenerator<E> {
    res.setEncoding('utf8')
    let buffer = ''
    try {
      for await (const chunk of res as AsyncIterable<string>) {
        buffer += chunk
        for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
          const event = parse(buffer.slice(0, end))
          buffer = buffer.slice(end + 2)
          if (event !== undefined) yield event
        }
      }
    } catch (err) {
      if (signal?.aborted !== true) throw err
    } finally {
      res.destroy()
    }
  }

  async function * gpuLockEvents (gpu: number, options: GpuLockHolderOptions = {}): AsyncGenerator<GpuLockStreamEvent> {
    const query = options.holder !== undefined ? `?holder=${encodeURIComponent(options.holder)}` : ''
    let res: IncomingMessage
    try {
      res = await openEventStream(`/v1/locks/gpu/${gpu}/events${query}`, options.signal)
    } catch (err) {
      if (options.signal?.aborted === true) return
      throw err
    }
    yield * eventsOf(res, parseServerSentEvent, options.signal)
  }

  async function * rolloutStepEvents (body: RolloutStepBody, options: RequestOptions = {}): AsyncGenerator<RolloutStepEvent> {
    const res = await openEventStream('/v1/rollout/steps', options.signal, { ...body, stream: true })
    yield * eventsOf(res, block => {
      const { event, data } = rawServerSentEvent(block) ?? {}
      return event === undefined ? undefined : { event, data } as RolloutStepEvent
    }, options.signal)
  }

  const holderBody = (options: { holder?: string }): { holder?: string } => options.holder !== undefined ? { holder: options.holder } : {}

  return {
    socketPath,
    call,
    status: o => call('GET', '/v1/status', undefined, o),
    node: o => call('GET', '/v1/node', undefined, o),
    mesh: o => call('GET', '/v1/mesh', undefined, o),
    meshPeers: o => call('GET', '/v1/mesh/peers', undefined, o),
    leader: o => call('GET', '/v1/leader', undefined, o),
    leaderDecisions: o => call('GET', '/v1/leader/decisions', undefined, o),
    decide: (kind, payload, o) => call('POST', '/v1/leader/decisions', { kind, payload }, o),
    health: o => call('GET', '/healthz', undefined, o),
    openapi: o => call('GET', '/v1/openapi.json', undefined, o),
    acquireGpu: (gpu, o = {}) => call('POST', `/v1/locks/gpu/${gpu}/acquire`,
      { ...holderBody(o), ...(o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {}) },
      // The agent answers when granted, which may take any time: no idle timeout.
      { idleTimeoutMs: 0, ...(o.signal !== undefined ? { signal: o.signal } : {}) }),
    releaseGpu: (gpu, o = {}) => call('POST', `/v1/locks/gpu/${gpu}/release`, holderBody(o), o.signal !== undefined ? { signal: o.signal } : {}),
    locks: o => call('GET', '/v1/locks', undefined, o),
    gpuLockEvents,
    weights: o => call('GET', '/v1/weights', undefined, o),
    weightsRegion: (body, o) => call('POST', '/v1/weights/regions', body, o),
    weightsDiscardRegion: (region, o) => call('DELETE', `/v1/weights/regions/${encodeURIComponent(region)}`, undefined, o),
    weightsPublish: (body, o) => call('POST', '/v1/weights/publish', body, { idleTimeoutMs: 0, ...o }),
    weightsPull: (body, o) => call('POST', '/v1/weights/pull', body, { idleTimeoutMs: 0, ...o }),
    weightsRetire: (body, o) => call('POST', '/v1/weights/retire', body, o),
    jobs: o => call('GET', '/v1/jobs', undefined, o),
    submitJob: (spec, o) => call('POST', '/v1/jobs', spec, o),
    completeJob: (id, o) => call('POST', `/v1/jobs/${encodeURIComponent(id)}/complete`, {}, o),
    runOp: (job, body, o) => call('POST', `/v1/jobs/${encodeURIComponent(job)}/ops`, body, { idleTimeoutMs: 0, ...o }),
    jobsTop: o => call('GET', '/v1/jobs/top', undefined, o),
    workers: o => call('GET', '/v1/workers', undefined, o),
    rewardBatchStart: (body, o) => call('POST', '/v1/reward/batches', body, o),
    rewardSubmit: (body, o) => call('POST', '/v1/reward/requests', body, o),
    rewardResult: (id, waitMs = 0, o = {}) => call('GET', `/v1/reward/requests/${encodeURIComponent(id)}?waitMs=${waitMs}`, undefined, { idleTimeoutMs: waitMs + timeoutMs, ...o }),
    rewardCancel: (body, o) => call('POST', '/v1/reward/cancel', body, o),
    rewardStatus: o => call('GET', '/v1/reward/status', undefined, o),
    rollout: o => call('GET', '/v1/rollout', undefined, o),
    rolloutRegister: (body, o) => call('POST', '/v1/rollout/instances', body, o),
    rolloutDeregister: (id, o) => call('DELETE', `/v1/rollout/instances/${encodeURIComponent(id)}`, undefined, o),
    rolloutTerminate: (body, o) => call('POST', '/v1/rollout/terminate', body, o),
    rolloutStep: (body, o = {}) => call('POST', '/v1/rollout/steps', body, { idleTimeoutMs: 0, ...o }),
    rolloutStepEvents,
  }
}

/** One server-sent event block (its `event:` and `data:` lines); undefined for comments and keep-alives. */
/** One server-sent event block's type and parsed JSON data; undefined for a comment or an event without data. */
function rawServerSentEvent (block: string): { event: string, data: unknown } | undefined {
  let event: string | undefined
  const data: string[] = []
  for (const line of block.split('\n')) {
    if (line.startsWith('event:')) event = line.slice(6).trim()
    else if (line.startsWith('data:')) data.push(line.slice(5).trimStart())
  }
  if (event === undefined || data.length === 0) return undefined
  return { event, data: JSON.parse(data.join('\n')) }
}

function parseServerSentEvent (block: string): GpuLockStreamEvent | undefined {
  const raw = rawServerSentEvent(block)
  return raw === undefined ? undefined : { ...raw.data as Record<string, unknown>, type: raw.event } as GpuLockStreamEvent
}

function errorFromBody (body: unknown, status: number): AgentError {
  const error = (body as Partial<ErrorBody> | undefined)?.error
  if (error !== undefined && isErrorCode(error.code) && typeof error.message === 'string') {
    return new AgentError(error.code, error.message, { details: error.details })
  }
  return new AgentError('ERR_INTERNAL', `agent answered HTTP ${status} without an error body`)
}

/** A failed connect: ERR_AGENT_UNREACHABLE; a connection that failed after it was made: ERR_CONNECTION_LOST. */
function connectionError (socketPath: string, request: string, err: NodeJS.ErrnoException): AgentError {
  if (err.syscall === 'connect') return unreachable(socketPath, err)
  return new AgentError('ERR_CONNECTION_LOST',
    `the agent at ${socketPath} closed the connection before answering ${request} (${err.code ?? err.message}): it stopped, or refused the connection over api.maxConnections; the request may or may not have been carried out`,
    { cause: err })
}

function unreachable (socketPath: string, err: NodeJS.ErrnoException): AgentError {
  const why = err.code === 'ENOENT'
    ? 'no socket there'
    : err.code === 'ECONNREFUSED'
      ? 'a stale socket, no agent listening'
      : err.code === 'EACCES'
        ? 'permission denied (join the socket\'s group, usually agentd)'
        : err.message
  return new AgentError('ERR_AGENT_UNREACHABLE',
    `no agent answers at ${socketPath}: ${why}. Is agentd running? (systemctl status agentd; or pass --socket / AGENTD_SOCKET)`,
    { cause: err })
}
