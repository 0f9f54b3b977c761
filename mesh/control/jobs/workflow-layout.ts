/**
 * A live job's workflow laid out by the RLinf planner (`"placement": "auto"`,
 * mesh/policies/workflow/rlinf-planner.ts): which of the job's GPUs each
 * component's worker group gets.
 *
 * Contract:
 * - The job's gang decides the GPUs: the config's `cluster.num_nodes` and
 *   `cluster.num_gpus_per_node` are replaced by the job's `nodes` and
 *   `gpusPerNode` before planning (a config written for another cluster
 *   plans for the one the job gets). Everything else the planner reads
 *   comes from the config, `profile_data` included.
 * - The job's GPUs are numbered node-major: GPU k is local GPU
 *   k mod gpusPerNode of the job's node ⌊k / gpusPerNode⌋. A group's range
 *   [start, end) may span nodes (job-groups.ts).
 * - Deterministic: the same spec always gives the same layout, so the leader
 *   stores the layout instead of the config and a resubmission compares
 *   equal.
 */
import { Type, type Static } from '@sinclair/typebox'
import { AgentError } from '../../../core/errors.ts'
import { parseRlinfConfig, parseRlinfRoot } from '../../policies/workflow/rlinf-config.ts'
import { rlinfCostModel } from '../../policies/workflow/rlinf-cost-models.ts'
import { planRlinf } from '../../policies/workflow/rlinf-planner.ts'

/** Component names: the planner's roles (rollout, inference, actor; env, env_rollout). */
export const componentNamePattern = '^[a-z][a-z_]{0,31}$'

export const WorkflowLayoutSchema = Type.Object({
  mode: Type.Union([Type.Literal('collocated'), Type.Literal('disaggregated'), Type.Literal('hybrid')]),
  iterationS: Type.Number({ minimum: 0, description: 'the planner\'s predicted seconds per iteration' }),
  groups: Type.Array(Type.Object({
    component: Type.String({ pattern: componentNamePattern }),
    gpus: Type.Tuple([Type.Integer({ minimum: 0 }), Type.Integer({ minimum: 1 })], { description: 'the job\'s GPUs [start, end), node-major' }),
  }, { additionalProperties: false }), { minItems: 1, maxItems: 8 }),
}, { additionalProperties: false })
export type WorkflowLayout = Static<typeof WorkflowLayoutSchema>

/**
 * Plans `workflow` (an RLinf training config, parsed) on `nodes` × `gpusPerNode`
 * GPUs. Throws ERR_JOB_INVALID with the planner's reason when the config is
 * not one it can plan (missing keys, no profile, no valid placement).
 */
export function planWorkflowLayout (workflow: unknown, nodes: number, gpusPerNode: number, source = 'workflow'): WorkflowLayout {
  try {
    const root = parseRlinfRoot(workflow, source)
    const cluster = typeof root.cluster === 'object' && root.cluster !== null && !Array.isArray(root.cluster) ? root.cluster : {}
    const job = parseRlinfConfig({ ...root, cluster: { ...cluster, num_nodes: nodes, num_gpus_per_node: gpusPerNode } }, source)
    const model = rlinfCostModel(job)
    const plan = planRlinf(model, job.taskType)
    // plan.components is in data-flow order, as model.components: the group takes the role's name
    // (env_rollout, not RLinf's placement name "rollout"), the name operations give as their component.
    return { mode: plan.mode, iterationS: plan.iterationS, groups: plan.components.map((c, i) => ({ component: model.components[i]!.role, gpus: [c.gpus[0], c.gpus[1]] })) }
  } catch (err) {
    if (err instanceof AgentError) throw new AgentError('ERR_JOB_INVALID', `${source}: ${err.message.startsWith(`${source}: `) ? err.message.slice(source.length + 2) : err.message}`, { cause: err })
    throw err
  }
}
