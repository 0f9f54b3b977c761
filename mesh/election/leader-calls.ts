/**
 * Calls to the acting leader from any agent, `/agentd/leader-call/1.0.0`
 * (json-protocol.ts): `{ method, body }` → `{ ok: true, result }` or
 * `{ ok: false, code, message, leaderId }`. The cluster policies that run on
 * the leader (jobs, the reward proxy) register their methods here, and an
 * agent's local API forwards what a trainer or `agentctl` submits to it.
 *
 * Contract:
 * - A method is answered only while this agent acts as leader; otherwise the
 *   answer is ERR_NOT_LEADER with the leader this agent knows of, and the
 *   caller tries again there (or the same peer once it acts).
 * - `call` retries across leader changes and transport failures until its
 *   timeout, then fails with ERR_LEADER_UNAVAILABLE. Between rounds it waits
 *   retryDelayMs, doubling per round up to maxRetryDelayMs (with jitter), and
 *   is woken early when this agent's view of the leadership changes: while no
 *   leader acts, every pending call of every agent polling at a fixed 100 ms
 *   was the load that kept a starved cluster from electing one (each round
 *   is a stream to another agent). A handler's AgentError
 *   reaches the caller with its code and message, and is not retried, except
 *   ERR_NOT_COMMITTED (the leader lost its majority before the decision the
 *   call made was committed): that is retried like ERR_NOT_LEADER, and is the
 *   error when the timeout passes after one. A
 *   request may therefore run more than once (a leader that acted on it and
 *   died before answering): handlers must be idempotent (request ids).
 * - Calls in flight per connection are not capped by libp2p's default of 32
 *   inbound / 64 outbound streams per protocol: long-polls (a worker's fetch,
 *   a collector's await) each hold a stream, and an agent runs many workers.
 * - The caller is the connection's remote peer (noise inside the cluster's
 *   private network); handlers validate their bodies.
 */
import type { Logger } from 'pino'
import { AgentError, isErrorCode } from '../../core/errors.ts'
import type { MeshLibp2p } from '../membership/libp2p-node.ts'
import { handleJson, requestJson } from '../membership/json-protocol.ts'

export const leaderCallProtocol = '/agentd/leader-call/1.0.0'
const maxMessageBytes = 4 * 1024 * 1024
const handlerTimeoutMs = 30_000
/** First wait between rounds of a call, ms; doubles per round up to maxRetryDelayMs. */
const retryDelayMs = 100
const maxRetryDelayMs = 1000
/** Streams of this protocol one connection may hold at once, each way. */
const maxStreamsPerConnection = 4096

export interface LeaderCaller {
  /** Peer id of the agent that made the call (this agent's own id for a local call). */
  peerId: string
}

export type LeaderCallHandler = (body: unknown, caller: LeaderCaller) => Promise<unknown>

export interface LeaderCallOptions {
  /** Give up after this long, ms. Default: the service's defaultTimeoutMs. */
  timeoutMs?: number
  signal?: AbortSignal
}

export interface LeaderCalls {
  /**
   * Answers `method` with `handler` while this agent acts as leader; returns
   * the unregistration. With `signal`, it is also unregistered when the
   * signal aborts, and nothing is registered if it already has (a leader task
   * whose start-up outlived its epoch's acting must not keep the method: the
   * next acting could not register it, and would fail to start for ever).
   */
  handle(method: string, handler: LeaderCallHandler, signal?: AbortSignal): () => void
  /** Runs `method` on the acting leader (here when this agent acts) and returns its result. */
  call(method: string, body: unknown, options?: LeaderCallOptions): Promise<unknown>
  /**
   * Runs `method` on exactly `peer` (the answerer is the connection's
   * authenticated remote), once, without following hints: ERR_NOT_LEADER if
   * it does not act, ERR_LEADER_UNAVAILABLE if it cannot be reached.
   */
  callPeer(peer: string, method: string, body: unknown, signal: AbortSignal): Promise<unknown>
  start(): Promise<void>
  stop(): Promise<void>
}

