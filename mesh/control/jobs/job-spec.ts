/**
 * A job submitted to a live cluster (`agentctl jobs submit F`, POST /v1/jobs):
 * the placement trace's job (mesh/sim/placement-trace.ts) without `submitS`
 * (the leader stamps the time it accepted it) and with `gpusPerNode`:
 *
 *   { "id", "nodes", "gpusPerNode"?, "periodS", "iterations",
 *     "segments": [ { "offsetS", "durationS" } ], "maxSlowdown",
 *     "profiled"?, "switchS"? }
 *
 * - `id` names the job cluster-wide and makes a submission idempotent: the
 *   same spec again returns the existing job, another spec under the same id
 *   is refused (ERR_JOB_CONFLICT).
 * - `gpusPerNode` (default 1): only nodes advertising at least this many GPUs
 *   take the job; 0 lets CPU-only nodes take it.
 * - Bounds keep the whole job table inside one mesh message: at most 64
 *   nodes and 32 segments per job.
 * - `live` (default false): the job's workers register with the agents
 *   (agent/workers/PROTOCOL.md) and its controller submits operations; it
 *   completes when reported (POST /v1/jobs/:id/complete). A job without it is
 *   a modeled one: the leader replays its profile and completes it when its
 *   iterations have elapsed.
 * - `placement: "auto"` with `workflow` (an RLinf training config, as JSON;
 *   `agentctl jobs submit` also takes a path to its YAML): a live job whose
 *   workers form one group per workflow component, laid out on the job's
 *   GPUs by the RLinf planner (workflow-layout.ts; groups in job-groups.ts).
 *   The stored spec keeps the layout, not the config.
 */
import { Type, type Static } from '@sinclair/typebox'
import { checkJobSegments, defaultContextSwitchS, jobFields, segmentSchema } from '../../sim/placement-trace.ts'
import { createInputValidator } from '../../../core/validate-input.ts'
import type { PlacementJob } from '../../policies/placement/placement-policy.ts'
import { planWorkflowLayout, type WorkflowLayout } from './workflow-layout.ts'

export const jobIdPattern = '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'

export const JobSpecSchema = Type.Object({
  ...jobFields,
  id: Type.String({ pattern: jobIdPattern, description: 'cluster-wide job id: letters, digits, ".", "_", "-"; at most 128 characters' }),
  nodes: Type.Integer({ minimum: 1, maximum: 64, description: 'gang size: whole nodes the job needs at once' }),
  gpusPerNode: Type.Optional(Type.Integer({ minimum: 0, maximum: 64, description: 'GPUs each node must have (default 1)' })),
  segments: Type.Array(segmentSchema, { minItems: 1, maxItems: 32, description: 'GPU-busy parts of one period: ordered, disjoint, within periodS' }),
  live: Type.Optional(Type.Boolean({ description: 'true: real workers run its operations (agent/workers/PROTOCOL.md) and it completes when reported; default false: a modeled job the leader replays' })),
  placement: Type.Optional(Type.Literal('auto', { description: 'auto: one worker group per workflow component, laid out by the RLinf planner over the job\'s GPUs (needs live, workflow and gpusPerNode >= 1)' })),
  workflow: Type.Optional(Type.Record(Type.String(), Type.Unknown(), { description: 'the RLinf training config the planner reads (placement "auto" only)' })),
}, { additionalProperties: false })

export type JobSpec = Static<typeof JobSpecSchema>

export const defaultGpusPerNode = 1

const validator = createInputValidator(JobSpecSchema, 'ERR_JOB_INVALID', 'job spec', (spec, add) => {
  checkJobSegments(spec, '', add)
  checkPlacement(spec, add)
})

/** Longest job id with placement auto: its groups' ids (job-groups.ts) stay valid job ids. */
const maxAutoJobIdLength = 128 - 1 - 'env_rollout'.length

