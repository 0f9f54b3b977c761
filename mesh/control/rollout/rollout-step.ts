/**
 * One rollout step over live engine instances (RLBoost §4.2): the step's
 * generation requests are dispatched with delayed dispatch, collected token
 * by token, moved when an instance is lost or the load is uneven, and
 * answered complete.
 *
 * Contract:
 * - Dispatch: a waiting request goes to selectInstance's choice (fewest
 *   pending, under Θ = maxPending); when every instance has Θ pending it
 *   waits for a first token or a completion. Requests that were moved go
 *   first.
 * - Collection: every token is kept as it arrives. A request continues on
 *   another instance from its prompt + the text so far with the remaining
 *   max_tokens (one extra prefill, no token lost or repeated: `resume:
 *   'tokens'`), or, for comparison, from its prompt alone (`'recompute'`:
 *   what a manager without token-level collection does).
 * - Instance loss: a stream that breaks, stalls (stallMs) or carries
 *   garbage (firstTokenMs, stallMs) takes its instance out of rotation for the rest of the step
 *   (`removed`, with the reason); all its requests continue elsewhere, from
 *   their tokens, except that what an instance streamed before it sent
 *   garbage is not trusted: those requests go on from where they were when
 *   they were sent to it. preempt(id) does the same on a termination notice,
 *   before the node dies.
 * - Baselines (`balancer`): 'jsq' and 'round-robin' send every request at
 *   once and never rebalance.
 * - Balance: every rebalanceIntervalMs one CONTINUOUSLB move
 *   (load-balancer.ts) is applied: pending requests move one at a time,
 *   executing ones (the most recently started, cheapest to prefill again)
 *   beyond the batching plateau of the previous step's profile. A request
 *   balancing moved is not moved by balancing again before it produced a
 *   token where it went (a lone queued request would otherwise swap queues
 *   every round while it waits for its first token).
 * - The step measures its instances' throughput by batch size (`profile`,
 *   tokens/s at each executing count seen at the balance ticks) for the next
 *   step's plateau.
 * - Failure: with no instance in rotation for noInstanceTimeoutMs (add()
 *   can bring new ones), or a request moved more than maxMoves times, the
 *   step rejects with ERR_UNAVAILABLE; streams still open are closed.
 */
import { AgentError } from '../../../core/errors.ts'
import { batchingPlateau, rebalance, selectInstance, selectRoundRobin, selectShortestQueue, type BatchingProfile, type InstanceLoad } from '../../policies/rollout-balancing/load-balancer.ts'
import { streamCompletion, StreamFailure, type CompletionRequest } from './completion-stream.ts'

export interface RolloutInstance { id: string, url: string }

export interface RolloutRequest extends CompletionRequest { id: string }

export interface RolloutStepOptions {
  model?: string
  /** 'rlboost' (Algorithm 2); the baselines dispatch at once and never rebalance. */
  balancer: 'rlboost' | 'jsq' | 'round-robin'
  /** Θ: requests sent to an instance and not yet producing tokens, at most. */
  maxPending: number
  /** How long a request may wait for its first token (queued in the engine, then prefilled). */
  firstTokenMs: number
  /** How long a generating request may wait for its next token. */
  stallMs: number
  /** 0 turns continuous balancing off. */
  rebalanceIntervalMs: number
  resume: 'tokens' | 'recompute'
  /** The previous step's measured profile (none on the first step: only pending requests move). */
  profile?: BatchingProfile
  noInstanceTimeoutMs: number
  maxMoves: number
  /** Called when an instance leaves the rotation, with the reason (the caller logs it). */
  onRemoved?(instance: string, reason: string, requestsMoved: number): void
  /**
   * Called with each response as soon as it is complete (a trainer trains on microbatches as they
   * fill, RLBoost §4.1); those finished in an earlier run (resumeFrom) first, on the next tick.
   */
  onComplete?(response: RolloutResponse): void
  /**
   * Where each request stood when an earlier run of this step stopped (its agent died): a request
   * goes on from its text (one extra prefill, as after a preemption); a finished one is not sent again.
   */
  resumeFrom?: Readonly<Record<string, RequestProgress>>
}

