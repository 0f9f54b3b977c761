// profile_data from a live job's measurements (agentctl plan workflow CONFIG --job ID): measured at the
// config's GPU count it is the key; measured on fewer GPUs it is extrapolated by inverting RLinf's own cost
// model, so that the model predicts the measured time back at the measured count; keys without a
// measurement come from the config, and a key with neither is refused, naming the component to run.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { stringify } from 'yaml'
import { rlinfJobFromMeasurements, type ComponentSample } from '../../../../mesh/policies/workflow/measured-profile-data.ts'
import { rlinfCostModel } from '../../../../mesh/policies/workflow/rlinf-cost-models.ts'
import { createComponentProfile, keptIterations, keptSeries } from '../../../../mesh/control/jobs/component-profile.ts'
import { repoRoot } from '../../../helpers/agent-process.ts'

// 128 GPUs; rollout tp 1 with 64 requests per instance against 128 × 16 requests; actor and inference mp 2.
const example = readFileSync(join(repoRoot, 'examples/rlinf-grpo.yaml'), 'utf8')
const sample = (component: string, gpus: number, seconds: number, o: Partial<ComponentSample> = {}): ComponentSample =>
  ({ component, gpus, granularity: null, iterations: 4, ops: 4, iterationMs: seconds * 1000, ...o })

t.test('measured on all the config\'s GPUs: the measurements are profile_data', async t => {
  const { job, sources } = rlinfJobFromMeasurements(example, 'grpo.yaml', 'big', [sample('rollout', 128, 50), sample('inference', 128, 20), sample('actor', 128, 80)])
  t.match(job, { taskType: 'reasoning', costS: { rollout: 50, inference: 20, actor: 80 } })
  t.same(sources.map(s => [s.key, s.source]), [['profile_data.rollout_cost', 'measured'], ['profile_data.inference_cost', 'measured'], ['profile_data.actor_cost', 'measured']])
  t.match(sources[0]!.detail, /rollout of job big on all 128 GPUs \(4 iterations, 4 ops\)/)
})

t.test('measured on 16 GPUs: extrapolated to 128 so that RLinf\'s cost model gives the measured times back at 16', async t => {
  const measured = { rollout: 400, inference: 90, actor: 300 }
  const { job, sources } = rlinfJobFromMeasurements(example, 'grpo.yaml', 'small', Object.entries(measured).map(([c, s]) => sample(c, 16, s)))
  t.same(sources.map(s => s.source), ['extrapolated', 'extrapolated', 'extrapolated'])
  t.match(sources[2]!.detail, /on 128 GPUs from 300.000 s measured on 16/)
  const model = rlinfCostModel(job)
  for (const c of model.components) {
    t.ok(Math.abs(c.iterationS[16]! - measured[c.role as keyof typeof measured]) < 1e-9, `${c.role}: the model predicts ${c.iterationS[16]!.toFixed(3)} s on 16 GPUs, ${measured[c.role as keyof typeof measured]} s measured`)
  }
  // Rollout on 16 GPUs holds 16 × 64 of 2048 requests at once: RLinf scales it by G/g, so 128 GPUs take 1/8.
  t.equal(job.taskType === 'reasoning' ? job.costS.rollout : 0, 50)
})

t.test('the GPU count nearest the config\'s is used, its granularities pooled by iterations', async t => {
  const { job, sources } = rlinfJobFromMeasurements(example, 'grpo.yaml', 'j', [
    sample('rollout', 8, 1000), sample('rollout', 128, 40, { granularity: 64, iterations: 3 }), sample('rollout', 128, 60, { granularity: 128, iterations: 1 }),
    sample('inference', 128, 20), sample('actor', 128, 80),
  ])
  t.equal(job.taskType === 'reasoning' ? job.costS.rollout : 0, 45, '(3 × 40 + 60) / 4, the 8-GPU series ignored')
  t.match(sources[0], { source: 'measured', detail: /4 iterations/ })
})

