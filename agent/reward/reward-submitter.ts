/**
 * The trainer's side of the reward service on every agent: batch-start hints
 * and requests are forwarded to the acting leader's proxy (leader calls), and
 * every request the proxy acknowledged is kept here until its result is here.
 *
 * Durability contract ("acknowledged" = the trainer got an answer to its
 * submit): the answer is given only after the leader accepted the request and
 * this agent recorded it. A collector loop asks the leader for the results of
 * every pending request (long-poll `reward.await`) and stores them; results
 * stay until the trainer fetched them plus resultRetentionMs. When a leader
 * answers that it does not know a pending request (it took over after the
 * previous leader died), this agent tells it the request's batch (size and the
 * ids of that batch with results here: `reward.resync`) and submits the
 * request again, by id. So a leader change loses no acknowledged request; a
 * request that was running on a worker runs again from its first stage. A
 * request the leader reported as having used its one retry after a lost
 * worker is submitted again marked `retried`, so the count survives the
 * change (a worker lost in the last await round before the leader died is
 * not known here: that request gets its retry again).
 * Results this agent stored are acknowledged to the leader, which forgets them.
 * If this agent itself dies, its trainers submit again (idempotent by id).
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type { Logger } from 'pino'
import { AgentError } from '../errors.ts'
import type { LeaderCallOptions } from '../../mesh/election/leader-calls.ts'
import { BatchStartBody, SubmitBody, requestDigest, validatorOf, type LeaderSubmitRequest, type RewardResult, type SubmitRequest } from './reward-messages.ts'

export interface RewardSubmitterOptions {
  /** Requests kept at once (pending or with results); beyond it ERR_REWARD_FULL. */
  maxPendingRequests: number
  /** A fetched result is kept this long for a repeated fetch, ms. */
  resultRetentionMs: number
  /** Reward of a request the new leader refused to take again. */
  timeoutReward: number
  /** Long-poll of one collector round, ms. Default 1000. */
  awaitWaitMs?: number
}

export interface RewardSubmitterComponents {
  logger: Logger
  callLeader(method: string, body: unknown, options?: LeaderCallOptions): Promise<unknown>
}

export interface SubmitAnswer { requestId: string, duplicate: boolean }

export type ResultAnswer = { requestId: string, state: 'pending' } | { requestId: string, state: 'done', result: RewardResult }

export interface RewardSubmitter {
  start(options: { signal: AbortSignal }): void
  stop(): Promise<void>
  batchStart(body: unknown): Promise<unknown>
  submit(body: unknown): Promise<SubmitAnswer>
  /** The request's result, waiting up to waitMs for it; ERR_NOT_FOUND when it was not submitted through this agent. */
  result(requestId: string, waitMs: number, signal?: AbortSignal): Promise<ResultAnswer>
  /** Requests held here: pending (no result yet) and done. */
  counts(): { pending: number, done: number }
}

interface Entry {
  body: SubmitRequest
  digest: string
  result: RewardResult | undefined
  /** When the trainer first fetched the result (performance.now()), or undefined. */
  fetchedMs: number | undefined
  /** Stored but not yet acknowledged to the leader. */
  unacked: boolean
  /** A leader reported that it used its one retry after a lost worker: a later leader is told (LeaderSubmitBody.retried). */
  retried: boolean
}

const validateSubmit = validatorOf(SubmitBody, 'reward request')
const validateBatchStart = validatorOf(BatchStartBody, 'batch-start hint')
const maxIdsPerAwait = 10_000
const retryDelayMs = 200

