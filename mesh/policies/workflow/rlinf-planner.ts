/**
 * RLinf's auto-placement search (§3.4 Algorithm 1 as toolkits/auto_placement
 * implements it) over a chain of components with RLinf's cost models
 * (rlinf-cost-models.ts): the plan RLinf would print for the same config.
 *
 * FindSchedule(V, g) for a contiguous part V of the chain on g GPUs tries
 * every cut of V into a source S and a sink T (data flows S → T):
 * - collocated: S then T on the same g GPUs; time = t_S + t_T;
 * - disaggregated (pipelined): S on the first g_S GPUs, T on the other
 *   g − g_S; time = W + max(b_S, b_T)·(N − 1), with b the time per group
 *   batch, N the group batches per iteration and W = b_S + b_T the warm-up
 *   of one group (for a side that is itself pipelined, its own warm-up).
 * Rules, each RLinf's choice rather than the paper's:
 * - g_S runs from 1 to g − 2 (RLinf's range(1, g − 1): the sink gets two GPUs at least).
 * - A collocated part used as one side of a pipeline takes the other part's time per group batch.
 * - Reasoning plans are pure: no collocated part inside a pipeline or the reverse.
 * - Embodied plans keep the actor (the chain's last component) on all of a part's GPUs.
 * - Ties go to the candidate tried last (RLinf's find_best_schedule).
 *
 * The search is exhaustive and memoised on (part, g) in typed arrays:
 * O(parts · G²) time without allocation, so 8,192 GPUs plan in well under a second.
 */
import { AgentError } from '../../../core/errors.ts'
import type { RlinfCostModel } from './rlinf-cost-models.ts'

export type RlinfMode = 'collocated' | 'disaggregated' | 'hybrid'

export interface RlinfPlacement {
  mode: RlinfMode
  /** Predicted seconds per iteration. */
  iterationS: number
  /** Per component, in data-flow order: its GPUs [start, end). */
  components: Array<{ name: string, gpus: [number, number] }>
  /** What to paste into RLinf's cluster.component_placement. */
  componentPlacement: Record<string, string>
}

export interface RlinfPlan extends RlinfPlacement {
  /** The best plan of each other (cut, schedule) at the top level, fastest first. */
  runnersUp: RlinfPlacement[]
}

const NONE = 0
const SINGLE = 1
const COLLOCATED = 2
const DISAGGREGATED = 3

interface Table {
  mode: Uint8Array
  iterationS: Float64Array
  /** Time per group batch when this part is a pipeline's source, and when it is its sink. */
  asSourceS: Float64Array
  asSinkS: Float64Array
  warmupS: Float64Array
  /** GPUs of the part's last component. */
  lastGpus: Int32Array
  cut: Int32Array
  sourceGpus: Int32Array
  /** The GPU counts it can be placed on, ascending (filled once the part is complete). */
  placeable: Int32Array
}