/** How far one request got: its text and token count so far, and its finish reason once complete. */
export interface RequestProgress { text: string, tokens: number, finish?: string, route?: string[] }

export const defaultRolloutStepOptions: RolloutStepOptions = {
  balancer: 'rlboost', maxPending: 4, firstTokenMs: 600_000, stallMs: 30_000, rebalanceIntervalMs: 200, resume: 'tokens', noInstanceTimeoutMs: 30_000, maxMoves: 32,
}

export interface RolloutResponse {
  id: string
  text: string
  tokens: number
  finish: string
  /** The instances that produced it, in order (more than one when it moved). */
  route: string[]
  /** When it was complete, ms from the step's start. */
  finishMs: number
}

export interface RolloutStepResult {
  responses: RolloutResponse[]
  stepMs: number
  /** Requests moved: from a lost instance, and by balancing (pending, executing). */
  moves: { lost: number, pending: number, executing: number }
  removed: Array<{ instance: string, reason: string }>
  /** Tokens the engines generated, counting those a recompute threw away. */
  generatedTokens: number
  profile: BatchingProfile
}

export interface RolloutStep {
  done: Promise<RolloutStepResult>
  /** A termination notice: the instance's requests move now. */
  preempt(instance: string, reason?: string): void
  /** The instances in rotation now. */
  inRotation(): string[]
  /** A new instance joins the rotation (e.g. after its weights arrived). */
  add(instance: RolloutInstance): void
  /** Where every request stands now (what a journal keeps, for resumeFrom). */
  progress(): Record<string, RequestProgress>
  /** Gives up: open streams close, `done` rejects with `error`. No-op once the step has ended. */
  abort(error: AgentError): void
}

interface Tracked {
  spec: RolloutRequest
  text: string
  tokens: number
  route: string[]
  moves: number
  at?: Live
  phase: 'waiting' | 'pending' | 'executing' | 'done'
  finish: string
  finishMs: number
  /** The attempt in flight; a callback of an older attempt is ignored. */
  attempt?: AbortController
  /** Text and tokens when the attempt was sent: what it goes back to if its instance turns out untrustworthy. */
  sent: { text: string, tokens: number }
  /** Moved by balancing and no token since: not moved by balancing again until one comes (no back and forth). */
  balanced: boolean
  startedAt: number
}

interface Live {
  instance: RolloutInstance
  pending: Set<Tracked>
  executing: Set<Tracked>
  tokensSinceTick: number
}

