/**
 * The input of the workflow planner (`agentctl plan workflow F`):
 *
 *   { "gpus": 64, "gpuMemoryGiB": 80, "batchSize": 512, "gpuStep"?: 8,
 *     "components": [ { "name": "rollout", "memoryGiB": 400, "minGpus"?: 8,
 *                       "offloadS"?: 5, "onloadS"?: 5,
 *                       "profile": [ { "gpus": 64, "granularity": 512, "seconds": 300 }, … ] } ],
 *     "edges": [ { "from": "rollout", "to": "actor" } ] }
 *
 * - `profile[i].seconds`: time for `gpus` GPUs to process one chunk of
 *   `granularity` samples (RLinf §3.4: "execution time and memory usage
 *   under different granularity"). Every granularity divides `batchSize`.
 *   Between profiled GPU counts the time is interpolated linearly in the GPU
 *   count; outside them it scales as 1/GPUs from the nearest point.
 * - `memoryGiB`: the component's GPU memory in total (weights, optimizer,
 *   KV cache …), spread evenly over its GPUs; a placement needs
 *   memoryGiB / gpus <= gpuMemoryGiB.
 * - `offloadS` / `onloadS`: context-switch cost when components sharing GPUs
 *   cannot co-reside (default 0).
 * - `edges`: data flow; cycles (e.g. env ↔ generation) are allowed and are
 *   collapsed into one node by the planner.
 * - `gpuStep`: GPU allocations are multiples of it (default 1; e.g. 8 for whole nodes).
 */
import { Type, type Static } from '@sinclair/typebox'
import { createInputValidator } from '../../../core/validate-input.ts'

const profilePointSchema = Type.Object({
  gpus: Type.Integer({ minimum: 1 }),
  granularity: Type.Integer({ minimum: 1, description: 'samples per chunk' }),
  seconds: Type.Number({ exclusiveMinimum: 0, description: 'time to process one chunk on `gpus` GPUs' }),
}, { additionalProperties: false })

const componentSchema = Type.Object({
  name: Type.String({ minLength: 1 }),
  memoryGiB: Type.Number({ minimum: 0 }),
  minGpus: Type.Optional(Type.Integer({ minimum: 1 })),
  offloadS: Type.Optional(Type.Number({ minimum: 0 })),
  onloadS: Type.Optional(Type.Number({ minimum: 0 })),
  profile: Type.Array(profilePointSchema, { minItems: 1 }),
}, { additionalProperties: false })

export const maxWorkflowComponents = 8

export const workflowSchema = Type.Object({
  gpus: Type.Integer({ minimum: 1 }),
  gpuMemoryGiB: Type.Number({ exclusiveMinimum: 0 }),
  batchSize: Type.Integer({ minimum: 1 }),
  gpuStep: Type.Optional(Type.Integer({ minimum: 1 })),
  components: Type.Array(componentSchema, { minItems: 1, maxItems: maxWorkflowComponents }),
  edges: Type.Array(Type.Object({ from: Type.String({ minLength: 1 }), to: Type.String({ minLength: 1 }) }, { additionalProperties: false })),
}, { additionalProperties: false })

export type Workflow = Static<typeof workflowSchema>
export type WorkflowComponent = Static<typeof componentSchema>

const validator = createInputValidator(workflowSchema, 'ERR_WORKFLOW_INVALID', 'workflow', (w, add) => {
  const names = new Set<string>()
  w.components.forEach((c, i) => {
    if (names.has(c.name)) add(`components[${i}].name`, `duplicate component "${c.name}"`)
    names.add(c.name)
    c.profile.forEach((p, j) => {
      if (w.batchSize % p.granularity !== 0) add(`components[${i}].profile[${j}].granularity`, `${p.granularity} does not divide the batch size ${w.batchSize}`)
      if (p.gpus > w.gpus) add(`components[${i}].profile[${j}].gpus`, `${p.gpus} is more than the ${w.gpus} GPUs`)
    })
  })
  w.edges.forEach((e, i) => {
    for (const end of ['from', 'to'] as const) {
      if (!names.has(e[end])) add(`edges[${i}].${end}`, `unknown component "${e[end]}"`)
    }
  })
  if ((w.gpuStep ?? 1) > w.gpus) add('gpuStep', `${w.gpuStep} is more than the ${w.gpus} GPUs`)
})

/** Parses workflow JSON text (or a parsed value); throws AgentError ERR_WORKFLOW_INVALID naming the bad fields. */
export function parseWorkflow (input: unknown, source = 'workflow'): Workflow {
  return validator.parse(input, source)
}