export function planRlinf (model: RlinfCostModel, taskType: 'reasoning' | 'embodied'): RlinfPlan {
  const comps = model.components
  const n = comps.length
  const G = model.totalGpus
  const N = model.groupBatches
  const pure = taskType === 'reasoning'
  const actorLast = taskType === 'embodied' && comps[n - 1]!.role === 'actor'
  const tables = new Map<number, Table>()
  const key = (i: number, j: number): number => i * (n + 1) + j
  const table = (i: number, j: number): Table => tables.get(key(i, j))!
  /** S then T on the same g GPUs: both placeable there, no pipeline inside a reasoning plan, an ending actor on all g. */
  const collocatedValid = (S: Table, T: Table, g: number, endsWithActor: boolean): boolean =>
    S.mode[g] !== NONE && T.mode[g] !== NONE && !(pure && (S.mode[g] === DISAGGREGATED || T.mode[g] === DISAGGREGATED)) && !(endsWithActor && T.lastGpus[g] !== g)
  /** S (mode sm) pipelined into T (mode tm): both placeable, no collocated part inside a reasoning pipeline. */
  const pipelineValid = (sm: number, tm: number): boolean => sm !== NONE && tm !== NONE && !(pure && (sm === COLLOCATED || tm === COLLOCATED))
  const newTable = (): Table => ({
    mode: new Uint8Array(G + 1),
    iterationS: new Float64Array(G + 1).fill(Infinity),
    asSourceS: new Float64Array(G + 1),
    asSinkS: new Float64Array(G + 1),
    warmupS: new Float64Array(G + 1),
    lastGpus: new Int32Array(G + 1),
    cut: new Int32Array(G + 1),
    sourceGpus: new Int32Array(G + 1),
    placeable: new Int32Array(0),
  })

  for (let length = 1; length <= n; length++) {
    for (let i = 0; i + length <= n; i++) {
      const j = i + length
      const t = newTable()
      tables.set(key(i, j), t)
      // The whole chain is only ever asked for all G GPUs; its parts for every count.
      for (let g = length === n ? G : 1; g <= G; g++) {
        if (length === 1) {
          const it = comps[i]!.iterationS[g]!
          if (Number.isNaN(it)) continue
          const b = comps[i]!.groupBatchS[g]!
          t.mode[g] = SINGLE
          t.iterationS[g] = it
          t.asSourceS[g] = b
          t.asSinkS[g] = b
          t.warmupS[g] = b
          t.lastGpus[g] = g
          continue
        }
        const endsWithActor = actorLast && j === n
        for (let k = i + 1; k < j; k++) {
          const S = table(i, k)
          const T = table(k, j)
          // Collocated: both on the same g GPUs.
          if (collocatedValid(S, T, g, endsWithActor)) {
            const it = S.iterationS[g]! + T.iterationS[g]!
            if (it <= t.iterationS[g]!) {
              t.mode[g] = COLLOCATED
              t.iterationS[g] = it
              t.asSourceS[g] = T.asSourceS[g]!
              t.asSinkS[g] = S.asSinkS[g]!
              t.warmupS[g] = T.asSourceS[g]!
              t.lastGpus[g] = T.lastGpus[g]!
              t.cut[g] = k
              t.sourceGpus[g] = g
            }
          }
          // Disaggregated: the source on [0, gs), the sink on [gs, g). An actor-ending sink never has all g.
          if (endsWithActor) continue
          // Over the counts the sparser side can take, in ascending gs either way (ties go to the last).
          const bySource = S.placeable.length <= T.placeable.length
          const counts = bySource ? S.placeable : T.placeable
          for (let c = 0; c < counts.length; c++) {
            const gs = bySource ? counts[c]! : g - counts[counts.length - 1 - c]!
            if (gs < 1 || gs > g - 2) continue
            const gt = g - gs
            const sm = S.mode[gs]!
            const tm = T.mode[gt]!
            if (!pipelineValid(sm, tm)) continue
            const bS = S.asSourceS[gs]!
            const bT = T.asSinkS[gt]!
            const warmup = (sm === DISAGGREGATED ? S.warmupS[gs]! : bS) + (tm === DISAGGREGATED ? T.warmupS[gt]! : bT)
            const slowest = Math.max(bS, bT)
            const it = warmup + slowest * (N - 1)
            if (it <= t.iterationS[g]!) {
              t.mode[g] = DISAGGREGATED
              t.iterationS[g] = it
              t.asSourceS[g] = slowest
              t.asSinkS[g] = slowest
              t.warmupS[g] = warmup
              t.lastGpus[g] = T.lastGpus[gt]!
              t.cut[g] = k
              t.sourceGpus[g] = gs
            }
          }
        }
      }
      t.placeable = Int32Array.from(t.mode.keys()).filter(g => t.mode[g] !== NONE)
    }
  }

  const top = table(0, n)
  if (top.mode[G] === NONE) {
    throw new AgentError('ERR_WORKFLOW_INVALID', `no valid placement on ${G} GPUs: ${comps.map(c => `${c.role} can be placed on ${placeableCounts(c.iterationS)}`).join('; ')}`)
  }
  const best = describe(0, n, G, top.cut[G]!, top.mode[G]!, top.sourceGpus[G]!)
  return { ...best, runnersUp: runnersUp(best) }

  /** The placement of part [i, j) on g GPUs when its top choice is (cut, mode, source GPUs). */
  function describe (i: number, j: number, g: number, cut: number, mode: number, gs: number): RlinfPlacement {
    const ranges: Array<{ c: number, lo: number, hi: number }> = []
    const modes = new Set<number>()
    const walk = (a: number, b: number, lo: number, count: number, choice?: { cut: number, mode: number, gs: number }): void => {
      const t = table(a, b)
      const m = choice?.mode ?? t.mode[count]!
      if (m === SINGLE) { ranges.push({ c: a, lo, hi: lo + count }); return }
      modes.add(m)
      const k = choice?.cut ?? t.cut[count]!
      if (m === COLLOCATED) { walk(a, k, lo, count); walk(k, b, lo, count); return }
      const s = choice?.gs ?? t.sourceGpus[count]!
      walk(a, k, lo, s)
      walk(k, b, lo + s, count - s)
    }
    walk(i, j, 0, g, { cut, mode, gs })
    const iterationS = iterationOf(i, j, g, cut, mode, gs)
    const placementMode: RlinfMode = modes.size > 1 ? 'hybrid' : modes.has(COLLOCATED) ? 'collocated' : 'disaggregated'
    const components = ranges.map(r => ({ name: comps[r.c]!.placementName, gpus: [r.lo, r.hi] as [number, number] }))
    return { mode: placementMode, iterationS, components, componentPlacement: componentPlacementOf(placementMode, components) }
  }

  /** The iteration time of one top-level choice (the memo keeps only the best of each part). */
  function iterationOf (i: number, j: number, g: number, k: number, mode: number, gs: number): number {
    const S = table(i, k)
    const T = table(k, j)
    if (mode === COLLOCATED) return S.iterationS[g]! + T.iterationS[g]!
    const bS = S.asSourceS[gs]!
    const bT = T.asSinkS[g - gs]!
    const warmup = (S.mode[gs] === DISAGGREGATED ? S.warmupS[gs]! : bS) + (T.mode[g - gs] === DISAGGREGATED ? T.warmupS[g - gs]! : bT)
    return warmup + Math.max(bS, bT) * (N - 1)
  }

  /** The best plan of every other (cut, schedule) at the top, each valid by the same rules. */
  function runnersUp (chosen: RlinfPlacement): RlinfPlacement[] {
    const out: RlinfPlacement[] = []
    for (let k = 1; k < n; k++) {
      const S = table(0, k)
      const T = table(k, n)
      if (collocatedValid(S, T, G, actorLast)) out.push(describe(0, n, G, k, COLLOCATED, G))
      if (actorLast) continue
      let bestGs = -1
      let bestS = Infinity
      for (let gs = 1; gs <= G - 2; gs++) {
        if (!pipelineValid(S.mode[gs]!, T.mode[G - gs]!)) continue
        const it = iterationOf(0, n, G, k, DISAGGREGATED, gs)
        if (it <= bestS) { bestS = it; bestGs = gs }
      }
      if (bestGs > 0) out.push(describe(0, n, G, k, DISAGGREGATED, bestGs))
    }
    const same = (p: RlinfPlacement): boolean => JSON.stringify(p.components) === JSON.stringify(chosen.components)
    return out.filter(p => !same(p)).sort((a, b) => a.iterationS - b.iterationS)
  }
}

