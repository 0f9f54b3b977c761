/**
 * The measured iteration time of a workflow job (placement auto): the span
 * of each iteration from its first operation's admission to its last
 * operation's end, over all of the job's worker groups, what the planner's
 * predicted iteration time (workflow-layout.ts) is compared with.
 *
 * Contract: operations carry their `iteration`. An iteration counts once a
 * later one has started (an RL loop starts iteration i + 1 after i's
 * update), or, the latest one, once the caller says nothing of the job is
 * queued or running; its span still grows if one of its operations ends
 * later. The latest `keptIterations` are kept and the figure is their mean
 * span.
 */
export interface IterationClock {
  started(iteration: number, atMs: number): void
  ended(iteration: number, atMs: number): void
  /** Mean span of the finished iterations kept; null before one finished. `idle`: the latest one finished too. */
  measured(idle?: boolean): { iterations: number, meanMs: number } | null
}

export const keptIterations = 64

export function createIterationClock (): IterationClock {
  const spans = new Map<number, { startMs: number, endMs: number }>()
  let latest = -1
  return {
    started (iteration, atMs) {
      const span = spans.get(iteration)
      if (span === undefined) {
        spans.set(iteration, { startMs: atMs, endMs: atMs })
        while (spans.size > keptIterations) spans.delete(Math.min(...spans.keys()))
      } else {
        span.startMs = Math.min(span.startMs, atMs)
      }
      latest = Math.max(latest, iteration)
    },
    ended (iteration, atMs) {
      const span = spans.get(iteration)
      if (span !== undefined) span.endMs = Math.max(span.endMs, atMs)
    },
    measured (idle = false) {
      const done = [...spans].filter(([i]) => i < latest || idle).map(([, s]) => s.endMs - s.startMs)
      return done.length === 0 ? null : { iterations: done.length, meanMs: done.reduce((a, b) => a + b, 0) / done.length }
    },
  }
}
