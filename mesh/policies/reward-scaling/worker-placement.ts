/**
 * Places a scaling decision's workers per stage (DistRS Alg. 1 output) on the
 * nodes of the cluster, within each node's resources: a cpu-stage worker
 * holds coresPerWorker cores, a gpu-stage worker one whole GPU. Pure.
 *
 * Rules:
 * - Sticky: a worker already placed stays where it is while its stage still
 *   wants it and its node still fits it (a move costs a worker start).
 * - Scaling a stage down removes workers from the node with the most of that
 *   stage first (ties: the larger node id), so the stage stays spread.
 * - Scaling up fills stages in descending cost (gpu workers are scarce), each
 *   new worker on the node with the most free units of its resource (ties:
 *   the smaller node id), among nodes that run the stage.
 * - What fits nowhere is reported in `unplaced`, never over-committed.
 */

export interface PlacementStage {
  readonly name: string
  readonly resource: 'cpu' | 'gpu'
  /** Cores one worker of a cpu stage holds (ignored for gpu). */
  readonly coresPerWorker: number
  readonly cost: number
}

export interface PlacementNode {
  readonly id: string
  readonly cpuCores: number
  readonly gpus: number
  /** Stages the node can run workers of. */
  readonly stages: readonly string[]
}

/** Workers per stage name, per node id. */
export type WorkerAssignment = Record<string, Record<string, number>>

export interface PlacementResult {
  workers: WorkerAssignment
  /** Workers per stage name that fit on no node. */
  unplaced: Record<string, number>
}

export function placeRewardWorkers (stages: readonly PlacementStage[], wanted: readonly number[], nodes: readonly PlacementNode[], current: WorkerAssignment): PlacementResult {
  const byId = [...nodes].sort((a, b) => a.id < b.id ? -1 : a.id > b.id ? 1 : 0)
  const counts = new Map<string, number[]>(byId.map(n => [n.id, stages.map(s => n.stages.includes(s.name) ? Math.max(0, Math.floor(current[n.id]?.[s.name] ?? 0)) : 0)]))
  const units = (stage: PlacementStage): number => stage.resource === 'gpu' ? 1 : stage.coresPerWorker
  const used = (node: PlacementNode, resource: 'cpu' | 'gpu'): number =>
    stages.reduce((sum, s, j) => s.resource === resource ? sum + counts.get(node.id)![j]! * units(s) : sum, 0)
  const capacity = (node: PlacementNode, resource: 'cpu' | 'gpu'): number => resource === 'gpu' ? node.gpus : node.cpuCores

  // A node whose capacity shrank sheds workers, cheapest stages first.
  const cheapestFirst = stages.map((s, j) => ({ s, j })).sort((a, b) => a.s.cost - b.s.cost || b.j - a.j)
  for (const node of byId) {
    for (const resource of ['cpu', 'gpu'] as const) {
      for (const { s, j } of cheapestFirst) {
        const c = counts.get(node.id)!
        while (s.resource === resource && c[j]! > 0 && used(node, resource) > capacity(node, resource)) c[j]!--
      }
    }
  }

  const unplaced: Record<string, number> = {}
  const costliestFirst = stages.map((s, j) => ({ s, j })).sort((a, b) => b.s.cost - a.s.cost || a.j - b.j)
  for (const { s, j } of costliestFirst) {
    const want = Math.max(0, Math.floor(wanted[j] ?? 0))
    let have = byId.reduce((sum, n) => sum + counts.get(n.id)![j]!, 0)
    while (have > want) {
      let most: PlacementNode | undefined
      for (const n of byId) if (counts.get(n.id)![j]! > 0 && (most === undefined || counts.get(n.id)![j]! >= counts.get(most.id)![j]!)) most = n
      counts.get(most!.id)![j]!--
      have--
    }
    while (have < want) {
      let best: PlacementNode | undefined
      let bestFree = 0
      for (const n of byId) {
        if (!n.stages.includes(s.name)) continue
        const free = capacity(n, s.resource) - used(n, s.resource)
        if (free >= units(s) && free > bestFree) { best = n; bestFree = free }
      }
      if (best === undefined) break
      counts.get(best.id)![j]!++
      have++
    }
    if (have < want) unplaced[s.name] = want - have
  }

  const workers: WorkerAssignment = {}
  for (const n of byId) {
    const c = counts.get(n.id)!
    const entry: Record<string, number> = {}
    stages.forEach((s, j) => { if (c[j]! > 0) entry[s.name] = c[j]! })
    if (Object.keys(entry).length > 0) workers[n.id] = entry
  }
  return { workers, unplaced }
}
