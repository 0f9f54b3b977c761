import t from 'tap'
import { chunkSeconds, planWorkflow } from '../../../../mesh/policies/workflow/workflow-planner.ts'
import { parseWorkflow, type Workflow } from '../../../../mesh/policies/workflow/workflow-input.ts'
import { embodiedManiSkill, mathLongTail, mathRolloutDominates } from './rlinf-cases.ts'

const range = (plan: ReturnType<typeof planWorkflow>, name: string) => plan.components.find(c => c.name === name)!

t.test('rollout dominates and memory allows: everything collocated on all GPUs (RLinf §2.2)', async t => {
  const plan = planWorkflow(parseWorkflow(mathRolloutDominates))
  t.same(plan.components.map(c => [c.name, c.gpus, c.mode]), [['rollout', [0, 64], 'collocated'], ['inference', [0, 64], 'collocated'], ['actor', [0, 64], 'collocated']])
  t.equal(plan.iterationS, 260, 'sum of the phases, no switch since they co-reside')
  t.equal(plan.granularity, 512)
  t.equal(plan.plan.kind, 'temporal')
})

t.test('long-tail generation: disaggregated and pipelined, rollout keeps 40 of 64 GPUs (RLinf Fig. 10, 12)', async t => {
  const plan = planWorkflow(parseWorkflow(mathLongTail))
  t.equal(plan.plan.kind, 'spatial')
  t.same(range(plan, 'rollout').gpus, [0, 40])
  t.equal(range(plan, 'rollout').mode, 'disaggregated')
  t.same(range(plan, 'inference').gpus, [40, 64])
  t.same(range(plan, 'actor').gpus, [40, 64], 'inference and actor share the rest by context switching')
  t.equal(plan.granularity, 64)
  const collocated = 330 + 30 + 90
  t.ok(collocated / plan.iterationS > 1.1, `speedup over collocated ${(collocated / plan.iterationS).toFixed(2)} (RLinf: 1.17-1.21)`)
})

t.test('embodied: the env-generation cycle is collapsed and split evenly, training collocated with it (hybrid, RLinf §2.2)', async t => {
  const plan = planWorkflow(parseWorkflow(embodiedManiSkill))
  t.equal(plan.plan.kind, 'temporal')
  if (plan.plan.kind === 'temporal') t.equal(plan.plan.first.kind, 'cycle')
  t.same(range(plan, 'env').gpus, [0, 32])
  t.same(range(plan, 'generation').gpus, [32, 64])
  t.same(range(plan, 'actor').gpus, [0, 64])
  t.ok(plan.plan.kind === 'temporal' && plan.plan.switchS > 0, 'their memory does not co-reside: offload/onload is charged')
})

t.test('memory decides: a component that fits nowhere is an error; without co-residence a switch is charged', async t => {
  const tooBig: Workflow = { ...mathRolloutDominates, components: mathRolloutDominates.components.map(c => c.name === 'actor' ? { ...c, memoryGiB: 64 * 81 } : c) }
  t.throws(() => planWorkflow(parseWorkflow(tooBig)), { code: 'ERR_WORKFLOW_INVALID', message: /no feasible placement/ })
  const heavy: Workflow = { ...mathRolloutDominates, components: mathRolloutDominates.components.map(c => c.name === 'actor' ? { ...c, memoryGiB: 5000 } : c) }
  const plan = planWorkflow(parseWorkflow(heavy))
  t.ok(plan.iterationS > 260, 'switching costs something once states no longer co-reside')
})

t.test('profile interpolation: linear between GPU counts, 1/g outside', async t => {
  const c = mathLongTail.components[0]!
  t.equal(chunkSeconds(c, 40, 512), 370)
  t.equal(chunkSeconds(c, 48, 512), 370 + (8 / 24) * (330 - 370))
  t.equal(chunkSeconds(c, 8, 512), 700 * 16 / 8)
  t.equal(chunkSeconds(c, 128, 512), 330 * 64 / 128)
  t.equal(chunkSeconds(c, 64, 128), Infinity, 'no profile at that granularity')
})

t.test('bad workflows are rejected with ERR_WORKFLOW_INVALID naming the field', async t => {
  const bad = (mutate: (w: any) => void) => { const w = structuredClone(mathRolloutDominates) as any; mutate(w); return JSON.stringify(w) }
  t.throws(() => parseWorkflow(bad(w => { w.edges.push({ from: 'rollout', to: 'critic' }) })), { code: 'ERR_WORKFLOW_INVALID', message: /edges\[2\]\.to: unknown component "critic"/ })
  t.throws(() => parseWorkflow(bad(w => { w.components[0].profile[0].granularity = 100 })), { message: /components\[0\]\.profile\[0\]\.granularity: 100 does not divide the batch size 512/ })
  t.throws(() => parseWorkflow(bad(w => { w.components[1].name = 'rollout' })), { message: /components\[1\]\.name: duplicate component "rollout"/ })
  t.throws(() => parseWorkflow(bad(w => { w.gpuMemory = 80; delete w.gpuMemoryGiB })), { message: /gpuMemory: Unexpected property.*did you mean "gpuMemoryGiB"/ })
  t.throws(() => parseWorkflow('{'), { message: /is not JSON/ })
})
