/**
 * The reward planner's history as cluster state: the fenced decision
 * `reward-history`, which the reward leader task publishes at every batch
 * completion and a new leader starts from, so a leader change (even the same
 * agent elected again) does not turn the next batch of every task into a cold
 * start (DistRS Alg. 2 reads the previous batch of the batch's task).
 *
 * Contract:
 * - Per task, the last completed batch: its index and, per request, the
 *   arrival offset after the batch's start and the running time at each
 *   stage, in milliseconds rounded to 0.1 ms. Tasks are listed least recently
 *   completed first.
 * - The payload fits in `maxBytes` of JSON (a share of mesh.maxRecordBytes:
 *   the desired state travels whole in one mesh message). When it would not,
 *   the task with the most requests is thinned first (an evenly spaced sample
 *   in arrival order that always keeps the request ending last, so the
 *   batch's estimated completion, Eq. 1–2, is unchanged); a task already
 *   down to one request makes the least recently completed task go.
 * - The leader plans from exactly what it publishes (decodeRewardHistory of
 *   the payload), so its successor plans from the same numbers.
 */
import type { BatchHistory, HistoricalRequest } from '../../policies/reward-scaling/types.ts'

export const rewardHistoryKind = 'reward-history'

/** A task's history in the planner: the batch it comes from, and its requests (Alg. 2 input). */
export interface TaskHistory extends BatchHistory {
  /** Index of the completed batch the requests come from. */
  readonly batch: number
}

/** Payload of the `reward-history` decision. */
export interface RewardHistoryPayload {
  /** Least recently completed first. `requests[i]` = [offsetMs, stage 0 ms, stage 1 ms, …]. */
  tasks: Array<{ task: string, batch: number, requests: number[][] }>
}

const round = (ms: number): number => Math.round(ms * 10) / 10

/** Index of the request whose last stage ends last (r_i + Σ_j s_ij), the one Eq. 1–2 takes. */
function lastEnding (requests: readonly number[][]): number {
  let best = 0
  let latest = -Infinity
  requests.forEach((r, i) => {
    let end = 0
    for (const v of r) end += v
    if (end > latest) { latest = end; best = i }
  })
  return best
}

/** `count` requests evenly spaced in arrival order, the last-ending one among them. */
function thinned (requests: readonly number[][], count: number): number[][] {
  const byArrival = [...requests].sort((a, b) => a[0]! - b[0]!)
  const keep = new Set<number>()
  keep.add(lastEnding(byArrival))
  for (let k = 0; keep.size < count && k < count; k++) keep.add(count === 1 ? 0 : Math.round(k * (byArrival.length - 1) / (count - 1)))
  for (let i = 0; keep.size < count && i < byArrival.length; i++) keep.add(i)
  return [...keep].sort((a, b) => a - b).map(i => byArrival[i]!)
}

/**
 * The decision's payload for `tasks` (least recently completed first), cut to
 * `maxBytes` of JSON as the contract says.
 */
export function encodeRewardHistory (tasks: ReadonlyArray<{ task: string, history: TaskHistory }>, maxBytes: number): RewardHistoryPayload {
  const payload: RewardHistoryPayload = {
    tasks: tasks.filter(t => t.history.requests.length > 0).map(({ task, history }) => ({
      task,
      batch: history.batch,
      requests: history.requests.map(r => [round(r.offsetS * 1000), ...r.stageS.map(s => round(s * 1000))]),
    })),
  }
  for (let bytes = jsonBytes(payload); bytes > maxBytes && payload.tasks.length > 0; bytes = jsonBytes(payload)) {
    let largest = payload.tasks[0]!
    for (const t of payload.tasks) if (t.requests.length > largest.requests.length) largest = t
    if (largest.requests.length <= 1) { payload.tasks.shift(); continue }
    const count = Math.max(1, Math.min(largest.requests.length - 1, Math.floor(largest.requests.length * maxBytes / bytes)))
    largest.requests = thinned(largest.requests, count)
  }
  return payload
}

/**
 * The planner's histories from a payload, in its order. A task whose
 * requests do not have one time per stage of `stageCount` (the stages were
 * reconfigured) is left out.
 */
export function decodeRewardHistory (payload: unknown, stageCount: number): Map<string, TaskHistory> {
  const out = new Map<string, TaskHistory>()
  if (payload === undefined || rewardHistoryProblem(payload) !== undefined) return out
  for (const t of (payload as RewardHistoryPayload).tasks) {
    if (t.requests.some(r => r.length !== stageCount + 1)) continue
    const requests: HistoricalRequest[] = t.requests.map(r => ({ offsetS: r[0]! / 1000, stageS: r.slice(1).map(ms => ms / 1000) }))
    out.set(t.task, { batch: t.batch, requests })
  }
  return out
}

/** Why a payload is not a reward-history payload, or undefined when it is one. */
export function rewardHistoryProblem (payload: unknown): string | undefined {
  const p = payload as Partial<RewardHistoryPayload> | null | undefined
  if (p === null || typeof p !== 'object' || Array.isArray(p) || !Array.isArray(p.tasks)) return 'a reward-history payload is { tasks: [{ task, batch, requests }] }'
  for (const [i, t] of p.tasks.entries()) {
    if (t === null || typeof t !== 'object' || typeof t.task !== 'string' || !Number.isSafeInteger(t.batch) || t.batch < 0) return `tasks[${i}]: { task: string, batch: integer >= 0, requests }`
    if (!Array.isArray(t.requests) || !t.requests.every(r => Array.isArray(r) && r.length >= 2 && r.every(v => typeof v === 'number' && Number.isFinite(v) && v >= 0))) {
      return `tasks[${i}].requests: per request [offsetMs, stage ms, …], numbers >= 0`
    }
  }
  return undefined
}

function jsonBytes (value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value))
}