export function createRewardSubmitter (options: RewardSubmitterOptions, components: RewardSubmitterComponents): RewardSubmitter {
  const log = components.logger
  const entries = new Map<string, Entry>()
  /** Batch sizes from the hints (and submits with batchSize) forwarded by this agent. */
  const batchSizes = new Map<string, number>()
  const waiters = new Set<() => void>()
  let signal: AbortSignal = AbortSignal.abort()
  let loop: Promise<void> | undefined
  let wakeLoop: (() => void) | undefined
  const awaitWaitMs = options.awaitWaitMs ?? 1000
  const key = (task: string, batch: number): string => `${task}#${batch}`

  const pendingIds = (): string[] => {
    const ids: string[] = []
    for (const [id, e] of entries) if (e.result === undefined && ids.length < maxIdsPerAwait) ids.push(id)
    return ids
  }

  const forward = (body: SubmitRequest, retried = false): Promise<unknown> => {
    const size = batchSizes.get(key(body.task, body.batch))
    const forwarded: LeaderSubmitRequest = size !== undefined && body.batchSize === undefined ? { ...body, batchSize: size } : { ...body }
    if (retried) forwarded.retried = true
    return components.callLeader('reward.submit', forwarded)
  }

  /** A new leader lacks `ids`: their batches, then the requests again. */
  const resubmit = async (ids: string[]): Promise<void> => {
    const batches = new Map<string, { task: string, batch: number, size: number, doneIds: string[] }>()
    for (const id of ids) {
      const e = entries.get(id)
      if (e === undefined) continue
      const k = key(e.body.task, e.body.batch)
      const size = batchSizes.get(k) ?? e.body.batchSize
      if (size !== undefined && !batches.has(k)) batches.set(k, { task: e.body.task, batch: e.body.batch, size, doneIds: [] })
    }
    for (const [id, e] of entries) {
      const b = batches.get(key(e.body.task, e.body.batch))
      if (b !== undefined && e.result !== undefined) b.doneIds.push(id)
    }
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

  const store = (result: RewardResult, fromLeader: boolean): void => {
    const e = entries.get(result.requestId)
    if (e === undefined || e.result !== undefined) return
    e.result = result
    e.unacked = fromLeader
    for (const wake of waiters) wake()
  }

  const collect = async (): Promise<void> => {
    while (!signal.aborted) {
      const ids = pendingIds()
      const ack: string[] = []
      for (const [id, e] of entries) if (e.unacked && ack.length < maxIdsPerAwait) ack.push(id)
      forget()
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

  /** Drops results fetched more than resultRetentionMs ago. */
  const forget = (): void => {
    const now = performance.now()
    for (const [id, e] of entries) if (e.fetchedMs !== undefined && !e.unacked && now - e.fetchedMs > options.resultRetentionMs) entries.delete(id)
  }

  return {
    start (o) {
      signal = o.signal
      loop = collect().catch(err => log.error({ err }, 'reward result collector stopped'))
    },
    async stop () {
      wakeLoop?.()
      await loop
    },

    async batchStart (body) {
      const b = validateBatchStart.parse(body)
      const answer = await components.callLeader('reward.batch-start', b)
      const k = key(b.task, b.batch)
      batchSizes.set(k, Math.max(b.size, batchSizes.get(k) ?? 0))
      return answer
    },

    async submit (body) {
      const b = validateSubmit.parse(body)
      const digest = requestDigest(b)
      const known = entries.get(b.requestId)
      if (known !== undefined) {
        if (known.digest !== digest) throw new AgentError('ERR_REWARD_CONFLICT', `request ${b.requestId} was submitted before with another task, batch or payload (task ${known.body.task}, batch ${known.body.batch})`)
        return { requestId: b.requestId, duplicate: true }
      }
      if (entries.size >= options.maxPendingRequests) throw new AgentError('ERR_REWARD_FULL', `this agent holds ${entries.size} reward requests (reward.maxPendingRequests); fetch results or retry later`)
      const answer = await forward(b) as { duplicate: boolean }
      if (b.batchSize !== undefined) batchSizes.set(key(b.task, b.batch), Math.max(b.batchSize, batchSizes.get(key(b.task, b.batch)) ?? 0))
      if (!entries.has(b.requestId)) entries.set(b.requestId, { body: b, digest, result: undefined, fetchedMs: undefined, unacked: false, retried: false })
      wakeLoop?.()
      return { requestId: b.requestId, duplicate: answer.duplicate }
    },

    async result (requestId, waitMs, callerSignal) {
      const e = entries.get(requestId)
      if (e === undefined) throw new AgentError('ERR_NOT_FOUND', `reward request ${requestId} was not submitted through this agent (or its result was fetched more than reward.resultRetentionMs ago)`)
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
      e.fetchedMs ??= performance.now()
      return { requestId, state: 'done', result: e.result }
    },

    counts () {
      let pending = 0
      for (const e of entries.values()) if (e.result === undefined) pending++
      return { pending, done: entries.size - pending }
    },
  }
}
