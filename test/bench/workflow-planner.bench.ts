/**
 * Workflow planner (RLinf §3.4) on workflows shaped after RLinf's evaluation:
 * the planned iteration time against the all-collocated plan (every
 * component on all GPUs, one after another, with its switch cost when
 * states do not co-reside) computed in the same run, the chosen placement,
 * and the planning time.
 * Expected (RLinf §5.2, Fig. 10, 12): collocated when rollout dominates and
 * memory allows; disaggregated + pipelined for long-tail generation
 * (1.17-1.21x over collocated); hybrid for embodied env/generation loops.
 *
 * Then RLinf's auto-placement (an RLinf config, `examples/rlinf-grpo.yaml`)
 * on 128, 1,024 and 8,192 GPUs: its plan and the planner's time, median of
 * 7 runs each (goal: < 100 ms at 128 GPUs, < 1 s at 8,192).
 *
 *   node_modules/.bin/node test/bench/workflow-planner.bench.ts
 */
import { planWorkflow } from '../../mesh/policies/workflow/workflow-planner.ts'
import type { Workflow } from '../../mesh/policies/workflow/workflow-input.ts'
import { chunkSeconds } from '../../mesh/policies/workflow/workflow-planner.ts'
import { embodiedManiSkill, mathLongTail, mathRolloutDominates } from '../mesh/policies/workflow/rlinf-cases.ts'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { parse } from 'yaml'
import { parseRlinfConfig } from '../../mesh/policies/workflow/rlinf-config.ts'
import { rlinfCostModel } from '../../mesh/policies/workflow/rlinf-cost-models.ts'
import { planRlinf } from '../../mesh/policies/workflow/rlinf-planner.ts'
import { repoRoot } from '../helpers/agent-process.ts'
import { median } from './bench-stats.ts'

function allCollocatedS (w: Workflow): number {
  const memory = w.components.reduce((s, c) => s + c.memoryGiB, 0)
  const switchS = memory / w.gpus > w.gpuMemoryGiB ? w.components.reduce((s, c) => s + (c.offloadS ?? 0) + (c.onloadS ?? 0), 0) : 0
  return switchS + w.components.reduce((s, c) => {
    const best = Math.min(...c.profile.map(p => (w.batchSize / p.granularity) * chunkSeconds(c, w.gpus, p.granularity)))
    return s + best
  }, 0)
}

for (const [name, w] of Object.entries({ mathRolloutDominates, mathLongTail, embodiedManiSkill })) {
  const t0 = process.hrtime.bigint()
  const plan = planWorkflow(w)
  const ms = Number(process.hrtime.bigint() - t0) / 1e6
  const base = allCollocatedS(w)
  console.log(`${name.padEnd(22)} planned ${plan.iterationS.toFixed(1)} s vs all-collocated ${base.toFixed(1)} s  speedup ${(base / plan.iterationS).toFixed(2)}x  ` +
    `granularity ${plan.granularity}  plan ${ms.toFixed(1)} ms\n  ${plan.components.map(c => `${c.name} GPUs ${c.gpus[0]}-${c.gpus[1] - 1} ${c.mode}`).join(', ')}`)
}

const example = parse(readFileSync(join(repoRoot, 'examples/rlinf-grpo.yaml'), 'utf8'))
for (const [gpus, goalMs] of [[128, 100], [1024, 1000], [8192, 1000]] as const) {
  const job = parseRlinfConfig({ ...example, cluster: { ...example.cluster, num_nodes: gpus / 8, num_gpus_per_node: 8 } })
  const times: number[] = []
  let plan: ReturnType<typeof planRlinf> | undefined
  for (let run = 0; run < 7; run++) {
    const t0 = process.hrtime.bigint()
    plan = planRlinf(rlinfCostModel(job), job.taskType)
    times.push(Number(process.hrtime.bigint() - t0) / 1e6)
  }
  console.log(`RLinf config on ${String(gpus).padStart(4)} GPUs: ${plan!.mode}, ${plan!.iterationS.toFixed(1)} s predicted, ${JSON.stringify(plan!.componentPlacement)}; ` +
    `planner median ${median(times).toFixed(1)} ms [${times.map(x => x.toFixed(1)).join(' ')}], ${(median(times) / goalMs).toFixed(3)} of the ${goalMs} ms goal`)
}
