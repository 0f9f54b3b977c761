/**
 * A rollout step in simulated time (RLBoost §4.2), driving the same policy
 * code as the live step runner (mesh/control/rollout/rollout-step.ts):
 * selectInstance, rebalance and the baselines of
 * mesh/policies/rollout-balancing/load-balancer.ts. It predicts what the
 * live step measures (test/bench/rollout-preemption.bench.ts runs both).
 *
 * Engines are modelled as the engine double behaves (test/helpers/
 * engine-double.ts), which is how a continuous-batching engine behaves:
 * - a loop of decode steps (an idle engine wakes when requests arrive, and
 *   those sent at the same instant start together); a step takes decodeStepMs + decodeMsPerSeq ×
 *   running sequences + prefillMsPerToken × the prompt tokens admitted at
 *   its start, and gives every running sequence one token (the first token
 *   of a newly admitted one comes out of the step that prefilled it);
 * - admission first come, first served while the running sequences'
 *   prompt + max_tokens stays within kvCapacityTokens (one larger request
 *   runs alone) and fewer than maxRunning run;
 * - a preempted instance stops at once: its streams break mid-step.
 * The manager's side as the live runner: a request is pending until its
 * first token, Θ bounds pending per instance, a lost or moved request goes
 * on from prompt + its tokens (or restarts: `resume: 'recompute'`), one
 * CONTINUOUSLB move per rebalance tick while nothing waits. Responses have
 * the lengths the trace gives (the live double's lengths come from its
 * hash; the trace generator draws them). Network and HTTP costs are not
 * modelled.
 */
import { rebalance, selectInstance, selectRoundRobin, selectShortestQueue, type InstanceLoad } from '../policies/rollout-balancing/load-balancer.ts'
import { createEventQueue, type SimEvent } from '../../core/event-queue.ts'

export interface SimEngine {
  id: string
  decodeStepMs: number
  decodeMsPerSeq: number
  prefillMsPerToken: number
  kvCapacityTokens: number
  maxRunning: number
  /** When it is preempted (killed), seconds from the step's start; never when absent. */
  preemptAtS?: number
  /** When it joins the rotation, seconds; from the start when absent. */
  joinAtS?: number
}

export interface SimRolloutRequest { id: string, promptTokens: number, maxTokens: number, responseTokens: number }

export interface RolloutSimOptions {
  balancer: 'rlboost' | 'jsq' | 'round-robin'
  resume: 'tokens' | 'recompute'
  maxPending: number
  rebalanceIntervalMs: number
  /** Batch size where throughput plateaus (from a previous step); null: only pending requests move. */
  plateau: number | null
}

export interface RolloutSimResult {
  stepS: number
  moves: { lost: number, pending: number, executing: number }
  generatedTokens: number
  keptTokens: number
  /** Per request: when its last token came, seconds. */
  finishS: Record<string, number>
  /** Per request: the engine that finished it. */
  finishedOn: Record<string, string>
}

interface Req {
  spec: SimRolloutRequest
  kept: number
  at: Inst | undefined
  phase: 'waiting' | 'pending' | 'executing' | 'done'
  seq: Seq | undefined
  dispatchedS: number
  /** Moved by balancing and no token since (as the live runner: not moved by balancing again until one comes). */
  balanced: boolean
}
interface Seq { req: Req, promptTokens: number, maxTokens: number, remaining: number, gone: boolean }
interface Inst {
  e: SimEngine
  alive: boolean
  queued: Seq[]
  running: Seq[]
  step: SimEvent | undefined
  /** Inside its step's completion: dispatches to it wait for the next step's start. */
  stepping: boolean
  /** A start is scheduled at this instant (requests sent together are batched together). */
  waking: boolean
  pending: Set<Req>
  executing: Set<Req>
}