export function startRolloutStep (requests: readonly RolloutRequest[], instances: readonly RolloutInstance[], options: Partial<RolloutStepOptions> = {}): RolloutStep {
  const o = { ...defaultRolloutStepOptions, ...options }
  const began = performance.now()
  const ids = new Set<string>()
  for (const r of requests) {
    if (ids.has(r.id)) throw new AgentError('ERR_BAD_REQUEST', `request id ${JSON.stringify(r.id)} appears twice`)
    ids.add(r.id)
    if (!Number.isInteger(r.maxTokens) || r.maxTokens < 1) throw new AgentError('ERR_BAD_REQUEST', `request ${r.id}: maxTokens must be an integer >= 1`)
  }
  const live = new Map<string, Live>()
  const tracked: Tracked[] = requests.map(spec => {
    const p = o.resumeFrom?.[spec.id]
    const resumed = p !== undefined && Number.isInteger(p.tokens) && p.tokens >= 0 && p.tokens <= spec.maxTokens ? p : undefined
    return {
      spec, text: resumed?.text ?? '', tokens: resumed?.tokens ?? 0, route: [...resumed?.route ?? []], moves: 0,
      phase: resumed?.finish !== undefined ? 'done' : 'waiting', finish: resumed?.finish ?? '', finishMs: 0, startedAt: 0, sent: { text: '', tokens: 0 }, balanced: false,
    }
  })
  const waiting: Tracked[] = tracked.filter(t => t.phase === 'waiting')
  const moves = { lost: 0, pending: 0, executing: 0 }
  const removed: RolloutStepResult['removed'] = []
  const samples = new Map<number, { tokensPerS: number, n: number }>()
  const plateau = batchingPlateau(o.profile ?? [])
  let generatedTokens = 0
  let remaining = waiting.length
  let finished = false
  let noInstanceTimer: NodeJS.Timeout | undefined
  let lastTick = performance.now()
  let turn = 0
  const result = Promise.withResolvers<RolloutStepResult>()

  const end = (error?: AgentError): void => {
    if (finished) return
    finished = true
    clearInterval(ticker)
    clearTimeout(noInstanceTimer)
    for (const t of tracked) t.attempt?.abort()
    if (error !== undefined) { result.reject(error); return }
    result.resolve({
      responses: tracked.map(responseOf),
      stepMs: performance.now() - began,
      moves,
      removed,
      generatedTokens,
      profile: [...samples].map(([batch, s]) => ({ batch, tokensPerS: s.tokensPerS / s.n })).sort((a, b) => a.batch - b.batch),
    })
  }

  const responseOf = (t: Tracked): RolloutResponse => ({ id: t.spec.id, text: t.text, tokens: t.tokens, finish: t.finish, route: t.route, finishMs: t.finishMs })

  const complete = (t: Tracked, finish: string): void => {
    detach(t)
    t.phase = 'done'
    t.finish = finish
    t.finishMs = performance.now() - began
    o.onComplete?.(responseOf(t))
    if (--remaining === 0) end()
  }

  /** Takes `t` off its instance and closes its stream. */
  const detach = (t: Tracked): void => {
    t.at?.pending.delete(t)
    t.at?.executing.delete(t)
    t.at = undefined
    const attempt = t.attempt
    t.attempt = undefined
    attempt?.abort()
  }

  /** Off its instance to go on elsewhere, from its tokens (or from scratch, recomputing); false when it moved too often (the step has failed). */
  const move = (t: Tracked): boolean => {
    detach(t)
    if (++t.moves > o.maxMoves) { end(new AgentError('ERR_UNAVAILABLE', `request ${t.spec.id} moved ${t.moves} times without finishing`)); return false }
    if (o.resume === 'recompute') { t.text = ''; t.tokens = 0 }
    return true
  }

  /** Back into the queue, first in line. */
  const requeue = (t: Tracked): void => {
    if (!move(t)) return
    t.phase = 'waiting'
    t.balanced = false
    waiting.unshift(t)
  }

  const dispatch = (t: Tracked, to: Live): void => {
    if (t.tokens >= t.spec.maxTokens) { complete(t, 'length'); return } // lost after its last token, before the finish event
    const attempt = new AbortController()
    Object.assign(t, { at: to, attempt, phase: 'pending', startedAt: performance.now(), sent: { text: t.text, tokens: t.tokens } })
    to.pending.add(t)
    if (t.route.at(-1) !== to.instance.id) t.route.push(to.instance.id)
    const request: CompletionRequest = { prompt: t.spec.prompt + t.text, maxTokens: t.spec.maxTokens - t.tokens, ...(t.spec.sampling !== undefined ? { sampling: t.spec.sampling } : {}) }
    streamCompletion(to.instance.url, request, {
      ...(o.model !== undefined ? { model: o.model } : {}),
      signal: attempt.signal,
      firstTokenMs: o.firstTokenMs,
      stallMs: o.stallMs,
      onToken: text => {
        if (t.attempt !== attempt) return
        if (t.phase === 'pending') { to.pending.delete(t); to.executing.add(t); t.phase = 'executing'; t.balanced = false; pump() }
        t.text += text
        t.tokens++
        generatedTokens++
        to.tokensSinceTick++
      },
    }).then(finish => {
      if (t.attempt !== attempt) return
      complete(t, finish)
      pump()
    }, (err: unknown) => {
      if (t.attempt !== attempt || finished) return
      const why = err instanceof StreamFailure ? `${err.kind}: ${err.message}` : String(err)
      lose(to.instance.id, why, err instanceof StreamFailure && err.kind === 'garbage')
    })
  }

  /** Takes an instance out of rotation; its requests go on elsewhere (from where they were sent to it, when it is `distrusted`). */
  const lose = (id: string, reason: string, distrusted = false): void => {
    const l = live.get(id)
    if (l === undefined || finished) return
    live.delete(id)
    removed.push({ instance: id, reason })
    o.onRemoved?.(id, reason, l.pending.size + l.executing.size)
    for (const t of [...l.pending, ...l.executing]) {
      if (distrusted) { t.text = t.sent.text; t.tokens = t.sent.tokens }
      requeue(t)
      moves.lost++
    }
    pump()
  }

  const loads = (): InstanceLoad[] => [...live.values()].map(l => ({ id: l.instance.id, pending: l.pending.size, executing: l.executing.size }))

  /** Sends waiting requests while an instance has room under Θ. */
  function pump (): void {
    if (finished) return
    if (live.size === 0) {
      noInstanceTimer ??= setTimeout(() => end(new AgentError('ERR_UNAVAILABLE', `no rollout instance in rotation for ${o.noInstanceTimeoutMs} ms (${remaining} requests unfinished; removed: ${removed.map(r => `${r.instance} (${r.reason})`).join('; ') || 'none'})`)), o.noInstanceTimeoutMs)
      return
    }
    clearTimeout(noInstanceTimer)
    noInstanceTimer = undefined
    while (waiting.length > 0) {
      const choice = o.balancer === 'rlboost' ? selectInstance(loads(), o.maxPending)
        : o.balancer === 'jsq' ? selectShortestQueue(loads()) : selectRoundRobin(loads(), turn++)
      if (choice === null) return
      dispatch(waiting.shift()!, live.get(choice)!)
    }
  }

  /** One CONTINUOUSLB round, and the throughput samples of the profile. */
  const tick = (): void => {
    const now = performance.now()
    const seconds = (now - lastTick) / 1000
    lastTick = now
    for (const l of live.values()) {
      const batch = l.executing.size
      if (batch > 0 && seconds > 0) {
        const s = samples.get(batch) ?? { tokensPerS: 0, n: 0 }
        samples.set(batch, { tokensPerS: s.tokensPerS + l.tokensSinceTick / seconds, n: s.n + 1 })
      }
      l.tokensSinceTick = 0
    }
    if (waiting.length > 0 || o.balancer !== 'rlboost') return // dispatch is still filling the instances; the baselines never move work
    const migration = rebalance(loads(), plateau)
    if (migration === null) return
    const from = live.get(migration.from)!
    const to = live.get(migration.to)!
    const candidates = [...(migration.kind === 'pending' ? from.pending : from.executing)].filter(t => !t.balanced).sort((a, b) => b.startedAt - a.startedAt).slice(0, migration.count)
    for (const t of candidates) {
      if (!move(t)) return
      dispatch(t, to)
      t.balanced = true
      moves[migration.kind]++
    }
  }
  const ticker = setInterval(tick, o.rebalanceIntervalMs > 0 ? o.rebalanceIntervalMs : 2 ** 31 - 1)

  for (const instance of instances) live.set(instance.id, { instance, pending: new Set(), executing: new Set(), tokensSinceTick: 0 })
  if (o.onComplete !== undefined) {
    const earlier = tracked.filter(t => t.phase === 'done')
    if (earlier.length > 0) queueMicrotask(() => { for (const t of earlier) o.onComplete?.(responseOf(t)) })
  }
  if (remaining === 0) queueMicrotask(() => end()) // after the earlier responses were handed out
  else pump()

  return {
    done: result.promise,
    preempt: (id, reason = 'termination notice') => lose(id, reason),
    inRotation: () => [...live.keys()],
    add: instance => {
      if (finished || live.has(instance.id)) return
      live.set(instance.id, { instance, pending: new Set(), executing: new Set(), tokensSinceTick: 0 })
      pump()
    },
    abort: error => end(error),
    progress: () => Object.fromEntries(tracked.map(t => [t.spec.id, { text: t.text, tokens: t.tokens, route: t.route, ...(t.phase === 'done' ? { finish: t.finish } : {}) }])),
  }
}
