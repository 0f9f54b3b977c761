/**
 * DistRS Algorithm 2 (request information collection, §5.2): from a task's
 * previous batch, the requests each active batch is still expected to put on
 * the service, as input to Algorithm 1's SIMULATE.
 */
import { createSeededRandom, type SeededRandom } from '../../../core/seeded-random.ts'
import type { ActiveBatch, BatchHistory, EstimatedRequest, PlannerSnapshot, RewardStage } from './types.ts'

/** Eq. 1–2: the earliest completion of a batch relative to its start, max_i (r_i + Σ_j s_ij). */
export function earliestCompletionOffsetS (history: BatchHistory): number {
  let latest = 0
  for (const request of history.requests) latest = Math.max(latest, request.offsetS + sum(request.stageS))
  return latest
}

/**
 * EBF priority of a batch starting at `startS` (§5.2: its estimated completion
 * by Eq. 1–2 over the previous batch). Without history the estimate is a
 * request arriving at the start and running every stage to its timeout.
 */
export function estimatedBatchCompletionS (startS: number, history: BatchHistory | undefined, stages: readonly RewardStage[]): number {
  if (history === undefined || history.requests.length === 0) return startS + stages.reduce((s, stage) => s + stage.timeoutS, 0)
  return startS + earliestCompletionOffsetS(history)
}

/**
 * Algorithm 2 for one batch (`batchIndex` in the snapshot), given its task's
 * history:
 * - Future (lines 8–10): historical requests with AT + r_i > now, as recorded.
 *   Two refinements. The history is first scaled to the batch's size B (the
 *   trainer's hint): B requests taken evenly in arrival order from the H
 *   recorded ones (each stands for H/B of them; with B > H each recorded one
 *   is repeated about B/H times), so a batch smaller or larger than the one
 *   recorded arrives over the same span at its own density — not as the
 *   latest B of a bigger batch, a burst at the end of its span. With B = H
 *   the scaled history is the history. And how many requests are still to
 *   come is known exactly (B minus arrivals), so the Future set is that many
 *   requests of the scaled history, the latest-arriving ones. When the batch
 *   runs behind its history, the ones whose time has passed arrive now; when
 *   it runs ahead, the earliest of the remaining historical ones are dropped.
 *   With a batch that follows its history both readings are the same set.
 * - Queuing_k (lines 13–15): ready now, stage times from stage k on of a
 *   historical request sampled uniformly among those that reached stage k
 *   (s_i'k > 0; the queued request is known to need stage k).
 * - Running_k (lines 17–19): ready now and holding its worker, s_i'k − e_ik
 *   then the later stages of a request sampled among those with s_i'k > e_ik.
 * A request for which history has no candidate (it already ran longer than
 * any recorded one) is bounded by the timeout: T_k − e_ik, then nothing.
 */
export function collectBatchRequests (
  snapshot: PlannerSnapshot, batchIndex: number, history: BatchHistory, random: SeededRandom, out: EstimatedRequest[],
): void {
  const batch = snapshot.batches[batchIndex]!
  const stageCount = snapshot.stages.length
  const byStage = stageDurationIndex(history, stageCount)
  const latestFirst = requestsByOffsetDescending(history)
  const toArrive = Math.max(0, batch.size - batch.completed - batch.inFlight.length)
  const recorded = latestFirst.length
  for (let f = 0; f < toArrive && recorded > 0; f++) {
    // The f-th latest of the history scaled to batch.size requests (f-th of batch.size evenly spaced picks, latest first).
    const request = history.requests[latestFirst[Math.min(recorded - 1, Math.floor((f + 0.5) * recorded / batch.size))]!]!
    out.push({ batch: batchIndex, readyS: Math.max(snapshot.nowS, batch.startS + request.offsetS), stageS: request.stageS, running: false })
  }
  for (const inFlight of batch.inFlight) {
    const elapsedS = inFlight.elapsedS ?? 0
    const candidates = byStage[inFlight.stage]!
    // candidates are sorted by s_ik ascending: those with s_ik > elapsed form a suffix.
    const first = firstAbove(candidates.durations, inFlight.elapsedS === null ? 0 : elapsedS)
    const stageS = new Array<number>(stageCount).fill(0)
    if (first === candidates.durations.length) {
      stageS[inFlight.stage] = Math.max(0, snapshot.stages[inFlight.stage]!.timeoutS - elapsedS)
    } else {
      const sampled = history.requests[candidates.requests[random.int(first, candidates.durations.length - 1)]!]!
      for (let j = inFlight.stage; j < stageCount; j++) stageS[j] = sampled.stageS[j]!
      stageS[inFlight.stage] = sampled.stageS[inFlight.stage]! - elapsedS
    }
    const estimated: EstimatedRequest = { batch: batchIndex, readyS: snapshot.nowS, stageS, running: inFlight.elapsedS !== null }
    out.push(inFlight.queuedSinceS === undefined ? estimated : { ...estimated, queuedSinceS: inFlight.queuedSinceS })
  }
}

