/**
 * SIMULATE(Num, R, S, D) of DistRS Algorithm 1 (§5.1) with the §5.2
 * extensions: several batches share the workers, each stage's queue is
 * served Earliest-Batch-First (or FCFS), and the timeout-aware check fails an
 * allocation as soon as a queued request could push its batch past T + D.
 *
 * Semantics (shared with the replay simulator, mesh/sim/reward-sim.ts):
 * - A request visits the stages in pipeline order and skips a stage whose time
 *   is 0; a worker serves one request at a time, without preemption.
 * - At one instant, every completion and arrival is applied first, then free
 *   workers take queued requests in queue order. A request still waiting after
 *   that is "found queued" at this instant (the timeout check's ts).
 * - A Running_k request keeps its worker: it starts at once at its first stage
 *   even when the stage has fewer workers than running requests.
 * - Batch b meets the constraint when it completes by its deadline: T_b + D
 *   with T_b its T estimated at its start (Eq. 1–2), or E_b if later, the
 *   earliest completion of its estimated requests without queuing (Alg. 1's
 *   d <= D when there is no start estimate: deadline E_b + D).
 *
 * The stages form a tandem line (stage k's arrivals are stage k−1's
 * completions, no feedback), so each stage is swept once in pipeline order;
 * the result equals an event-by-event simulation of all stages together (the
 * tests check it against the replay simulator). Inside a stage, requests of
 * one batch are served in the order they entered its queue, so the queue is
 * one FIFO per batch (EBF picks the non-empty FIFO of the earliest batch) or a
 * single FIFO (FCFS); the busy workers are a min-heap of finish times, which
 * pops completions in time order: the next stage's arrival order, no sort.
 */
import type { EstimatedRequest, QueueDiscipline, RewardStage } from './types.ts'

export interface BatchSimulationInput {
  readonly stages: readonly RewardStage[]
  readonly requests: readonly EstimatedRequest[]
  /** EBF priority of each batch index used by `requests[].batch` (its estimated completion, s). */
  readonly batchPriorityS: readonly number[]
  /**
   * Per batch, its T estimated when it started (Eq. 1–2), seconds. The batch
   * must then complete by max(T + D, E_b), E_b the earliest completion of its
   * estimated requests without queuing: a later decision neither forgives
   * delay already incurred nor demands the impossible. Without it the
   * deadline is E_b + D.
   */
  readonly batchEarliestS?: readonly number[]
  /** D, seconds. */
  readonly maxExtraDelayS: number
  readonly discipline: QueueDiscipline
  /** Apply the timeout-aware check (DistRS §5.1, LT = ts + Σ_{j>=k} T_j > T + D fails). */
  readonly timeoutAware: boolean
}

export interface SimulationOutcome {
  /** True when every batch meets its deadline and no timeout check failed. */
  readonly satisfied: boolean
  /** The first timeout-check failure, if any. */
  readonly timeoutViolation: { request: number, stage: number, atS: number } | null
  /** Per batch index: simulated completion (−Infinity for a batch without requests). Complete only when the run was not stopped early. */
  readonly batchCompletionS: readonly number[]
  /** Per batch index: E_b, earliest completion of its estimated requests without queuing. */
  readonly batchEarliestS: readonly number[]
  /** Per request: completion of its last stage. */
  readonly requestCompletionS: Float64Array
  /** Per request and stage: start time (NaN when the stage is skipped). */
  readonly stageStartS: readonly Float64Array[]
}

export interface BatchSimulation {
  /** Requests that need each stage (time > 0): the upper bound B of Alg. 1 line 9. */
  readonly stageDemand: readonly number[]
  /** Alg. 1's SIMULATE: stops at the first violation. */
  meetsConstraint(workers: readonly number[]): boolean
  /** A full run for inspection (does not stop at a timeout-check failure). */
  run(workers: readonly number[]): SimulationOutcome
}

const EPSILON_S = 1e-9

