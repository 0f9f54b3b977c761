// RLinf's auto-placement as RLinf decides it: its cost models by hand, the fitted curves, the search's
// choices on jobs of our own (reasoning at 8 and 128 GPUs, embodied at 4) and its rules.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { repoRoot } from '../../../helpers/agent-process.ts'
import { fitProfileCurve } from '../../../../mesh/policies/workflow/curve-fit.ts'
import { parseRlinfConfig, type RlinfEmbodiedJob, type RlinfReasoningJob } from '../../../../mesh/policies/workflow/rlinf-config.ts'
import { megatronCosts, rlinfCostModel, rolloutCosts } from '../../../../mesh/policies/workflow/rlinf-cost-models.ts'
import { planRlinf, type RlinfPlacement } from '../../../../mesh/policies/workflow/rlinf-planner.ts'

/** The example GRPO job (batch 128 × group 16, 4 minibatches, rollout TP 1 with 64 running requests, actor and inference TP 2) on `gpus` GPUs. */
const example = parseRlinfConfig(readFileSync(join(repoRoot, 'examples/rlinf-grpo.yaml'), 'utf8')) as RlinfReasoningJob
const grpo = (gpus: number, over: Partial<RlinfReasoningJob> = {}): RlinfReasoningJob => ({ ...example, totalGpus: gpus, ...over })

const plan = (job: RlinfReasoningJob | RlinfEmbodiedJob) => planRlinf(rlinfCostModel(job), job.taskType)
const ranges = (p: RlinfPlacement): Record<string, [number, number]> => Object.fromEntries(p.components.map(c => [c.name, c.gpus]))

t.test('Megatron and rollout cost models, by hand', async t => {
  const c = 1
  const megatron = megatronCosts(8, c, 2, 512, 16)
  // Valid below G: dp x 2 with 512 % (dp x 16) = 0 and dp x 2 < 8, so dp 1, 2 (g 2, 4); dp 3 (g 6) does not divide.
  t.same([...megatron.keys()].filter(g => !Number.isNaN(megatron[g]!)), [2, 4, 8])
  t.equal(megatron[8], c, 'collocated on all GPUs: the profiled cost')
  t.equal(megatron[4], c * 2 / 1.2, 's = 2: c·s / (1 + 0.2)')
  t.equal(megatron[2], c * 4 / 1.4, 's = 4: c·s / (1 + 0.4)')
  t.equal(megatronCosts(64, c, 1, 512, 16)[2], c * 32 / 1.9, 's = 32: the speed-up clamps at 0.9')
  const rollout = rolloutCosts(8, c, 1, 64, 2048)
  t.equal(rollout[4], c * 2, 'four instances of 64 requests cannot hold 2048 at once: × G/g')
  t.equal(rollout[8], c)
  const big = rolloutCosts(64, c, 2, 128, 2048)
  t.ok(Number.isNaN(big[3]!), 'not a multiple of the model-parallel size')
  // ⌈128 × 0.9⌉ = 116 per instance: 18 instances (36 GPUs) hold 2088 >= 2048, 17 (34 GPUs) hold 1972.
  t.equal(big[36], c, 'enough instances: unchanged')
  t.equal(big[34], c * 64 / 34)
})

t.test('the fitted curve: the best R² of power, exponential, logarithmic and quadratic; measured points as measured', async t => {
  const from = (f: (x: number) => number, xs: number[]): Map<number, number> => new Map(xs.map(x => [x, f(x)]))
  const power = fitProfileCurve(from(x => 2 * x ** 0.5, [4, 8, 16, 32, 64]), 'p')
  t.equal(power.kind, 'power')
  t.ok(Math.abs(power.params[0]! - 2) < 1e-6 && Math.abs(power.params[1]! - 0.5) < 1e-6, `params ${power.params}`)
  t.ok(Math.abs(power.at(128) - 2 * Math.sqrt(128)) < 1e-6, 'extrapolated on the curve')
  t.equal(fitProfileCurve(from(x => 3 + 2 * Math.log(x), [2, 4, 8, 16]), 'l').kind, 'logarithmic')
  t.equal(fitProfileCurve(from(x => 0.5 * Math.exp(0.1 * x), [1, 10, 20, 30, 40]), 'e').kind, 'exponential')
  const quad = fitProfileCurve(from(x => x * x - 3 * x + 40, [1, 5, 10, 20]), 'q')
  t.equal(quad.kind, 'polynomial')
  t.ok(Math.abs(quad.at(30) - (900 - 90 + 40)) < 1e-6)
  const noisy = fitProfileCurve(new Map([[8, 1.1], [16, 1.9], [32, 4.2], [64, 7.7]]), 'n')
  t.equal(noisy.at(16), 1.9, 'a measured point is returned as measured, not from the curve')
  t.throws(() => fitProfileCurve(new Map([[8, 1]]), 'profile_data.env_profile_data'), { code: 'ERR_WORKFLOW_INVALID', message: /profile_data.env_profile_data: 1 profile point; a curve needs two/ })
})

t.test('reasoning on 8 GPUs: everything collocated, RLinf\'s "rollout,actor: all"', async t => {
  const p = plan(grpo(8))
  t.equal(p.mode, 'collocated')
  t.equal(p.iterationS, 59.9 + 30.8 + 95.7, 'the three profiled costs one after another')
  t.same(p.componentPlacement, { 'rollout,actor': 'all' }, 'inference is not listed: it runs in the actor\'s group')
  t.ok(p.runnersUp.length > 0 && p.runnersUp.every(r => r.iterationS >= p.iterationS), 'runners-up are slower')
})