/**
 * Algorithm 2 over every active batch with history ("whenever a batch arrives
 * or completes, we collect information for all active batches"). Batches
 * whose task has no history are listed in `withoutHistory` (the caller sizes
 * them without simulation).
 */
export function collectRequestInformation (snapshot: PlannerSnapshot): { requests: EstimatedRequest[], withoutHistory: number[] } {
  const random = createSeededRandom(snapshot.seed)
  const requests: EstimatedRequest[] = []
  const withoutHistory: number[] = []
  snapshot.batches.forEach((batch, index) => {
    const history = snapshot.history[batch.task]
    if (history === undefined || history.requests.length === 0) withoutHistory.push(index)
    else collectBatchRequests(snapshot, index, history, random, requests)
  })
  return { requests, withoutHistory }
}

/** Perfect knowledge (the `ideal` baseline): every batch's true remaining requests. */
export function exactRequestInformation (snapshot: PlannerSnapshot): EstimatedRequest[] {
  const requests: EstimatedRequest[] = []
  snapshot.batches.forEach((batch: ActiveBatch, index) => {
    if (batch.exactRemaining === undefined) throw new TypeError(`batch ${batch.task}#${batch.index} has no exactRemaining: the policy needs perfect knowledge`)
    for (const r of batch.exactRemaining) requests.push({ ...r, batch: index })
  })
  return requests
}

interface StageDurations {
  /** s_ik of every historical request, ascending. */
  durations: Float64Array
  /** Index into history.requests of each entry of `durations`. */
  requests: Int32Array
}

// Memoized per history object (histories are immutable snapshots), so a
// decision over many in-flight requests sorts each stage once.
const durationIndexCache = new WeakMap<BatchHistory, StageDurations[]>()

function stageDurationIndex (history: BatchHistory, stageCount: number): StageDurations[] {
  const cached = durationIndexCache.get(history)
  if (cached !== undefined && cached.length === stageCount) return cached
  const index: StageDurations[] = []
  for (let k = 0; k < stageCount; k++) {
    const order = history.requests.map((_, i) => i).sort((a, b) => history.requests[a]!.stageS[k]! - history.requests[b]!.stageS[k]!)
    index.push({ durations: Float64Array.from(order, i => history.requests[i]!.stageS[k]!), requests: Int32Array.from(order) })
  }
  durationIndexCache.set(history, index)
  return index
}

const offsetOrderCache = new WeakMap<BatchHistory, Int32Array>()

/** Indexes of history.requests by arrival offset, latest first (ties by index). */
function requestsByOffsetDescending (history: BatchHistory): Int32Array {
  let order = offsetOrderCache.get(history)
  if (order === undefined) {
    order = Int32Array.from(history.requests.keys()).sort((a, b) => history.requests[b]!.offsetS - history.requests[a]!.offsetS || a - b)
    offsetOrderCache.set(history, order)
  }
  return order
}

/** First index whose value is > `bound` in an ascending array (length when none). */
function firstAbove (sorted: Float64Array, bound: number): number {
  let lo = 0
  let hi = sorted.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (sorted[mid]! > bound) hi = mid
    else lo = mid + 1
  }
  return lo
}

function sum (values: readonly number[]): number {
  let total = 0
  for (const v of values) total += v
  return total
}
