/**
 * agentctl plan workflow F: the RLinf §3.4 workflow planner
 * (mesh/policies/workflow/) over a profiled workflow graph
 * (format in mesh/policies/workflow/workflow-input.ts): GPU ranges per
 * component, collocated or disaggregated, and the pipeline granularity.
 * Runs locally; needs no agent.
 */
import { parseWorkflow } from '../../mesh/policies/workflow/workflow-input.ts'
import { planWorkflow, type WorkflowPlanNode } from '../../mesh/policies/workflow/workflow-planner.ts'
import { UsageError, type Command } from './command.ts'
import { readInputFile } from './flags.ts'
import { formatTable } from './table.ts'

export const planWorkflowCommand: Command = {
  summary: 'plan GPU placement of an RL workflow graph: collocated vs pipelined (local, no agent)',
  usage: 'F',
  arguments: [{ name: 'F', description: 'the profiled workflow graph, JSON (mesh/policies/workflow/workflow-input.ts)', complete: 'file' }],
  examples: [
    { what: 'plan a workflow on the GPUs it names', run: 'agentctl plan workflow math-workflow.json' },
    { what: 'the plan as JSON (RLinf\'s component_placement among it)', run: 'agentctl plan workflow math-workflow.json --json' },
  ],
  async run ({ positionals }) {
    const path = positionals[0]
    if (path === undefined) throw new UsageError('plan workflow: the workflow file F is required')
    const plan = planWorkflow(parseWorkflow(await readInputFile(path, 'workflow'), path))
    const human = [
      `iteration ${plan.iterationS.toFixed(1)} s, pipeline granularity ${plan.granularity}`,
      '',
      formatTable(['COMPONENT', 'GPUS', 'MODE'], plan.components.map(c => [c.name, `${c.gpus[0]}-${c.gpus[1] - 1}`, c.mode])),
      '',
      'schedule:',
      describe(plan.plan, '  '),
    ].join('\n')
    return { json: plan, human }
  },
}

function describe (node: WorkflowPlanNode, indent: string): string {
  switch (node.kind) {
    case 'component': return `${indent}${node.name} on ${node.gpus} GPUs, chunks of ${node.granularity}: ${node.timeS.toFixed(1)} s`
    case 'cycle': return `${indent}cycle (even split, concurrent): ${node.timeS.toFixed(1)} s\n${node.members.map(m => describe(m, indent + '  ')).join('\n')}`
    case 'temporal': return `${indent}temporal on ${node.gpus} GPUs (switch ${node.switchS.toFixed(1)} s): ${node.timeS.toFixed(1)} s\n${describe(node.first, indent + '  ')}\n${describe(node.second, indent + '  ')}`
    case 'spatial': return `${indent}spatial, pipelined by ${node.granularity}: ${node.timeS.toFixed(1)} s\n${describe(node.first, indent + '  ')}\n${describe(node.second, indent + '  ')}`
  }
}
