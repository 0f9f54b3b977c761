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
 *   node_modules/.bin/node test/bench/workflow-planner.bench.ts
 */
import { planWorkflow } from '../../mesh/policies/workflow/workflow-planner.ts'
import type { Workflow } from '../../mesh/policies/workflow/workflow-input.ts'
import { chunkSeconds } from '../../mesh/policies/workflow/workflow-planner.ts'
import { embodiedManiSkill, mathLongTail, mathRolloutDominates } from '../mesh/policies/workflow/rlinf-cases.ts'

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
