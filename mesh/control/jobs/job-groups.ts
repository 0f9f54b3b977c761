/**
 * What executes: the job table's jobs, and for each job with a workflow
 * layout (placement auto, workflow-layout.ts) one worker group per component
 * in its place. The op scheduler, the worker registry and the node executor
 * see a group as a job of its own (its queue, its workers, its stored
 * versions and its device switches), so collocated components share GPUs
 * and switch through the device locks and the StateManager exactly as two
 * jobs do, and disaggregated ones run side by side on disjoint GPUs.
 *
 * Contract:
 * - A group of job J for component c is named `J.c` (a valid job id: ids
 *   with placement auto are short enough). It has J's state, events and
 *   spec (without the layout); its nodes are those of J's nodes that hold
 *   a GPU of its range [start, end), in J's order.
 * - Ranks of a group are 0 … end − start − 1: rank r is the job's GPU
 *   start + r, node-major (local GPU (start + r) mod gpusPerNode of J's node
 *   ⌊(start + r) / gpusPerNode⌋). A plain job's ranks are its GPUs.
 * - A job with a layout has no workers of its own: operations name a
 *   component and run on its group (op-scheduler.ts).
 */
import type { JobRecord } from './job-table.ts'
import type { WorkflowLayout } from './workflow-layout.ts'

export interface WorkerGroup {
  /** The job whose layout made it. */
  parent: string
  component: string
  /** The parent's GPUs [start, end). */
  gpus: [number, number]
}

/** A job as the executing parts see it: a table job, or a worker group of one. */
export type ExecutionJob = JobRecord & { group?: WorkerGroup }

export function groupId (parent: string, component: string): string {
  return `${parent}.${component}`
}

/** The table's jobs followed by the groups of those with a layout. */
export function executionJobs (jobs: readonly JobRecord[]): ExecutionJob[] {
  return [...jobs, ...jobs.flatMap(groupsOf)]
}

/** Finds `id` among the table's jobs and their groups. */
export function findExecutionJob (jobs: readonly JobRecord[], id: string): ExecutionJob | undefined {
  const plain = jobs.find(j => j.id === id)
  if (plain !== undefined) return plain
  for (const job of jobs) {
    if (job.spec.layout === undefined || !id.startsWith(`${job.id}.`)) continue
    const group = groupsOf(job).find(g => g.id === id)
    if (group !== undefined) return group
  }
  return undefined
}

/** The worker groups of a job with a layout ([] for any other). */
export function groupsOf (job: JobRecord): ExecutionJob[] {
  const layout: WorkflowLayout | undefined = job.spec.layout
  if (layout === undefined) return []
  const { layout: _layout, ...spec } = job.spec
  const perNode = Math.max(job.spec.gpusPerNode, 1)
  return layout.groups.map(g => {
    const first = Math.floor(g.gpus[0] / perNode)
    const last = Math.floor((g.gpus[1] - 1) / perNode)
    const within = <T>(list: readonly T[]): T[] => list.length === 0 ? [] : list.slice(first, last + 1)
    return {
      ...job,
      id: groupId(job.id, g.component),
      spec,
      nodes: within(job.nodes),
      nodeNames: within(job.nodeNames),
      group: { parent: job.id, component: g.component, gpus: [g.gpus[0], g.gpus[1]] },
    }
  })
}

/** The GPUs the job uses: a group's range, else nodes × gpusPerNode. */
export function gpuCountOf (job: ExecutionJob): number {
  return job.group !== undefined ? job.group.gpus[1] - job.group.gpus[0] : job.spec.nodes * job.spec.gpusPerNode
}

/**
 * The ranks the job's node `nodeIndex` (in job.nodes) hosts, with the local
 * GPU of each (null: a CPU-only job, one rank per node).
 */
export function ranksOnNode (job: ExecutionJob, nodeIndex: number): Array<{ rank: number, gpu: number | null }> {
  const g = job.spec.gpusPerNode
  if (job.group === undefined) {
    const perNode = Math.max(g, 1)
    return Array.from({ length: perNode }, (_, k) => ({ rank: nodeIndex * perNode + k, gpu: g === 0 ? null : k }))
  }
  const [start, end] = job.group.gpus
  const parentNode = Math.floor(start / g) + nodeIndex
  const from = Math.max(start, parentNode * g)
  const to = Math.min(end, (parentNode + 1) * g)
  return Array.from({ length: Math.max(to - from, 0) }, (_, k) => ({ rank: from + k - start, gpu: (from + k) % g }))
}

/** The device lock names (`gpu:k`, `cpu`) the job uses on its node `nodeIndex`. */
export function devicesOnNode (job: ExecutionJob, nodeIndex: number): string[] {
  return ranksOnNode(job, nodeIndex).map(r => r.gpu === null ? 'cpu' : `gpu:${r.gpu}`)
}