t.test('a component not measured keeps the config\'s value; one with neither is refused, naming what to run', async t => {
  const { job, sources } = rlinfJobFromMeasurements(example, 'grpo.yaml', 'j', [sample('actor', 128, 70)])
  t.match(job, { costS: { rollout: 59.9, inference: 30.8, actor: 70 } })
  t.same(sources.map(s => s.source), ['config', 'config', 'measured'])
  t.match(sources[0]!.detail, /the config's 59.9 s: job j has no measured rollout operation/)

  const bare = example.replace(/^profile_data:\n(?: {2}.*\n)+/m, '')
  t.not(bare, example, 'the test config has no profile_data')
  t.throws(() => rlinfJobFromMeasurements(bare, 'grpo.yaml', 'j', [sample('rollout', 128, 50)]), {
    code: 'ERR_WORKFLOW_INVALID',
    message: /neither the config nor job j's measurements give profile_data.inference_cost \(operations with component "inference"\), profile_data.actor_cost \(operations with component "actor"\)/,
  })
  t.throws(() => rlinfJobFromMeasurements(bare.replace('num_nodes: 16', 'num_nodes: 0'), 'grpo.yaml', 'j', []), { code: 'ERR_WORKFLOW_INVALID', message: /cluster.num_nodes/ }, 'the config\'s own bad keys are still named')
  // A measurement on no GPUs (a CPU-only job) says nothing about GPU cost.
  t.throws(() => rlinfJobFromMeasurements(bare, 'grpo.yaml', 'j', [sample('rollout', 0, 5), sample('inference', 0, 5), sample('actor', 0, 5)]), { message: /profile_data.rollout_cost/ })
})

t.test('embodied: env and env_rollout points per environments per instance, over the config\'s; the actor extrapolated', async t => {
  const config = stringify({
    cluster: { num_nodes: 1, num_gpus_per_node: 4 },
    runner: { task_type: 'embodied' },
    data: { env_num: 48 },
    profile_data: { trainer_cost: 20, env_profile_data: { 12: 2, 24: 3.5, 48: 6 } },
  })
  const { job, sources } = rlinfJobFromMeasurements(config, 'maniskill.yaml', 'e', [
    sample('env', 2, 3, { granularity: 24 }), sample('env', 1, 5, { granularity: 48, iterations: 2 }),
    sample('env_rollout', 2, 7, { granularity: 24 }), sample('env_rollout', 1, 14, { granularity: 48 }),
    sample('actor', 4, 18),
  ])
  if (job.taskType !== 'embodied') return t.fail('an embodied job')
  t.same([...job.envProfile].sort((a, b) => a[0] - b[0]), [[12, 2], [24, 3], [48, 5]], 'the measured points replace the config\'s at 24 and 48; 12 is kept')
  t.same([...job.rolloutProfile].sort((a, b) => a[0] - b[0]), [[24, 7], [48, 14]])
  t.equal(job.actorCostS, 18, 'trainer_cost, measured on all 4 GPUs')
  t.same(sources.map(s => [s.key, s.source]), [['profile_data.env_profile_data', 'measured'], ['profile_data.rollout_profile_data', 'measured'], ['profile_data.trainer_cost', 'measured']])
  t.match(sources[0]!.detail, /at 24, 48 environments per instance; the config's points at 12 kept/)
  t.throws(() => rlinfJobFromMeasurements(config, 'maniskill.yaml', 'e', [sample('env_rollout', 2, 7)]), { message: /profile_data.rollout_profile_data \(operations with component "env_rollout" and a granularity/ }, 'points need a granularity')
})

t.test('the component profile: one iteration sums its operations, the latest iterations only, per GPUs and granularity', async t => {
  const p = createComponentProfile()
  p.record({ component: 'actor', iteration: 1 }, 8, 100)
  p.record({ component: 'actor', iteration: 1 }, 8, 50)
  p.record({ component: 'actor', iteration: 2 }, 8, 130)
  p.record({ component: 'rollout' }, 8, 400)
  p.record({ component: 'rollout' }, 8, 600)
  p.record({ component: 'env', granularity: 16 }, 8, 10)
  p.record({ component: 'env', granularity: 32 }, 8, 30)
  t.same(p.samples(), [
    { component: 'actor', gpus: 8, granularity: null, iterations: 2, ops: 3, iterationMs: 140 },
    { component: 'env', gpus: 8, granularity: 16, iterations: 1, ops: 1, iterationMs: 10 },
    { component: 'env', gpus: 8, granularity: 32, iterations: 1, ops: 1, iterationMs: 30 },
    { component: 'rollout', gpus: 8, granularity: null, iterations: 2, ops: 2, iterationMs: 500 },
  ])
  for (let i = 0; i < keptIterations + 10; i++) p.record({ component: 'actor', iteration: 100 + i }, 8, i < 10 ? 1000 : 10)
  t.match(p.samples()[0], { iterations: keptIterations, iterationMs: 10 }, `the latest ${keptIterations} iterations`)
  // A new granularity with every operation: the series stay bounded, the latest kept.
  for (let g = 1; g <= 10 * keptSeries; g++) p.record({ component: 'env', granularity: g }, 8, g)
  const env = p.samples().filter(s => s.component === 'env')
  t.equal(p.samples().length, keptSeries, `${keptSeries} series at most`)
  t.same(env.map(s => s.granularity), Array.from({ length: keptSeries }, (_, i) => 10 * keptSeries - keptSeries + 1 + i), 'the most recently added to')
})
