/**
 * The trainer's side of the reward service on every agent: batch-start hints
 * and requests are forwarded to the acting leader's proxy (leader calls), and
 * every request the proxy acknowledged is kept here until its result is here.
 *
 * Durability contract ("acknowledged" = the trainer got an answer to its
 * submit): the answer is given only after the leader accepted the request and
 * this agent recorded it. A collector loop asks the leader for the results of
 * every pending request (long-poll `reward.await`) and stores them; results
 * stay until the trainer fetched them plus resultRetentionMs (never fetched:
 * unfetchedResultRetentionMs after they arrived). When a leader
 * answers that it does not know a pending request (it took over after the
 * previous leader died), this agent tells it the request's batch (size and the
 * ids of that batch with results here: `reward.resync`) and submits the
 * request again, by id. The resync also carries what the new leader's
 * planner needs of the batch: how long ago it started here and, for each of
 * its requests with a result here, its arrival offset and stage times (so a
 * leader change alters neither the batch's priority nor its history).
 * So a leader change loses no acknowledged request; a
 * request that was running on a worker runs again from its first stage. A
 * request the leader reported as having used its one retry after a lost
 * worker is submitted again marked `retried`, so the count survives the
 * change (a worker lost in the last await round before the leader died is
 * not known here: that request gets its retry again).
 *
 * Where results live: here and at the leader, until the trainer fetched them.
 * The trainer's fetches here are reported to the leader (`ack` of the next
 * `reward.await`), which then keeps the result resultRetentionMs more. If this
 * agent dies, the trainer fetches (or resubmits, idempotent by id) through any
 * other agent: that agent asks the leader (`reward.result`, or the submit's
 * answer carries the result). If the leader dies, this agent hands the results
 * its trainer has not fetched to the new leader (`reward.resync` with
 * `results`, at the first decision of every new epoch: leaderChanged()).
 * Only the death of both before the trainer fetched loses a result (the
 * trainer's resubmission then runs the request again).
 *
 * Cancellation and abandonment: cancel() cancels a batch or some of its
 * requests at the leader and ends them here as `cancelled` at once (so no
 * later leader is sent them again). A batch whose trainer has not touched it
 * through this agent (a hint, a submit, a result fetch of one of its
 * requests) for abandonedBatchMs is abandoned: its requests still pending
 * here are cancelled the same way, with a message saying so.
 */
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import type { LeaderCallOptions } from '../../mesh/election/leader-calls.ts'
import {
  BatchStartBody, CancelBody, SubmitBody, requestDigest, validatorOf, type CancelAnswer, type CancelRequest, type LeaderSubmitRequest, type RewardResult, type SubmitRequest,
} from '../../mesh/control/reward/reward-messages.ts'
import type { RewardResultAnswer as ResultAnswer, RewardSubmitAnswer as SubmitAnswer } from '../api/wire/reward.ts'

export interface RewardSubmitterOptions {
  /** Requests kept at once (pending or with results); beyond it ERR_REWARD_FULL. */
  maxPendingRequests: number
  /** A fetched result is kept this long for a repeated fetch, ms. */
  resultRetentionMs: number
  /** A result the trainer never fetched is dropped this long after it arrived here, ms. Default 3600000. */
  unfetchedResultRetentionMs?: number
  /** Reward of a request the new leader refused to take again. */
  timeoutReward: number
  /** Long-poll of one collector round, ms. Default 1000. */
  awaitWaitMs?: number
  /** A batch untouched by its trainer this long has its pending requests cancelled, ms. Default 3600000. */
  abandonedBatchMs?: number
}

export interface RewardSubmitterComponents {
  logger: Logger
  callLeader(method: string, body: unknown, options?: LeaderCallOptions): Promise<unknown>
}

export type { SubmitAnswer, ResultAnswer }

export interface RewardSubmitter {
  start(options: { signal: AbortSignal }): void
  stop(): Promise<void>
  batchStart(body: unknown): Promise<unknown>
  submit(body: unknown): Promise<SubmitAnswer>
  /**
   * The request's result, waiting up to waitMs for it. A request not submitted
   * through this agent is asked of the leader; ERR_NOT_FOUND when it knows it neither.
   */
  result(requestId: string, waitMs: number, signal?: AbortSignal): Promise<ResultAnswer>
  /** A new leader acts (a new epoch): it gets the results held here that the trainer has not fetched. */
  leaderChanged(): void
  /** Requests held here: pending (no result yet) and done. */
  counts(): { pending: number, done: number }
  /** Cancels a batch or some of its requests (CancelBody) at the leader and here. */
  cancel(body: unknown): Promise<CancelAnswer>
}

