/**
 * agentctl plan workflow F: the RLinf §3.4 workflow planner, local, no agent.
 * - F a `.yaml`/`.yml` RLinf training config: RLinf's own auto-placement
 *   (mesh/policies/workflow/rlinf-*.ts) over the keys it reads, its cost
 *   models and its rules; prints the mode, the predicted iteration time, each
 *   component's GPUs, the `cluster.component_placement` block to paste into
 *   the config, the runners-up and how each cost was derived.
 *   With --job ID, profile_data comes from the live job's measured run times
 *   (the acting leader's, through the agent at --socket: GET /v1/jobs/top;
 *   mesh/policies/workflow/measured-profile-data.ts), and each key says
 *   whether it was measured, extrapolated to the config's GPUs or taken from
 *   the config.
 * - F a JSON profiled workflow graph (mesh/policies/workflow/workflow-input.ts),
 *   for graphs RLinf cannot express: GPU ranges per component, collocated or
 *   disaggregated, and the pipeline granularity.
 */
import { AgentError } from '../../core/errors.ts'
import { rlinfJobFromMeasurements, type ProfileSource } from '../../mesh/policies/workflow/measured-profile-data.ts'
import { parseRlinfConfig, type RlinfJob } from '../../mesh/policies/workflow/rlinf-config.ts'
import { rlinfCostModel } from '../../mesh/policies/workflow/rlinf-cost-models.ts'
import { componentPlacementOf, planRlinf, type RlinfMode, type RlinfPlacement } from '../../mesh/policies/workflow/rlinf-planner.ts'
import { parseWorkflow } from '../../mesh/policies/workflow/workflow-input.ts'
import { planWorkflow, type WorkflowPlanNode } from '../../mesh/policies/workflow/workflow-planner.ts'
import { UsageError, type Command } from './command.ts'
import { readInputFile } from './flags.ts'
import { formatTable } from './table.ts'

export const planWorkflowCommand: Command = {
  summary: 'plan GPU placement of an RL workflow: an RLinf config (YAML), its profile entered or measured on a live job (--job), or a workflow graph (JSON)',
  usage: 'F [--job ID]',
  options: {
    job: { type: 'string', value: 'ID', description: 'plan from live job ID\'s measured run times (operations run with a component) instead of the config\'s profile_data; asks the agent at --socket. RLinf configs only' },
  },
  arguments: [{ name: 'F', description: 'an RLinf training config (.yaml, .yml: its profile_data and the keys RLinf\'s auto-placement reads) or a profiled workflow graph (JSON, mesh/policies/workflow/workflow-input.ts)', complete: 'file' }],
  examples: [
    { what: 'plan an RLinf job as RLinf\'s auto-placement would, from its config', run: 'agentctl plan workflow qwen2.5-7b-grpo.yaml' },
    { what: 'plan it from what live job grpo-small measured, extrapolated to the config\'s GPUs', run: 'agentctl plan workflow qwen2.5-7b-grpo.yaml --job grpo-small' },
    { what: 'plan a workflow graph of our own on the GPUs it names', run: 'agentctl plan workflow math-workflow.json' },
    { what: 'the plan as JSON (mode, iterationS, components, componentPlacement)', run: 'agentctl plan workflow math-workflow.json --json' },
  ],
  async run ({ positionals, values, client, signal }) {
    const path = positionals[0]
    if (path === undefined) throw new UsageError('plan workflow: the workflow file F is required (an RLinf config .yaml or a workflow graph .json)')
    const rlinf = /\.ya?ml$/i.test(path)
    const jobId = typeof values.job === 'string' ? values.job : undefined
    if (jobId !== undefined && !rlinf) throw new UsageError('plan workflow: --job plans an RLinf config (.yaml, .yml) from measurements; a workflow graph carries its own profile')
    const text = await readInputFile(path, 'workflow')
    if (!rlinf) return planWorkflowGraph(text, path)
    if (jobId === undefined) return planRlinfConfig(parseRlinfConfig(text, path), path)
    const top = await client.jobsTop({ signal })
    // A placement-auto job is measured per worker group (each on its own GPU count): their samples together.
    const groups = new Set(top.workflows.find(w => w.job === jobId)?.groups.map(g => g.job) ?? [])
    const ran = top.jobs.filter(j => j.job === jobId || groups.has(j.job))
    const live = ran.length === 0 ? undefined : { components: ran.flatMap(j => j.components) }
    if (live === undefined) throw new AgentError('ERR_JOB_NOT_FOUND', `the leader has run no operation of job ${jobId} (it measures a job's operations while it leads)`)
    const measured = rlinfJobFromMeasurements(text, path, jobId, live.components)
    return planRlinfConfig(measured.job, path, measured.sources)
  },
}

