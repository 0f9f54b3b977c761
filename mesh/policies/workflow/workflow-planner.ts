/**
 * The profiling-guided workflow planner of RLinf §3.4 (Algorithm 1): a pure
 * function from a profiled workflow graph (workflow-input.ts) to GPU ranges
 * per component, the execution mode of every cut and the pipeline
 * granularity.
 *
 * - Cycles are collapsed first (strongly connected components). A collapsed
 *   node's GPUs are split evenly among its members, which run concurrently:
 *   its time is the slowest member's (RLinf: "its computation is evenly
 *   partitioned across GPUs").
 * - FindSchedule(V, g, B) = the best time to push a batch of B samples
 *   through the subgraph V on g GPUs. It tries every s–t cut (S, T) of V
 *   where S is closed under predecessors (data flows S → T) and both
 *   schedules, recursing until one node is left:
 *   temporal (collocated): S then T on the same g GPUs,
 *     time = F(S, g, B) + F(T, g, B) + switch,
 *     switch = Σ (offloadS + onloadS) of the components of S ∪ T not yet
 *     charged, when their memory does not co-reside on g GPUs, else 0;
 *   spatial (disaggregated, pipelined) with g_S + g_T = g and granularity m:
 *     time = W + t_max · B / m, with t_S = F(S, g_S, m), t_T = F(T, g_T, m),
 *     t_max = max(t_S, t_T) and W = t_S + t_T − t_max (warm-up and
 *     cool-down of a two-stage pipeline). This is RLinf's formula whose
 *     symbols were lost from the text: W + T_slowest × B/m.
 *   A single component on g GPUs processes the batch in chunks of its best
 *   profiled granularity m (dividing B): (B / m) · t(g, m).
 * - Feasibility: a component needs g >= minGpus and memoryGiB / g <= the
 *   GPU memory. GPU counts are multiples of gpuStep.
 * - Memoised on (V, g, B); V has at most 8 nodes.
 */
import { AgentError } from '../../../core/errors.ts'
import type { Workflow, WorkflowComponent } from './workflow-input.ts'

export type WorkflowPlanNode =
  | { kind: 'component', name: string, gpus: number, timeS: number, granularity: number }
  | { kind: 'cycle', members: WorkflowPlanNode[], gpus: number, timeS: number }
  | { kind: 'temporal', first: WorkflowPlanNode, second: WorkflowPlanNode, gpus: number, timeS: number, switchS: number }
  | { kind: 'spatial', first: WorkflowPlanNode, second: WorkflowPlanNode, gpus: number, timeS: number, granularity: number }

export interface WorkflowPlan {
  /** Predicted time of one iteration (one batch through the workflow), seconds. */
  iterationS: number
  /** Granularity of the outermost pipelined cut; the batch size when nothing is pipelined. */
  granularity: number
  /** Per component: its GPU range [start, end) and whether it shares those GPUs with another component. */
  components: Array<{ name: string, gpus: [number, number], mode: 'collocated' | 'disaggregated' }>
  plan: WorkflowPlanNode
}

interface Best { timeS: number, node: WorkflowPlanNode, charged: ReadonlySet<number> }