function checkPlacement (spec: JobSpec, add: (path: string, message: string) => void): void {
  if (spec.placement === undefined) {
    if (spec.workflow !== undefined) add('/workflow', 'is planned only with "placement": "auto"')
    return
  }
  if (spec.live !== true) add('/placement', '"auto" lays out live worker groups: set "live": true')
  if ((spec.gpusPerNode ?? defaultGpusPerNode) < 1) add('/gpusPerNode', 'placement "auto" lays components out on GPUs: at least 1')
  if (spec.id.length > maxAutoJobIdLength) add('/id', `at most ${maxAutoJobIdLength} characters with placement "auto" (its groups are named <id>.<component>)`)
  if (spec.workflow === undefined) { add('/workflow', 'required with "placement": "auto" (an RLinf training config)'); return }
  try {
    planWorkflowLayout(spec.workflow, spec.nodes, spec.gpusPerNode ?? defaultGpusPerNode, 'workflow')
  } catch (err) {
    add('/workflow', (err as Error).message.replace(/^workflow: /, ''))
  }
}

/** Parses JSON text or a parsed value; throws AgentError ERR_JOB_INVALID naming every bad field. */
export function parseJobSpec (input: unknown, source = 'job spec'): JobSpec {
  return validator.parse(input, source)
}

/**
 * Every field filled in except `live`, present only when true (tables from
 * before it stay valid and equal), and `layout`, present only for placement
 * auto (in place of the workflow it was planned from).
 */
export type NormalizedJobSpec = Required<Omit<JobSpec, 'live' | 'placement' | 'workflow'>> & { live?: true, layout?: WorkflowLayout }

/** The spec with its defaults filled in and keys in schema order (what the job table stores). */
export function normalizedSpec (spec: JobSpec, contextSwitchS = defaultContextSwitchS): NormalizedJobSpec {
  return {
    id: spec.id,
    nodes: spec.nodes,
    gpusPerNode: spec.gpusPerNode ?? defaultGpusPerNode,
    periodS: spec.periodS,
    iterations: spec.iterations,
    segments: spec.segments.map(s => ({ offsetS: s.offsetS, durationS: s.durationS })),
    maxSlowdown: spec.maxSlowdown,
    profiled: spec.profiled ?? true,
    switchS: spec.switchS ?? contextSwitchS,
    ...(spec.live === true ? { live: true as const } : {}),
    ...(spec.placement === 'auto' ? { layout: planWorkflowLayout(spec.workflow, spec.nodes, spec.gpusPerNode ?? defaultGpusPerNode) } : {}),
  }
}

/** Operations measured before a live job's measured figures replace the submitted ones. */
export const measuredOpsThreshold = 3

/**
 * What the placement policy sees of a job with `iterations` left. With a
 * measured profile of at least measuredOpsThreshold operations (a live job
 * placed again after a requeue), the measured switch cost replaces switchS
 * and the segments are scaled so that their share of the period is the
 * measured busy fraction (each segment keeps its start; none passes the next
 * one or the period's end).
 */
export function placementJobOf (spec: NormalizedJobSpec, iterations = spec.iterations, measured?: { ops: number, switchS: number, busyFraction: number }): PlacementJob {
  const base = { id: spec.id, nodes: spec.nodes, periodS: spec.periodS, iterations, segments: spec.segments, maxSlowdown: spec.maxSlowdown, profiled: spec.profiled, switchS: spec.switchS }
  if (measured === undefined || measured.ops < measuredOpsThreshold) return base
  const submittedBusyS = spec.segments.reduce((n, s) => n + s.durationS, 0)
  const scale = submittedBusyS > 0 ? measured.busyFraction * spec.periodS / submittedBusyS : 1
  const segments = spec.segments.map((s, i) => {
    const limitS = (spec.segments[i + 1]?.offsetS ?? spec.periodS) - s.offsetS
    return { offsetS: s.offsetS, durationS: Math.max(Math.min(s.durationS * scale, limitS), 1e-3) }
  })
  return { ...base, segments, switchS: measured.switchS, profiled: true }
}

/** Whether two normalized specs are the same submission (every field equal). */
export function sameJobSpec (a: NormalizedJobSpec, b: NormalizedJobSpec): boolean {
  return JSON.stringify(a) === JSON.stringify(b)
}