export function simulateRolloutStep (engines: readonly SimEngine[], requests: readonly SimRolloutRequest[], o: RolloutSimOptions): RolloutSimResult {
  const q = createEventQueue()
  const insts = new Map<string, Inst>()
  const reqs: Req[] = requests.map(spec => ({ spec, kept: 0, at: undefined, phase: 'waiting', seq: undefined, dispatchedS: 0, balanced: false }))
  const waiting: Req[] = [...reqs]
  const moves = { lost: 0, pending: 0, executing: 0 }
  const finishS: Record<string, number> = {}
  const finishedOn: Record<string, string> = {}
  let generatedTokens = 0
  let remaining = reqs.length
  let turn = 0

  const inRotation = (): Inst[] => [...insts.values()].filter(i => i.alive)
  const loads = (): InstanceLoad[] => inRotation().map(i => ({ id: i.e.id, pending: i.pending.size, executing: i.executing.size }))

  /** The engine's step loop: schedules the next step if there is work and none is under way. */
  const kick = (i: Inst): void => {
    if (!i.alive || i.step !== undefined || i.stepping) return
    i.running = i.running.filter(s => !s.gone)
    let used = i.running.reduce((n, s) => n + s.promptTokens + s.maxTokens, 0)
    let prefill = 0
    while (i.queued.length > 0 && i.running.length < i.e.maxRunning) {
      const next = i.queued[0]!
      if (next.gone) { i.queued.shift(); continue }
      if (used + next.promptTokens + next.maxTokens > i.e.kvCapacityTokens && i.running.length > 0) break
      i.queued.shift()
      i.running.push(next)
      used += next.promptTokens + next.maxTokens
      prefill += next.promptTokens
    }
    if (i.running.length === 0) return
    const ms = i.e.decodeStepMs + i.e.decodeMsPerSeq * i.running.length + i.e.prefillMsPerToken * prefill
    i.step = q.after(ms / 1000, () => {
      i.step = undefined
      i.stepping = true
      for (const s of i.running) {
        if (s.gone) continue
        if (s.remaining > 0) { s.remaining--; generatedTokens++; token(s.req, i) }
        if (s.remaining === 0) { s.gone = true; finish(s.req, i) } // a response may also end at once (end of sequence first)
      }
      i.stepping = false
      kick(i)
    })
  }

  const token = (r: Req, i: Inst): void => {
    if (r.phase === 'pending') { i.pending.delete(r); i.executing.add(r); r.phase = 'executing'; r.balanced = false; pump() }
    r.kept++
  }

  const finish = (r: Req, i: Inst): void => {
    i.pending.delete(r)
    i.executing.delete(r)
    r.phase = 'done'
    r.at = undefined
    r.seq = undefined
    finishS[r.spec.id] = q.nowS
    finishedOn[r.spec.id] = i.e.id
    remaining--
    pump()
  }

  const detach = (r: Req): void => {
    r.at?.pending.delete(r)
    r.at?.executing.delete(r)
    if (r.seq !== undefined) r.seq.gone = true
    r.seq = undefined
    r.at = undefined
  }

  const dispatch = (r: Req, i: Inst): void => {
    if (o.resume === 'recompute') r.kept = 0
    const seq: Seq = { req: r, promptTokens: r.spec.promptTokens + r.kept, maxTokens: r.spec.maxTokens - r.kept, remaining: r.spec.responseTokens - r.kept, gone: false }
    Object.assign(r, { at: i, phase: 'pending', seq, dispatchedS: q.nowS })
    i.pending.add(r)
    i.queued.push(seq)
    if (!i.waking) { i.waking = true; q.after(0, () => { i.waking = false; kick(i) }) }
  }

  function pump (): void {
    while (waiting.length > 0) {
      const l = loads()
      const choice = o.balancer === 'rlboost' ? selectInstance(l, o.maxPending) : o.balancer === 'jsq' ? selectShortestQueue(l) : selectRoundRobin(l, turn++)
      if (choice === null) return
      dispatch(waiting.shift()!, insts.get(choice)!)
    }
  }

  const preempt = (i: Inst): void => {
    i.alive = false
    if (i.step !== undefined) { q.cancel(i.step); i.step = undefined }
    for (const r of [...i.pending, ...i.executing]) { detach(r); r.phase = 'waiting'; r.balanced = false; waiting.unshift(r); moves.lost++ }
    i.queued = []
    i.running = []
    pump()
  }

  let joinsToCome = 0
  const tick = (): void => {
    if (remaining === 0 || (inRotation().length === 0 && joinsToCome === 0)) return
    if (waiting.length === 0 && o.balancer === 'rlboost') {
      const move = rebalance(loads(), o.plateau)
      if (move !== null) {
        const from = insts.get(move.from)!
        const to = insts.get(move.to)!
        const picked = [...(move.kind === 'pending' ? from.pending : from.executing)].filter(r => !r.balanced).sort((a, b) => b.dispatchedS - a.dispatchedS).slice(0, move.count)
        for (const r of picked) { detach(r); dispatch(r, to); r.balanced = true; moves[move.kind]++ }
      }
    }
    q.after(o.rebalanceIntervalMs / 1000, tick)
  }

  for (const e of engines) {
    const i: Inst = { e, alive: (e.joinAtS ?? 0) <= 0, queued: [], running: [], step: undefined, stepping: false, waking: false, pending: new Set(), executing: new Set() }
    insts.set(e.id, i)
    if (!i.alive) {
      joinsToCome++
      q.at(e.joinAtS!, () => { joinsToCome--; if (e.preemptAtS === undefined || e.preemptAtS > q.nowS) { i.alive = true; pump() } })
    }
    if (e.preemptAtS !== undefined) q.at(Math.max(0, e.preemptAtS), () => preempt(i))
  }
  pump()
  if (o.rebalanceIntervalMs > 0) q.after(o.rebalanceIntervalMs / 1000, tick)
  q.runUntil() // ends when every request is done, or when no instance is left and none will join
  if (remaining > 0) throw new RangeError(`${remaining} requests never finished: no instance left in rotation`)
  return { stepS: Math.max(0, ...Object.values(finishS)), moves, generatedTokens, keptTokens: reqs.reduce((n, r) => n + r.kept, 0), finishS, finishedOn }
}