function planRlinfConfig (job: RlinfJob, path: string, sources?: ProfileSource[]): { json: unknown, human: string } {
  const model = rlinfCostModel(job)
  const plan = planRlinf(model, job.taskType)
  const costModels = model.components.map(c => c.model)
  const human = [
    `${path}: ${job.taskType}, ${clusterLine(job)}`,
    `mode        ${plan.mode}`,
    `iteration   ${plan.iterationS.toFixed(1)} s predicted`,
    '',
    formatTable(['COMPONENT', 'GPUS', 'COUNT'], plan.components.map(c => [c.name, `${c.gpus[0]}-${c.gpus[1] - 1}`, String(c.gpus[1] - c.gpus[0])])),
    '',
    'paste into the config:',
    placementYaml(plan.componentPlacement),
    '',
    plan.runnersUp.length === 0 ? 'no other valid plan' : 'runners-up:',
    ...(plan.runnersUp.length === 0 ? [] : [formatTable(['MODE', 'ITERATION_S', 'PLACEMENT'], plan.runnersUp.map(p => [p.mode, p.iterationS.toFixed(1), placementLine(p)]))]),
    '',
    'cost models (RLinf\'s, from profile_data):',
    ...costModels.map(m => `  ${m}`),
    ...(sources === undefined ? [] : ['', 'profile_data:', formatTable(['KEY', 'SOURCE', 'HOW'], sources.map(x => [x.key, x.source, x.detail]))]),
  ].join('\n')
  return { json: { ...plan, costModels, ...(sources !== undefined ? { profileSources: sources } : {}) }, human }
}

function planWorkflowGraph (text: string, path: string): { json: unknown, human: string } {
  const plan = planWorkflow(parseWorkflow(text, path))
  const modes = new Set(plan.components.map(c => c.mode))
  const mode: RlinfMode = modes.size > 1 ? 'hybrid' : modes.has('collocated') ? 'collocated' : 'disaggregated'
  const componentPlacement = componentPlacementOf(mode, plan.components)
  const human = [
    `mode        ${mode}`,
    `iteration   ${plan.iterationS.toFixed(1)} s, pipeline granularity ${plan.granularity}`,
    '',
    formatTable(['COMPONENT', 'GPUS', 'MODE'], plan.components.map(c => [c.name, `${c.gpus[0]}-${c.gpus[1] - 1}`, c.mode])),
    '',
    'as RLinf\'s cluster.component_placement:',
    placementYaml(componentPlacement),
    '',
    'schedule:',
    describe(plan.plan, '  '),
  ].join('\n')
  return { json: { mode, ...plan, componentPlacement }, human }
}

function clusterLine (job: RlinfJob): string {
  return job.gpusPerNodeAssumed
    ? `${job.totalGpus} GPUs (8 per node assumed: the config has no cluster.num_gpus_per_node)`
    : `${job.totalGpus} GPUs`
}

function placementYaml (placement: Record<string, string>): string {
  return ['cluster:', '  component_placement:', ...Object.entries(placement).map(([k, v]) => `    ${k}: ${v}`)].join('\n')
}

function placementLine (p: RlinfPlacement): string {
  return Object.entries(p.componentPlacement).map(([k, v]) => `${k}: ${v}`).join(', ')
}

function describe (node: WorkflowPlanNode, indent: string): string {
  switch (node.kind) {
    case 'component': return `${indent}${node.name} on ${node.gpus} GPUs, chunks of ${node.granularity}: ${node.timeS.toFixed(1)} s`
    case 'cycle': return `${indent}cycle (even split, concurrent): ${node.timeS.toFixed(1)} s\n${node.members.map(m => describe(m, indent + '  ')).join('\n')}`
    case 'temporal': return `${indent}temporal on ${node.gpus} GPUs (switch ${node.switchS.toFixed(1)} s): ${node.timeS.toFixed(1)} s\n${describe(node.first, indent + '  ')}\n${describe(node.second, indent + '  ')}`
    case 'spatial': return `${indent}spatial, pipelined by ${node.granularity}: ${node.timeS.toFixed(1)} s\n${describe(node.first, indent + '  ')}\n${describe(node.second, indent + '  ')}`
  }
}