export function prepareBatchSimulation (input: BatchSimulationInput): BatchSimulation {
  const { stages, requests } = input
  const n = requests.length
  const stageCount = stages.length
  const batchCount = input.batchPriorityS.length
  const durations = stages.map((_, k) => Float64Array.from(requests, r => r.stageS[k] ?? 0))
  const arrivalS = Float64Array.from(requests, r => r.readyS)
  const batchOf = Int32Array.from(requests, r => r.batch)
  const firstStage = Int32Array.from(requests, r => { const k = r.stageS.findIndex(s => s > 0); return k === -1 ? stageCount : k })
  const running = Uint8Array.from(requests, r => r.running ? 1 : 0)
  const queuedSinceS = Float64Array.from(requests, r => r.queuedSinceS ?? r.readyS)
  const priority = Float64Array.from(input.batchPriorityS)

  // Σ_{j>=k} T_j of the timeout check.
  const timeoutFromStage = new Float64Array(stageCount + 1)
  for (let k = stageCount - 1; k >= 0; k--) timeoutFromStage[k] = timeoutFromStage[k + 1]! + stages[k]!.timeoutS
  const earliestS = new Float64Array(batchCount).fill(-Infinity)
  for (let i = 0; i < n; i++) {
    let t = arrivalS[i]!
    for (let k = 0; k < stageCount; k++) t += durations[k]![i]!
    const b = batchOf[i]!
    if (b < 0 || b >= batchCount) throw new RangeError(`request ${i} names batch ${b}, but there are ${batchCount} batches`)
    if (t > earliestS[b]!) earliestS[b] = t
  }
  const deadlineS = earliestS.map((e, b) => {
    const startEstimateS = input.batchEarliestS?.[b]
    return startEstimateS === undefined ? e + input.maxExtraDelayS : Math.max(startEstimateS + input.maxExtraDelayS, e)
  })
  const stageDemand = durations.map(d => d.reduce((count, s) => count + (s > 0 ? 1 : 0), 0))

  // Arrival order at the first stage: ready time, then queue entry (requests
  // already waiting keep their rank), then index.
  const initialOrder = Int32Array.from(requests.keys()).sort((a, b) =>
    arrivalS[a]! - arrivalS[b]! || queuedSinceS[a]! - queuedSinceS[b]! || a - b)
  const lastStage = Int32Array.from(requests, r => { let k = stageCount - 1; while (k >= 0 && !((r.stageS[k] ?? 0) > 0)) k--; return k })
  // Queue class of a request: its batch's EBF rank (batches by priority, then
  // index), or 0 for FCFS. Per stage, each class owns a segment of `fifo`.
  const classCount = input.discipline === 'ebf' ? batchCount : 1
  const batchRank = new Int32Array(batchCount)
  Array.from(priority.keys()).sort((a, b) => priority[a]! - priority[b]! || a - b).forEach((b, rank) => { batchRank[b] = rank })
  const classOf = Int32Array.from(batchOf, b => input.discipline === 'ebf' ? batchRank[b]! : 0)
  const classStart = durations.map(duration => {
    const starts = new Int32Array(classCount + 1)
    for (let i = 0; i < n; i++) if (duration[i]! > 0) starts[classOf[i]! + 1]!++
    for (let c = 0; c < classCount; c++) starts[c + 1]! += starts[c]!
    return starts
  })

  // Scratch, reused by every run.
  const readyS = new Float64Array(n)
  let order = new Int32Array(n)
  let nextOrder = new Int32Array(n)
  const fifo = new Int32Array(n)
  const head = new Int32Array(classCount)
  const tail = new Int32Array(classCount)
  const started = new Uint8Array(n)
  const newcomers = new Int32Array(n)
  const passing = new Int32Array(n)
  const done = new Int32Array(n)
  // Busy workers: min-heap of (finish time, request), ties by request index.
  const heapTime = new Float64Array(n)
  const heapRequest = new Int32Array(n)
  let heapSize = 0

  function heapPush (t: number, i: number): void {
    let at = heapSize++
    while (at > 0) {
      const parent = (at - 1) >> 1
      if (heapTime[parent]! < t || (heapTime[parent]! === t && heapRequest[parent]! < i)) break
      heapTime[at] = heapTime[parent]!
      heapRequest[at] = heapRequest[parent]!
      at = parent
    }
    heapTime[at] = t
    heapRequest[at] = i
  }

  /** Removes the top (earliest finish); returns its request. */
  function heapPop (): number {
    const top = heapRequest[0]!
    const t = heapTime[--heapSize]!
    const i = heapRequest[heapSize]!
    let at = 0
    for (;;) {
      let child = 2 * at + 1
      if (child >= heapSize) break
      const right = child + 1
      if (right < heapSize && (heapTime[right]! < heapTime[child]! || (heapTime[right]! === heapTime[child]! && heapRequest[right]! < heapRequest[child]!))) child = right
      if (t < heapTime[child]! || (t === heapTime[child]! && i < heapRequest[child]!)) break
      heapTime[at] = heapTime[child]!
      heapRequest[at] = heapRequest[child]!
      at = child
    }
    heapTime[at] = t
    heapRequest[at] = i
    return top
  }

  let starts: Float64Array[] | null = null
  // State after stage k of the last run that got through stage k without a
  // violation, keyed by workers[0..k]: Alg. 1 changes one stage at a time, so
  // the stages before it repeat exactly and are restored instead of re-swept.
  const afterStage = stages.map(() => ({ valid: false, workers: new Array<number>(0), readyS: new Float64Array(n), order: new Int32Array(n) }))
  type Violation = SimulationOutcome['timeoutViolation']

  /**
   * Sweeps every stage; returns null when all batches meet their deadlines,
   * else why not. With `stopEarly` it returns at the first violation found (a
   * timeout-check failure, or a request finishing past its batch's deadline).
   */
  function simulate (workers: readonly number[], stopEarly: boolean): { ok: boolean, violation: Violation } {
    if (workers.length !== stageCount) throw new RangeError(`need ${stageCount} worker counts, got ${workers.length}`)
    let resumeAt = 0
    if (starts === null) {
      while (resumeAt < stageCount && afterStage[resumeAt]!.valid && afterStage[resumeAt]!.workers.every((w, j) => w === workers[j])) resumeAt++
    }
    if (resumeAt === 0) {
      readyS.set(arrivalS)
      order.set(initialOrder)
    } else {
      readyS.set(afterStage[resumeAt - 1]!.readyS)
      order.set(afterStage[resumeAt - 1]!.order)
    }
    for (let k = resumeAt; k < stageCount; k++) afterStage[k]!.valid = false
    let violation: Violation = null
    let late = false
    for (let k = resumeAt; k < stageCount; k++) {
      const duration = durations[k]!
      const segments = classStart[k]!
      head.set(segments.subarray(0, classCount))
      tail.set(segments.subarray(0, classCount))
      heapSize = 0
      let free = workers[k]!
      let passCount = 0
      let doneCount = 0
      let waitingCount = 0
      let p = 0
      // Skips requests that pass this stage; they keep their time and order.
      const nextEntering = (): number => {
        while (p < n && !(duration[order[p]!]! > 0)) passing[passCount++] = order[p++]!
        return p < n ? order[p]! : -1
      }
      const startAt = (i: number, atS: number): boolean => {
        if (starts !== null) starts[k]![i] = atS
        readyS[i] = atS + duration[i]!
        heapPush(readyS[i]!, i)
        free--
        return k === lastStage[i] && readyS[i]! > deadlineS[batchOf[i]!]! + EPSILON_S
      }
      for (;;) {
        const candidate = nextEntering()
        const arrivalAt = candidate === -1 ? Infinity : readyS[candidate]!
        if (candidate === -1 && waitingCount === 0) break
        const now = waitingCount > 0 && free <= 0 ? Math.min(arrivalAt, heapSize > 0 ? heapTime[0]! : Infinity) : arrivalAt
        if (now === Infinity) {
          // No worker will ever free up (0 workers at the stage): the rest never completes.
          for (let c = 0; c < classCount; c++) while (head[c]! < tail[c]!) readyS[fifo[head[c]!++]!] = Infinity
          late = true
          if (stopEarly) return { ok: false, violation }
          break
        }
        while (heapSize > 0 && heapTime[0]! <= now) { done[doneCount++] = heapPop(); free++ }
        let newcomerCount = 0
        for (let i = nextEntering(); i !== -1 && readyS[i]! <= now; i = nextEntering()) {
          p++
          if (running[i] === 1 && firstStage[i] === k) {
            // A Running_k request holds its worker already: it starts at once.
            if (startAt(i, now)) { late = true; if (stopEarly) return { ok: false, violation } }
          } else {
            fifo[tail[classOf[i]!]!++] = i
            waitingCount++
            started[i] = 0
            newcomers[newcomerCount++] = i
          }
        }
        for (let c = 0; free > 0 && waitingCount > 0; c++) {
          while (free > 0 && head[c]! < tail[c]!) {
            const i = fifo[head[c]!++]!
            waitingCount--
            started[i] = 1
            if (startAt(i, now)) { late = true; if (stopEarly) return { ok: false, violation } }
          }
        }
        if (input.timeoutAware && violation === null) {
          for (let c = 0; c < newcomerCount; c++) {
            const i = newcomers[c]!
            // Found queued at `now`: LT = now + Σ_{j>=k} T_j must not exceed the batch's deadline.
            if (started[i] === 0 && now + timeoutFromStage[k]! > deadlineS[batchOf[i]!]! + EPSILON_S) {
              violation = { request: i, stage: k, atS: now }
              if (stopEarly) return { ok: false, violation }
              break
            }
          }
        }
      }
      while (heapSize > 0) done[doneCount++] = heapPop()
      // Next stage's arrival order: merge the passing requests and the completions (both in time order).
      let a = 0
      let b = 0
      let out = 0
      while (a < passCount || b < doneCount) {
        const takePassing = b === doneCount || (a < passCount && readyS[passing[a]!]! <= readyS[done[b]!]!)
        nextOrder[out++] = takePassing ? passing[a++]! : done[b++]!
      }
      // Requests that never got a worker (0 workers) keep Infinity and go last.
      for (let c = 0; c < classCount; c++) for (let q = segments[c]!; q < head[c]!; q++) if (readyS[fifo[q]!] === Infinity) nextOrder[out++] = fifo[q]!
      const swap = order; order = nextOrder; nextOrder = swap
      if (violation === null && !late) {
        const saved = afterStage[k]!
        saved.valid = true
        saved.workers = workers.slice(0, k + 1)
        saved.readyS.set(readyS)
        saved.order.set(order)
      }
    }
    return { ok: violation === null && !late, violation }
  }

  return {
    stageDemand,
    meetsConstraint (workers) {
      starts = null
      return simulate(workers, true).ok
    },
    run (workers) {
      const stageStartS = stages.map(() => new Float64Array(n).fill(Number.NaN))
      starts = stageStartS
      const { ok, violation } = simulate(workers, false)
      starts = null
      const completion = new Array<number>(batchCount).fill(-Infinity)
      for (let i = 0; i < n; i++) completion[batchOf[i]!] = Math.max(completion[batchOf[i]!]!, readyS[i]!)
      return {
        satisfied: ok,
        timeoutViolation: violation,
        batchCompletionS: completion,
        batchEarliestS: Array.from(earliestS),
        requestCompletionS: Float64Array.from(readyS),
        stageStartS,
      }
    },
  }
}