export interface LeaderCallsComponents {
  node: MeshLibp2p
  self: string
  /**
   * Who leads as this agent knows it, whether this agent acts as leader now,
   * and whether its leader tasks have started (they register their methods;
   * until then a call is answered "not ready" and retried, not ERR_NOT_FOUND).
   */
  leadership(): { leaderId: string | null, acting: boolean, tasksStarted: boolean }
  /** Calls `listener` whenever leadership() may have changed; returns the unsubscription. Optional: without it calls only back off. */
  onLeadershipChange?(listener: () => void): () => void
  logger: Logger
  defaultTimeoutMs: number
}

type Answer = { ok: true, result: unknown } | { ok: false, code: string, message: string, leaderId: string | null }

const methodPattern = /^[a-z][a-z0-9.-]{0,63}$/

export function createLeaderCalls (c: LeaderCallsComponents): LeaderCalls {
  const handlers = new Map<string, LeaderCallHandler>()
  const protocol = { protocol: leaderCallProtocol, maxMessageBytes }

  /** What this agent answers a call with (local or remote). */
  const answer = async (method: unknown, body: unknown, caller: LeaderCaller): Promise<Answer> => {
    const { leaderId, acting, tasksStarted } = c.leadership()
    if (!acting) return { ok: false, code: 'ERR_NOT_LEADER', message: `${c.self} does not act as leader`, leaderId }
    if (!tasksStarted) return { ok: false, code: 'ERR_NOT_LEADER', message: `${c.self} acts as leader but its leader tasks are still starting`, leaderId: c.self }
    const handler = typeof method === 'string' ? handlers.get(method) : undefined
    if (handler === undefined) return { ok: false, code: 'ERR_NOT_FOUND', message: `the leader has no method ${JSON.stringify(method)}`, leaderId }
    try {
      return { ok: true, result: await handler(body, caller) }
    } catch (err) {
      if (err instanceof AgentError) return { ok: false, code: err.code, message: err.message, leaderId }
      c.logger.error({ err, method }, 'leader call failed')
      return { ok: false, code: 'ERR_INTERNAL', message: `leader call ${String(method)} failed: ${(err as Error).message}`, leaderId }
    }
  }

  /** Waits `delayMs` (capped, ±25% jitter so callers spread out) or until the leadership view changes or `signal` aborts. */
  const waitForRetry = (delayMs: number, signal: AbortSignal): Promise<void> => new Promise(resolve => {
    const ms = Math.min(delayMs, maxRetryDelayMs) * (0.75 + Math.random() / 2)
    const done = (): void => { clearTimeout(timer); unsubscribe?.(); signal.removeEventListener('abort', done); resolve() }
    const timer = setTimeout(done, ms)
    const unsubscribe = c.onLeadershipChange?.(done)
    signal.addEventListener('abort', done, { once: true })
  })

  const parseAnswer = (v: unknown): Answer => {
    const a = v as Record<string, unknown>
    if (typeof a !== 'object' || a === null) throw new Error('malformed leader-call answer')
    if (a.ok === true) return { ok: true, result: a.result }
    if (a.ok === false && typeof a.code === 'string' && typeof a.message === 'string') {
      return { ok: false, code: a.code, message: a.message, leaderId: typeof a.leaderId === 'string' ? a.leaderId : null }
    }
    throw new Error('malformed leader-call answer')
  }

  /** One attempt at `target`: answered here when it is this agent, else over the mesh (rejects on transport failure). */
  const ask = (target: string, method: string, body: unknown, signal: AbortSignal): Promise<Answer> => target === c.self
    ? answer(method, body, { peerId: c.self })
    : requestJson(c.node, target, protocol, { method, body }, signal).then(parseAnswer)

  /** A refusal as the caller sees it: the handler's code when it is one of ours. */
  const refusal = (a: Extract<Answer, { ok: false }>): AgentError =>
    new AgentError(isErrorCode(a.code) ? a.code : 'ERR_INTERNAL', a.message)

  return {
    handle (method, handler, signal) {
      if (!methodPattern.test(method)) throw new AgentError('ERR_ARG_INVALID', `leader-call method ${JSON.stringify(method)} must match ${methodPattern}`)
      if (signal?.aborted === true) return () => {}
      if (handlers.has(method)) throw new AgentError('ERR_ARG_INVALID', `leader-call method ${method} is already handled`)
      handlers.set(method, handler)
      const unregister = (): void => { if (handlers.get(method) === handler) handlers.delete(method) }
      signal?.addEventListener('abort', unregister, { once: true })
      return unregister
    },

    async call (method, body, options = {}) {
      const timeoutMs = options.timeoutMs ?? c.defaultTimeoutMs
      const deadline = performance.now() + timeoutMs
      const signal = options.signal !== undefined ? AbortSignal.any([options.signal, AbortSignal.timeout(timeoutMs)]) : AbortSignal.timeout(timeoutMs)
      let last = 'no leader known yet'
      let hint: string | null = null
      let notCommitted: AgentError | undefined
      let round = 0
      while (performance.now() < deadline && !signal.aborted) {
        const { leaderId, acting } = c.leadership()
        const followingHint = hint !== null
        const target: string | null = acting ? c.self : (hint ?? leaderId)
        hint = null
        const a: Answer | undefined = target === null
          ? undefined
          : await ask(target, method, body, signal).catch((err: Error) => { last = `${target}: ${err.message}`; return undefined })
        if (a?.ok === true) return a.result
        if (a !== undefined && a.code !== 'ERR_NOT_LEADER' && a.code !== 'ERR_NOT_COMMITTED') throw refusal(a)
        if (a?.code === 'ERR_NOT_COMMITTED') {
          // The leader lost its majority mid-decision; the next leader answers the (idempotent) call.
          notCommitted = refusal(a)
          last = `${target} answered: ${a.message}`
        } else if (a !== undefined) {
          last = `${target} answered: ${a.message} (its leader: ${a.leaderId ?? 'unknown'})`
          // Follow the answering agent's idea of the leader at once, but only one hop per round.
          if (!followingHint && a.leaderId !== null && a.leaderId !== target) { hint = a.leaderId; continue }
        }
        await waitForRetry(retryDelayMs * 2 ** Math.min(round++, 10), signal)
      }
      if (options.signal?.aborted === true) throw new AgentError('ERR_LEADER_UNAVAILABLE', `leader call ${method} cancelled (${last})`)
      if (notCommitted !== undefined) throw new AgentError('ERR_NOT_COMMITTED', `no leader committed ${method} within ${timeoutMs} ms (last: ${last})`, { cause: notCommitted })
      throw new AgentError('ERR_LEADER_UNAVAILABLE', `no acting leader answered ${method} within ${timeoutMs} ms (last: ${last})`)
    },

    async callPeer (peer, method, body, signal) {
      const a = await ask(peer, method, body, signal).catch((err: Error) => {
        throw new AgentError('ERR_LEADER_UNAVAILABLE', `leader call ${method} to ${peer} failed: ${err.message}`, { cause: err })
      })
      if (a.ok) return a.result
      throw refusal(a)
    },

    async start () {
      await handleJson(c.node, { ...protocol, handlerTimeoutMs, maxStreamsPerConnection }, async (from, message) => {
        const m = message as Record<string, unknown>
        if (typeof m !== 'object' || m === null || typeof m.method !== 'string') {
          return { ok: false, code: 'ERR_BAD_REQUEST', message: 'a leader call is { method, body }', leaderId: c.leadership().leaderId }
        }
        return answer(m.method, m.body, { peerId: from })
      })
    },

    async stop () {
      await c.node.unhandle(leaderCallProtocol).catch(() => {})
    },
  }
}