/**
 * RLinf's cluster.component_placement for a plan: a pure collocated plan as
 * "<components but inference>: all" (RLinf runs logprob inference in the
 * actor's group then), anything else range by range ("rollout: 0-79").
 */
export function componentPlacementOf (mode: RlinfMode, components: ReadonlyArray<{ name: string, gpus: readonly [number, number] }>): Record<string, string> {
  if (mode === 'collocated') return { [components.filter(c => c.name !== 'inference').map(c => c.name).join(',')]: 'all' }
  return Object.fromEntries(components.map(c => [c.name, `${c.gpus[0]}-${c.gpus[1] - 1}`]))
}

/** "1-4, 8, 16 GPUs": the counts a component's table allows, compressed into runs. */
function placeableCounts (iterationS: Float64Array): string {
  const counts = [...iterationS.keys()].filter(g => g > 0 && !Number.isNaN(iterationS[g]!))
  if (counts.length === 0) return 'no GPU count'
  const runs: string[] = []
  for (let a = 0; a < counts.length;) {
    let b = a
    while (b + 1 < counts.length && counts[b + 1] === counts[b]! + 1) b++
    runs.push(a === b ? String(counts[a]) : `${counts[a]}-${counts[b]}`)
    a = b + 1
  }
  return `${runs.join(', ')} GPUs`
}
