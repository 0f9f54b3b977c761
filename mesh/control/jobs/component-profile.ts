/**
 * A live job's run times per workflow component (RLinf §3.4's profile,
 * measured instead of entered by hand): what `agentctl plan workflow --job`
 * plans from.
 *
 * - An operation submitted with `component` (rollout, inference, actor; env,
 *   env_rollout) is recorded under (component, GPUs of its job, its
 *   `granularity`: environments per instance for env and env_rollout, the
 *   batch otherwise; none when not given) with its run time (the slowest
 *   rank's, as the scheduler measures it).
 * - A component's time per iteration is the sum of its operations carrying
 *   the same `iteration`; an operation without one is an iteration of its own.
 * - Each (component, GPUs, granularity) keeps its latest `keptIterations`
 *   iterations (the profile follows the job as it warms up; memory stays
 *   bounded however long the job runs). The figure given is their mean.
 * - At most `keptSeries` series per job: a new one beyond that replaces the
 *   one least recently added to (a controller that sends a new granularity
 *   with every operation costs the leader bounded memory).
 * Operations without `component` are not recorded here.
 */
import type { ComponentSample } from '../../policies/workflow/measured-profile-data.ts'

export type { ComponentSample }

export interface ComponentProfile {
  record(op: { component: string, iteration?: number, granularity?: number }, gpus: number, runMs: number): void
  samples(): ComponentSample[]
}

/** Iterations kept per (component, GPUs, granularity). */
export const keptIterations = 64
/** Series (component, GPUs, granularity) kept per job. */
export const keptSeries = 64

export function createComponentProfile (): ComponentProfile {
  const series = new Map<string, { component: string, gpus: number, granularity: number | null, iterations: Map<string, { ms: number, ops: number }> }>()
  let unnumbered = 0
  return {
    record (op, gpus, runMs) {
      const granularity = op.granularity ?? null
      const key = JSON.stringify([op.component, gpus, granularity])
      const s = touch(series, key, keptSeries, () => ({ component: op.component, gpus, granularity, iterations: new Map() }))
      const entry = touch(s.iterations, op.iteration !== undefined ? `i${op.iteration}` : `op${unnumbered++}`, keptIterations, () => ({ ms: 0, ops: 0 }))
      entry.ms += runMs
      entry.ops++
    },
    samples () {
      return [...series.values()].map(s => {
        const all = [...s.iterations.values()]
        return {
          component: s.component,
          gpus: s.gpus,
          granularity: s.granularity,
          iterations: all.length,
          ops: all.reduce((n, e) => n + e.ops, 0),
          iterationMs: all.reduce((n, e) => n + e.ms, 0) / all.length,
        }
      }).sort((a, b) => a.component.localeCompare(b.component) || a.gpus - b.gpus || (a.granularity ?? 0) - (b.granularity ?? 0))
    },
  }
}

/** The entry of `key` (made by `create` if new), moved last in `map`'s order; the first entries go beyond `bound`: map order is least recently touched first. */
function touch<V> (map: Map<string, V>, key: string, bound: number, create: () => V): V {
  const value = map.get(key) ?? create()
  map.delete(key)
  map.set(key, value)
  if (map.size > bound) map.delete(map.keys().next().value!)
  return value
}