export function planWorkflow (workflow: Workflow): WorkflowPlan {
  const comps = workflow.components
  const index = new Map(comps.map((c, i) => [c.name, i]))
  const step = workflow.gpuStep ?? 1
  const cap = workflow.gpuMemoryGiB

  // Collapse cycles: strongly connected components by mutual reachability.
  const n = comps.length
  const reach = Array.from({ length: n }, (_, i) => Array.from({ length: n }, (_, j) => i === j))
  for (const e of workflow.edges) reach[index.get(e.from)!]![index.get(e.to)!] = true
  for (let k = 0; k < n; k++) for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) if (reach[i]![k] && reach[k]![j]) reach[i]![j] = true
  const sccOf = new Array<number>(n).fill(-1)
  const sccs: number[][] = []
  for (let i = 0; i < n; i++) {
    if (sccOf[i] !== -1) continue
    const members = [...Array(n).keys()].filter(j => reach[i]![j] && reach[j]![i])
    for (const j of members) sccOf[j] = sccs.length
    sccs.push(members)
  }
  const preds = sccs.map(() => 0)
  for (const e of workflow.edges) {
    const a = sccOf[index.get(e.from)!]!
    const b = sccOf[index.get(e.to)!]!
    if (a !== b) preds[b]! |= 1 << a
  }
  const granularities = [...new Set(comps.flatMap(c => c.profile.map(p => p.granularity)))].sort((a, b) => a - b)
  const memo = new Map<string, Best | null>()

  const membersOf = (mask: number): number[] => sccs.flatMap((m, s) => (mask >> s) & 1 ? m : [])
  const memoryOf = (mask: number): number => membersOf(mask).reduce((sum, c) => sum + comps[c]!.memoryGiB, 0)

  function componentTime (c: WorkflowComponent, g: number, batch: number): { timeS: number, granularity: number } | undefined {
    if (g < (c.minGpus ?? 1) || c.memoryGiB / g > cap) return undefined
    let best: { timeS: number, granularity: number } | undefined
    for (const m of new Set(c.profile.map(p => p.granularity))) {
      if (m > batch || batch % m !== 0) continue
      const t = (batch / m) * chunkSeconds(c, g, m)
      if (best === undefined || t < best.timeS) best = { timeS: t, granularity: m }
    }
    return best
  }

  function leaf (s: number, g: number, batch: number): Best | undefined {
    const members = sccs[s]!
    if (members.length === 1) {
      const c = comps[members[0]!]!
      const t = componentTime(c, g, batch)
      return t === undefined ? undefined : { timeS: t.timeS, node: { kind: 'component', name: c.name, gpus: g, timeS: t.timeS, granularity: t.granularity }, charged: new Set() }
    }
    // Even partition of the cycle's GPUs (in gpuStep units; the remainder goes to the first members).
    const units = Math.floor(g / step)
    if (units < members.length) return undefined
    const nodes: WorkflowPlanNode[] = []
    let timeS = 0
    for (const [k, c] of members.entries()) {
      const share = (Math.floor(units / members.length) + (k < units % members.length ? 1 : 0)) * step
      const t = componentTime(comps[c]!, share, batch)
      if (t === undefined) return undefined
      nodes.push({ kind: 'component', name: comps[c]!.name, gpus: share, timeS: t.timeS, granularity: t.granularity })
      timeS = Math.max(timeS, t.timeS)
    }
    return { timeS, node: { kind: 'cycle', members: nodes, gpus: g, timeS }, charged: new Set() }
  }

  function findSchedule (mask: number, g: number, batch: number): Best | undefined {
    const key = `${mask}|${g}|${batch}`
    if (memo.has(key)) return memo.get(key) ?? undefined
    let best: Best | undefined
    if ((mask & (mask - 1)) === 0) {
      best = leaf(31 - Math.clz32(mask), g, batch)
    } else {
      for (let s = (mask - 1) & mask; s > 0; s = (s - 1) & mask) {
        if (!closedUnderPredecessors(s, mask)) continue
        const t = mask & ~s
        // Temporal: S then T on the same GPUs.
        const a = findSchedule(s, g, batch)
        const b = a === undefined ? undefined : findSchedule(t, g, batch)
        if (a !== undefined && b !== undefined) {
          const coResident = (memoryOf(s) + memoryOf(t)) / g <= cap
          const charged = new Set([...a.charged, ...b.charged])
          let switchS = 0
          if (!coResident) {
            for (const c of membersOf(mask)) {
              if (charged.has(c)) continue
              switchS += (comps[c]!.offloadS ?? 0) + (comps[c]!.onloadS ?? 0)
              charged.add(c)
            }
          }
          const timeS = a.timeS + b.timeS + switchS
          if (best === undefined || timeS < best.timeS) best = { timeS, node: { kind: 'temporal', first: a.node, second: b.node, gpus: g, timeS, switchS }, charged }
        }
        // Spatial: disjoint GPUs, pipelined at granularity m.
        for (let gs = step; gs <= g - step; gs += step) {
          for (const m of granularities) {
            if (m > batch || batch % m !== 0) continue
            const x = findSchedule(s, gs, m)
            if (x === undefined) continue
            const y = findSchedule(t, g - gs, m)
            if (y === undefined) continue
            const slowest = Math.max(x.timeS, y.timeS)
            const timeS = x.timeS + y.timeS - slowest + slowest * (batch / m)
            if (best === undefined || timeS < best.timeS) {
              best = { timeS, node: { kind: 'spatial', first: x.node, second: y.node, gpus: g, timeS, granularity: m }, charged: new Set([...x.charged, ...y.charged]) }
            }
          }
        }
      }
    }
    memo.set(key, best ?? null)
    return best
  }

  function closedUnderPredecessors (s: number, mask: number): boolean {
    for (let v = 0; v < sccs.length; v++) {
      if (((s >> v) & 1) === 0) continue
      if ((preds[v]! & mask & ~s) !== 0) return false
    }
    return true
  }

  const all = (1 << sccs.length) - 1
  const gpus = Math.floor(workflow.gpus / step) * step
  const best = gpus === 0 ? undefined : findSchedule(all, gpus, workflow.batchSize)
  if (best === undefined) {
    throw new AgentError('ERR_WORKFLOW_INVALID', `no feasible placement of the workflow on ${workflow.gpus} GPUs of ${cap} GiB: some component needs more GPUs (minGpus, memoryGiB / gpuMemoryGiB) or lacks a profile at a usable granularity`)
  }

  const ranges = new Map<string, [number, number]>()
  const assign = (node: WorkflowPlanNode, lo: number): void => {
    switch (node.kind) {
      case 'component': ranges.set(node.name, [lo, lo + node.gpus]); break
      case 'cycle': { let at = lo; for (const m of node.members) { assign(m, at); at += m.gpus } break }
      case 'temporal': assign(node.first, lo); assign(node.second, lo); break
      case 'spatial': assign(node.first, lo); assign(node.second, lo + node.first.gpus); break
    }
  }
  assign(best.node, 0)
  const components = comps.map(c => {
    const r = ranges.get(c.name)!
    const shared = [...ranges].some(([other, o]) => other !== c.name && o[0] < r[1] && r[0] < o[1])
    return { name: c.name, gpus: r, mode: shared ? 'collocated' as const : 'disaggregated' as const }
  })
  return { iterationS: best.timeS, granularity: outermostGranularity(best.node) ?? workflow.batchSize, components, plan: best.node }
}

function outermostGranularity (node: WorkflowPlanNode): number | undefined {
  if (node.kind === 'spatial') return node.granularity
  if (node.kind === 'temporal') return outermostGranularity(node.first) ?? outermostGranularity(node.second)
  return undefined
}

/** Seconds for g GPUs to process one chunk of m samples: linear between profiled GPU counts, 1/g scaling outside. */
export function chunkSeconds (c: WorkflowComponent, g: number, m: number): number {
  const points = c.profile.filter(p => p.granularity === m).sort((a, b) => a.gpus - b.gpus)
  if (points.length === 0) return Infinity
  const exact = points.find(p => p.gpus === g)
  if (exact !== undefined) return exact.seconds
  const below = points.filter(p => p.gpus < g).at(-1)
  const above = points.find(p => p.gpus > g)
  if (below !== undefined && above !== undefined) {
    const f = (g - below.gpus) / (above.gpus - below.gpus)
    return below.seconds + f * (above.seconds - below.seconds)
  }
  const nearest = (below ?? above)!
  return nearest.seconds * nearest.gpus / g
}