interface Entry {
  body: SubmitRequest
  digest: string
  result: RewardResult | undefined
  /** When the result arrived here (performance.now()). */
  storedMs: number
  /** When the trainer first fetched the result (performance.now()), or undefined. */
  fetchedMs: number | undefined
  /** Fetched by the trainer, not yet reported to the leader (AwaitBody.ack). */
  unacked: boolean
  /** Handed to the current leader since it took over (or it computed the result itself). */
  deposited: boolean
  /** A leader reported that it used its one retry after a lost worker: a later leader is told (LeaderSubmitBody.retried). */
  retried: boolean
  /** When it was forwarded to the leader the first time (performance.now()). */
  submittedMs: number
}

interface ResyncBatch { task: string, batch: number, size: number, doneIds: string[], ageMs?: number, finished: Array<{ requestId: string, offsetMs: number, stageS: number[] }> }

const validateSubmit = validatorOf(SubmitBody, 'reward request')
const validateBatchStart = validatorOf(BatchStartBody, 'batch-start hint')
const validateCancel = validatorOf(CancelBody, 'cancellation')
const maxIdsPerAwait = 10_000
const retryDelayMs = 200

export function createRewardSubmitter (options: RewardSubmitterOptions, components: RewardSubmitterComponents): RewardSubmitter {
  const log = components.logger
  const entries = new Map<string, Entry>()
  /** Batch sizes from the hints (and submits with batchSize) forwarded by this agent. */
  const batchSizes = new Map<string, number>()
  /** When each batch started as seen here: its hint or first request forwarded (performance.now()). */
  const batchStarts = new Map<string, number>()
  const waiters = new Set<() => void>()
  /** Results fetched through this agent of requests submitted through another one: for a repeated fetch. */
  const fetchedElsewhere = new Map<string, { result: RewardResult, fetchedMs: number }>()
  const unfetchedResultRetentionMs = options.unfetchedResultRetentionMs ?? 3_600_000
  let leaderChanged = false
  let signal: AbortSignal = AbortSignal.abort()
  let stopCollecting = (): void => {}
  let loop: Promise<void> | undefined
  let wakeLoop: (() => void) | undefined
  const awaitWaitMs = options.awaitWaitMs ?? 1000
  const abandonedBatchMs = options.abandonedBatchMs ?? 3_600_000
  const key = (task: string, batch: number): string => `${task}#${batch}`
  /** When the trainer last touched each batch through this agent (hint, submit, result fetch), performance.now(). */
  const batchTouched = new Map<string, number>()
  const touch = (task: string, batch: number): void => { batchTouched.set(key(task, batch), performance.now()) }

  /**
   * Ends the batch's requests pending here (those in `ids`, or all) as
   * cancelled; their ids. `atLeader`: the leader cancelled them too (else a
   * new leader is handed these results like any other unfetched ones).
   */
  const cancelHere = (b: CancelRequest, why: string, atLeader: boolean): string[] => {
    const listed = b.requestIds !== undefined ? new Set(b.requestIds) : undefined
    const ended: string[] = []
    for (const [id, e] of entries) {
      if (e.result !== undefined || e.body.task !== b.task || e.body.batch !== b.batch || (listed !== undefined && !listed.has(id))) continue
      store({ requestId: id, task: b.task, batch: b.batch, status: 'cancelled', reward: options.timeoutReward, message: why, stageS: [] }, atLeader)
      ended.push(id)
    }
    return ended
  }

  /** Batches untouched for abandonedBatchMs with requests still pending here: cancelled at the leader (best effort) and here. */
  const abandon = async (): Promise<void> => {
    const now = performance.now()
    const stale = new Map<string, CancelRequest>()
    for (const [id, e] of entries) {
      const k = key(e.body.task, e.body.batch)
      if (e.result !== undefined || now - (batchTouched.get(k) ?? e.submittedMs) <= abandonedBatchMs) continue
      const b = stale.get(k) ?? { task: e.body.task, batch: e.body.batch, requestIds: [] }
      if (b.requestIds!.length < maxIdsPerAwait) b.requestIds!.push(id)
      stale.set(k, b)
    }
    for (const b of stale.values()) {
      const atLeader = await components.callLeader('reward.cancel', b).then(() => true, err => {
        log.warn({ task: b.task, batch: b.batch, err: (err as Error).message }, 'cancelling an abandoned reward batch at the leader failed (its requests end here anyway)')
        return false
      })
      const ended = cancelHere(b, `abandoned: its trainer did not touch batch ${b.batch} of task ${b.task} through this agent for ${Math.round(abandonedBatchMs / 1000)} s (reward.abandonedBatchMs)`, atLeader)
      log.warn({ task: b.task, batch: b.batch, requests: ended.length }, 'abandoned reward requests cancelled')
    }
  }

  const pendingIds = (): string[] => {
    const ids: string[] = []
    for (const [id, e] of entries) if (e.result === undefined && ids.length < maxIdsPerAwait) ids.push(id)
    return ids
  }

  /** `submission`: the trainer's submit call this forwards (one id for the call's retries), if it is one. */
  const forward = (body: SubmitRequest, retried = false, submission?: string): Promise<unknown> => {
    const size = batchSizes.get(key(body.task, body.batch))
    const forwarded: LeaderSubmitRequest = size !== undefined && body.batchSize === undefined ? { ...body, batchSize: size } : { ...body }
    if (retried) forwarded.retried = true
    if (submission !== undefined) forwarded.submission = submission
    return components.callLeader('reward.submit', forwarded)
  }

  /** A new leader lacks `ids`: their batches, then the requests again. */
  const resubmit = async (ids: string[]): Promise<void> => {
    const batches = new Map<string, ResyncBatch>()
    for (const id of ids) {
      const e = entries.get(id)
      if (e !== undefined) addBatch(batches, e.body.task, e.body.batch)
    }
    fillBatches(batches)
    if (batches.size > 0) await components.callLeader('reward.resync', { batches: [...batches.values()] })
    log.info({ requests: ids.length, batches: batches.size }, 'the leader does not know pending reward requests: submitted again')
    for (const id of ids) {
      const e = entries.get(id)
      if (e === undefined || e.result !== undefined) continue
      try {
        await forward(e.body, e.retried)
      } catch (err) {
        // The leader refuses it for good (e.g. its batch completed meanwhile): the trainer learns it as a failure.
        if (err instanceof AgentError && err.code !== 'ERR_LEADER_UNAVAILABLE') {
          store({ requestId: id, task: e.body.task, batch: e.body.batch, status: 'failed', reward: options.timeoutReward, message: `resubmission refused: ${err.message}`, stageS: [] }, false)
        } else throw err
      }
    }
  }

  /** Adds the batch (task, batch) to a resync, if its size is known here. */
  const addBatch = (batches: Map<string, ResyncBatch>, task: string, batch: number): void => {
    const k = key(task, batch)
    const size = batchSizes.get(k)
    if (size === undefined || batches.has(k)) return
    const started = batchStarts.get(k)
    batches.set(k, { task, batch, size, doneIds: [], ...(started !== undefined ? { ageMs: Math.max(0, performance.now() - started) } : {}), finished: [] })
  }

  /** The requests of each batch with a result here: done ids, and the timings the planner's history needs. */
  const fillBatches = (batches: Map<string, ResyncBatch>): void => {
    for (const [id, e] of entries) {
      const k = key(e.body.task, e.body.batch)
      const b = batches.get(k)
      if (b === undefined || e.result === undefined) continue
      b.doneIds.push(id)
      const started = batchStarts.get(k)
      if (started !== undefined && e.result.stageS.length > 0) b.finished.push({ requestId: id, offsetMs: Math.max(0, e.submittedMs - started), stageS: e.result.stageS })
    }
  }

  /** A hint or request of the batch was forwarded at `sentMs`; `size` as it said. */
  const noteBatch = (task: string, batch: number, size: number | undefined, sentMs: number): void => {
    const k = key(task, batch)
    if (!batchStarts.has(k)) batchStarts.set(k, sentMs)
    if (size !== undefined) batchSizes.set(k, Math.max(size, batchSizes.get(k) ?? 0))
  }

  /** `atLeader`: the current leader holds the result (it computed or answered it). */
  const store = (result: RewardResult, atLeader: boolean): void => {
    const e = entries.get(result.requestId)
    if (e === undefined || e.result !== undefined) return
    e.result = result
    e.storedMs = performance.now()
    e.deposited = atLeader
    for (const wake of waiters) wake()
  }

  /** Hands the new leader the results its trainer has not fetched, with their batches (so it knows they completed). */
  const deposit = async (): Promise<void> => {
    const results: Array<{ result: RewardResult, digest: string }> = []
    for (const e of entries.values()) if (e.result !== undefined && e.fetchedMs === undefined && !e.deposited) results.push({ result: e.result, digest: e.digest })
    for (let i = 0; i < results.length; i += maxIdsPerAwait) {
      const chunk = results.slice(i, i + maxIdsPerAwait)
      const batches = new Map<string, ResyncBatch>()
      for (const { result } of chunk) addBatch(batches, result.task, result.batch)
      fillBatches(batches)
      await components.callLeader('reward.resync', { batches: [...batches.values()], results: chunk })
      for (const { result } of chunk) { const e = entries.get(result.requestId); if (e !== undefined) e.deposited = true }
    }
    if (results.length > 0) log.info({ results: results.length }, 'unfetched reward results handed to the new leader')
  }

  const collect = async (): Promise<void> => {
    while (!signal.aborted) {
      if (leaderChanged) {
        leaderChanged = false
        for (const e of entries.values()) e.deposited = false
      }
      const ids = pendingIds()
      const ack: string[] = []
      for (const [id, e] of entries) if (e.unacked && ack.length < maxIdsPerAwait) ack.push(id)
      forget()
      await abandon()
      const undeposited = [...entries.values()].some(e => e.result !== undefined && e.fetchedMs === undefined && !e.deposited)
      if (undeposited) {
        try {
          await deposit()
        } catch (err) {
          if (signal.aborted) return
          log.warn({ err: (err as Error).message }, 'handing unfetched reward results to the leader failed; retrying')
          await sleep(retryDelayMs, undefined, { signal }).catch(() => {})
          continue
        }
      }
      if (ids.length === 0 && ack.length === 0) {
        await new Promise<void>(resolve => { wakeLoop = resolve; signal.addEventListener('abort', () => resolve(), { once: true }) })
        wakeLoop = undefined
        continue
      }
      try {
        const answer = await components.callLeader('reward.await', { ids, ack, waitMs: ids.length > 0 ? awaitWaitMs : 0 }, { timeoutMs: awaitWaitMs + 10_000, signal }) as { results: RewardResult[], unknown: string[], retried?: string[] }
        for (const id of ack) { const e = entries.get(id); if (e !== undefined) e.unacked = false }
        for (const id of answer.retried ?? []) { const e = entries.get(id); if (e !== undefined) e.retried = true }
        for (const result of answer.results) store(result, true)
        if (answer.unknown.length > 0) await resubmit(answer.unknown)
      } catch (err) {
        if (signal.aborted) return
        log.warn({ err: (err as Error).message, pending: ids.length }, 'collecting reward results failed; retrying')
        await sleep(retryDelayMs, undefined, { signal }).catch(() => {})
      }
    }
  }

  /** Drops results fetched more than resultRetentionMs ago, and those never fetched after unfetchedResultRetentionMs. */
  const forget = (): void => {
    const now = performance.now()
    for (const [id, e] of entries) {
      if (e.result === undefined) continue
      if (e.fetchedMs !== undefined ? !e.unacked && now - e.fetchedMs > options.resultRetentionMs : now - e.storedMs > unfetchedResultRetentionMs) entries.delete(id)
    }
    for (const [id, f] of fetchedElsewhere) if (now - f.fetchedMs > options.resultRetentionMs) fetchedElsewhere.delete(id)
    // A batch's size, start and last touch are needed while it has requests here, or may get some.
    const held = new Set<string>()
    for (const e of entries.values()) held.add(key(e.body.task, e.body.batch))
    const idleMs = Math.max(abandonedBatchMs, unfetchedResultRetentionMs)
    for (const k of new Set([...batchSizes.keys(), ...batchStarts.keys(), ...batchTouched.keys()])) {
      if (held.has(k) || now - (batchTouched.get(k) ?? batchStarts.get(k) ?? 0) <= idleMs) continue
      batchSizes.delete(k)
      batchStarts.delete(k)
      batchTouched.delete(k)
    }
  }

  return {
    start (o) {
      // stop() ends the collector at once, also while the agent's own signal is not aborted yet: a
      // long poll of the leader (which may be stopping too) would otherwise hold the agent's stop.
      const collecting = new AbortController()
      stopCollecting = () => collecting.abort()
      o.signal.addEventListener('abort', stopCollecting, { once: true })
      signal = collecting.signal
      loop = collect().catch(err => log.error({ err }, 'reward result collector stopped'))
    },
    async stop () {
      stopCollecting()
      wakeLoop?.()
      await loop
    },

    leaderChanged () {
      leaderChanged = true
      wakeLoop?.()
    },

    async batchStart (body) {
      const b = validateBatchStart.parse(body)
      touch(b.task, b.batch)
      const sentMs = performance.now()
      const answer = await components.callLeader('reward.batch-start', b)
      noteBatch(b.task, b.batch, b.size, sentMs)
      return answer
    },

    async submit (body) {
      const b = validateSubmit.parse(body)
      touch(b.task, b.batch)
      const digest = requestDigest(b)
      const known = entries.get(b.requestId)
      if (known !== undefined) {
        if (known.digest !== digest) throw new AgentError('ERR_REWARD_CONFLICT', `request ${b.requestId} was submitted before with another task, batch or payload (task ${known.body.task}, batch ${known.body.batch})`)
        return { requestId: b.requestId, duplicate: true, ...(known.result !== undefined ? { result: known.result } : {}) }
      }
      if (entries.size >= options.maxPendingRequests) throw new AgentError('ERR_REWARD_FULL', `this agent holds ${entries.size} reward requests (reward.maxPendingRequests); fetch results or retry later`)
      const sentMs = performance.now()
      const answer = await forward(b, false, randomUUID()) as { duplicate: boolean, result?: RewardResult }
      noteBatch(b.task, b.batch, b.batchSize, sentMs)
      if (!entries.has(b.requestId)) entries.set(b.requestId, { body: b, digest, result: undefined, storedMs: 0, fetchedMs: undefined, unacked: false, deposited: false, retried: false, submittedMs: sentMs })
      // Submitted before (maybe through another agent) and done: the answer carries the result.
      if (answer.result !== undefined) store(answer.result, true)
      wakeLoop?.()
      return { requestId: b.requestId, duplicate: answer.duplicate, ...(answer.result !== undefined ? { result: answer.result } : {}) }
    },

    async result (requestId, waitMs, callerSignal) {
      const e = entries.get(requestId)
      if (e !== undefined) touch(e.body.task, e.body.batch)
      if (e === undefined) {
        const fetched = fetchedElsewhere.get(requestId)
        if (fetched !== undefined) return { requestId, state: 'done', result: fetched.result }
        // Submitted through another agent (which may be gone): the leader keeps results until the trainer fetched them.
        const answer = await components.callLeader('reward.result', { requestId, waitMs },
          { timeoutMs: waitMs + 10_000, ...(callerSignal !== undefined ? { signal: callerSignal } : {}) }) as ResultAnswer
        if (answer.state === 'done') fetchedElsewhere.set(requestId, { result: answer.result, fetchedMs: performance.now() })
        return answer
      }
      if (e.result === undefined && waitMs > 0) {
        await new Promise<void>(resolve => {
          const done = (): void => { clearTimeout(timer); waiters.delete(wake); callerSignal?.removeEventListener('abort', done); resolve() }
          const wake = (): void => { if (e.result !== undefined) done() }
          const timer = setTimeout(done, waitMs)
          callerSignal?.addEventListener('abort', done, { once: true })
          waiters.add(wake)
        })
      }
      if (e.result === undefined) return { requestId, state: 'pending' }
      if (e.fetchedMs === undefined) {
        e.fetchedMs = performance.now()
        e.unacked = true
        wakeLoop?.()
      }
      return { requestId, state: 'done', result: e.result }
    },

    async cancel (body) {
      const b = validateCancel.parse(body)
      touch(b.task, b.batch)
      let answer: CancelAnswer
      try {
        answer = await components.callLeader('reward.cancel', b) as CancelAnswer
      } catch (err) {
        // A batch the leader does not know may still be pending here (a leader change): end it here.
        if (!(err instanceof AgentError && err.code === 'ERR_NOT_FOUND')) throw err
        const ended = cancelHere(b, 'cancelled by the trainer', false)
        if (ended.length === 0) throw err
        const endedHere = new Set(ended)
        return { cancelled: ended, finished: [], unknown: (b.requestIds ?? []).filter(id => !endedHere.has(id)) }
      }
      cancelHere(b, 'cancelled by the trainer', true)
      wakeLoop?.()
      return answer
    },

    counts () {
      let pending = 0
      for (const e of entries.values()) if (e.result === undefined) pending++
      return { pending, done: entries.size - pending }
    },
  }
}