t.test('reasoning on 128 GPUs: disaggregated, each component on its own GPUs, uneven counts', async t => {
  const p = plan(grpo(128))
  t.equal(p.mode, 'disaggregated')
  t.same(ranges(p), { rollout: [0, 32], inference: [32, 64], actor: [64, 128] })
  t.same(p.componentPlacement, { rollout: '0-31', inference: '32-63', actor: '64-127' })
  // Per group batch: rollout unchanged at 32 GPUs (32 × 64 >= 2048 requests), inference on 32 (s = 4), actor on 64 (s = 2).
  const rollout = 59.9 / 128
  const inference = 30.8 / 128 * 4 / 1.4
  const actor = 95.7 / 128 * 2 / 1.2
  t.ok(Math.abs(p.iterationS - (rollout + inference + actor + actor * 127)) < 1e-9, `one group's warm-up through all three, then the slowest 127 times: ${p.iterationS}`)
  const collocated = p.runnersUp.find(r => r.mode === 'collocated')
  t.ok(collocated !== undefined && Math.abs(collocated.iterationS - 186.4) < 1e-9, 'the collocated plan is a runner-up at the collocated cost')
  t.ok([p, ...p.runnersUp].every(r => r.mode !== 'hybrid'), 'reasoning plans are pure: no hybrid anywhere')
})

t.test('a pipeline\'s sink gets two GPUs at least (RLinf\'s range)', async t => {
  // Rollout dominates; without logprob recompute the graph is rollout -> actor. On 3 GPUs the only
  // disaggregated split is rollout 1, actor 2, though rollout 2, actor 1 would be faster.
  const p = plan(grpo(3, { recomputeLogprobs: false, modelParallel: { rollout: 1, inference: 1, actor: 1 }, nMinibatches: 1, groupSize: 1, rolloutBatchSize: 6, costS: { rollout: 300, actor: 1 } }))
  for (const r of [p, ...p.runnersUp]) {
    if (r.mode === 'disaggregated') t.same(ranges(r), { rollout: [0, 1], actor: [1, 3] })
  }
  t.ok([p, ...p.runnersUp].some(r => r.mode === 'disaggregated'), 'the disaggregated plan was considered')
})

const embodied = (over: Partial<RlinfEmbodiedJob> = {}): RlinfEmbodiedJob => ({
  taskType: 'embodied',
  totalGpus: 4,
  gpusPerNodeAssumed: false,
  envNum: 48,
  actorCostS: 20,
  envProfile: new Map([[12, 2], [24, 3.5], [48, 6]]),
  rolloutProfile: new Map([[16, 4], [24, 7], [48, 15]]),
  ...over,
})

t.test('embodied on 4 GPUs: the simulator on one GPU, generation on three, the actor on all (hybrid)', async t => {
  const p = plan(embodied())
  t.equal(p.mode, 'hybrid')
  t.same(p.componentPlacement, { env: '0-0', rollout: '1-3', actor: '0-3' })
  // env(1 GPU: 48 environments) = 6 s, generation(3 instances of 16) = 4 s; env 2 + generation 2 would be 3.5 + 7.
  // RLinf's embodied units: the pipelined pair costs one environment's share of both, the actor its profiled cost.
  t.ok(Math.abs(p.iterationS - ((6 + 4) / 48 + 20)) < 1e-9, `${p.iterationS}`)
  for (const r of [p, ...p.runnersUp]) t.same(ranges(r).actor, [0, 4], `${r.mode} plan: the actor on all GPUs`)
})

t.test('no valid placement: an error that says where each component can go', async t => {
  // 7 environments split over 1 or 7 instances only, and at most 5 per instance profiled: env fits nowhere on 4 GPUs.
  const job = embodied({ envNum: 7, envProfile: new Map([[2, 1], [5, 2]]), rolloutProfile: new Map([[1, 1], [7, 3]]) })
  t.throws(() => plan(job), { code: 'ERR_WORKFLOW_INVALID', message: /no valid placement on 4 GPUs: env can be placed on no GPU count; env_rollout can be placed on 1-4 GPUs; actor can be placed on 1, 4 GPUs/ })
})

t.test('a curve extrapolated to no time is no prediction: that count is not placed', async t => {
  // 7 environments: instances of 7, 3, 2 and 1 environments, far below the profiled 16-48, where the fitted curve goes below zero.
  const model = rlinfCostModel(embodied({ rolloutProfile: new Map([[16, 4], [24, 7], [48, 15]]), envNum: 7 }))
  const generation = model.components.find(c => c.role === 'env_rollout')!
  t.ok([...generation.iterationS].every(s => Number.isNaN(s) || s > 0), `no count priced at zero or less: ${[...generation.iterationS].join(', ')}`)
})

t.test('planner time on 8,192 GPUs (the bench measures it; here only that the search stays exhaustive and finishes)', async t => {
  const job = parseRlinfConfig({
    cluster: { num_nodes: 1024, num_gpus_per_node: 8 },
    runner: { task_type: 'math' },
    algorithm: { group_size: 16, n_minibatches: 4, recompute_logprobs: true },
    data: { rollout_batch_size: 128 },
    rollout: { max_running_requests: 64 },
    actor: { model: { tensor_model_parallel_size: 2 } },
    profile_data: { actor_cost: 95.7, inference_cost: 30.8, rollout_cost: 59.9 },
  })
  const p = plan(job)
  t.equal(p.components.length, 3)
  t.ok(p.iterationS <= 186.4, 'no worse than all collocated')
})
