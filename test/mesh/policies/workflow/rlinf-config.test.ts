// An RLinf config read as RLinf's auto-placement reads it: the keys it uses, plain interpolations in
// them resolved, everything else (resolvers, Hydra's defaults) left alone; bad keys all named at once.
// And `agentctl plan workflow F.yaml` end to end.
import t from 'tap'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { stringify } from 'yaml'
import { parseRlinfConfig } from '../../../../mesh/policies/workflow/rlinf-config.ts'
import { agentctlMain, repoRoot, runNode, tempDir } from '../../../helpers/agent-process.ts'

const example = readFileSync(join(repoRoot, 'examples/rlinf-grpo.yaml'), 'utf8')

t.test('the example config: the keys the planner reads, interpolations followed, resolvers elsewhere ignored', async t => {
  const job = parseRlinfConfig(example, 'rlinf-grpo.yaml')
  t.same(job, {
    taskType: 'reasoning',
    totalGpus: 128,
    gpusPerNodeAssumed: false,
    groupSize: 16,
    nMinibatches: 4,
    rolloutBatchSize: 128,
    maxRunningRequests: 64,
    recomputeLogprobs: true,
    seqLength: 28672,
    modelParallel: { rollout: 1, inference: 2, actor: 2 },
    costS: { rollout: 59.9, actor: 95.7, inference: 30.8 },
  })
})

/** A Hydra interpolation, `${inner}` as written in a config. */
const hydra = (inner: string): string => `$\{${inner}}`

/** A minimal reasoning config as an object (YAML'd where a test needs text). */
const minimal = (): Record<string, any> => ({
  cluster: { num_nodes: 2 },
  runner: { task_type: 'math' },
  algorithm: { group_size: 8, n_minibatches: 2, recompute_logprobs: false },
  data: { rollout_batch_size: 64 },
  rollout: { max_running_requests: 128, tensor_parallel_size: 2 },
  actor: { model: { tensor_model_parallel_size: 4, pipeline_model_parallel_size: 2 } },
  profile_data: { trainer_cost: 50, rollout_cost: 80 },
})

t.test('defaults and aliases: 8 GPUs per node assumed and said, math is reasoning, trainer_cost is actor_cost, no inference without recompute', async t => {
  const job = parseRlinfConfig(stringify(minimal()))
  t.match(job, { taskType: 'reasoning', totalGpus: 16, gpusPerNodeAssumed: true, recomputeLogprobs: false, modelParallel: { rollout: 2, actor: 8, inference: 8 }, costS: { actor: 50, rollout: 80 } })
  t.notOk('inference' in (job as { costS: object }).costS, 'no inference cost needed or kept')
  const own = minimal()
  own.inference = { model: { tensor_model_parallel_size: 2 } }
  t.match(parseRlinfConfig(own), { modelParallel: { inference: 2 } }, 'inference.model.* given: its own model-parallel size')
})

t.test('relative interpolations, and chains of them', async t => {
  const c = minimal()
  c.data = { per_gpu: 32, rollout_batch_size: hydra('.size'), size: hydra('data.per_gpu') }
  c.actor.model.pipeline_model_parallel_size = hydra('..model.tensor_model_parallel_size')
  const job = parseRlinfConfig(c)
  t.match(job, { rolloutBatchSize: 32, modelParallel: { actor: 16 } })
})

t.test('embodied: env_num and the two profiles keyed by environments per instance', async t => {
  const job = parseRlinfConfig(stringify({
    cluster: { num_nodes: 1, num_gpus_per_node: 4 },
    runner: { task_type: 'embodied' },
    data: { env_num: 48 },
    profile_data: { actor_cost: 20, env_profile_data: { 12: 2, 24: 3.5, 48: 6 }, rollout_profile_data: { 16: 4, 24: 7, 48: 15 } },
  }))
  t.match(job, { taskType: 'embodied', totalGpus: 4, envNum: 48, actorCostS: 20 })
  t.same(job.taskType === 'embodied' ? [...job.envProfile] : [], [[12, 2], [24, 3.5], [48, 6]])
})

t.test('bad configs: ERR_WORKFLOW_INVALID naming every bad key at once, nothing coerced', async t => {
  const reject = (c: unknown, ...patterns: RegExp[]): void => {
    try {
      parseRlinfConfig(typeof c === 'string' ? c : stringify(c), 'job.yaml')
      t.fail(`accepted: ${JSON.stringify(c)}`)
    } catch (err) {
      t.equal((err as { code?: string }).code, 'ERR_WORKFLOW_INVALID')
      for (const p of patterns) t.match((err as Error).message, p)
    }
  }
  reject('cluster: [unclosed', /job.yaml is not YAML/)
  reject('- a list', /job.yaml: not a mapping of keys/)
  reject({ ...minimal(), runner: { task_type: 'vision' } }, /runner.task_type: expected one of reasoning, math, embodied, got "vision"/)
  reject({ ...minimal(), runner: {} }, /runner.task_type: missing/)
  const quoted = minimal()
  quoted.data.rollout_batch_size = '64'
  quoted.cluster.num_nodes = 0
  reject(quoted, /data.rollout_batch_size: expected an integer >= 1, got "64"/, /cluster.num_nodes: expected an integer >= 1, got 0/)
  const resolver = minimal()
  resolver.data.rollout_batch_size = hydra(`mul:${hydra('a')}, 2`)
  reject(resolver, /data.rollout_batch_size: "\$\{mul:\$\{a\}, 2\}" uses a Hydra resolver/)
  const dangling = minimal()
  dangling.rollout.max_running_requests = hydra('sglang.max_requests')
  reject(dangling, /rollout.max_running_requests: "\$\{sglang.max_requests\}" names sglang.max_requests, which the file does not have/)
  const cycle = minimal()
  cycle.data = { rollout_batch_size: hydra('data.b'), b: hydra('data.rollout_batch_size') }
  reject(cycle, /data.rollout_batch_size: interpolations .* do not end/)
  const both = minimal()
  both.profile_data.actor_cost = 50
  reject(both, /profile_data.trainer_cost: give actor_cost or trainer_cost, not both/)
  const recompute = minimal()
  recompute.algorithm.recompute_logprobs = true
  delete recompute.profile_data.rollout_cost
  reject(recompute, /profile_data.inference_cost: missing/, /profile_data.rollout_cost: missing/)
  const flag = minimal()
  flag.algorithm.recompute_logprobs = 'yes'
  reject(flag, /algorithm.recompute_logprobs: expected true or false, got "yes"/)
  const minibatches = minimal()
  minibatches.algorithm.n_minibatches = 3
  reject(minibatches, /algorithm.n_minibatches: 3 does not divide data.rollout_batch_size × algorithm.group_size = 512/)
  const tooWide = minimal()
  tooWide.actor.model.tensor_model_parallel_size = 16
  reject(tooWide, /actor.model.tensor_model_parallel_size: a model-parallel size of 32 .* more than the cluster's 16 GPUs/)
  const negative = minimal()
  negative.profile_data.rollout_cost = -1
  reject(negative, /profile_data.rollout_cost: expected seconds > 0, got -1/)
  reject({ cluster: { num_nodes: 1 }, runner: { task_type: 'embodied' }, data: { env_num: 8 }, profile_data: { actor_cost: 1, env_profile_data: { 4: 1, many: 2 }, rollout_profile_data: { 4: 1 } } },
    /profile_data.env_profile_data.many: expected a key that is a number of environments/, /profile_data.env_profile_data: 1 usable point/, /profile_data.rollout_profile_data: 1 usable point/)
})

t.test('agentctl plan workflow F.yaml: the plan, the block to paste, the runners-up; JSON as RLinf writes it plus ours', async t => {
  const json = await runNode(agentctlMain, ['plan', 'workflow', join(repoRoot, 'examples/rlinf-grpo.yaml'), '--json'])
  t.equal(json.code, 0, json.stderr)
  const plan = JSON.parse(json.stdout)
  t.same(Object.keys(plan), ['mode', 'iterationS', 'components', 'componentPlacement', 'runnersUp', 'costModels'])
  t.equal(plan.mode, 'disaggregated')
  t.same(plan.components, [{ name: 'rollout', gpus: [0, 32] }, { name: 'inference', gpus: [32, 64] }, { name: 'actor', gpus: [64, 128] }])
  t.same(plan.componentPlacement, { rollout: '0-31', inference: '32-63', actor: '64-127' })
  t.match(plan.runnersUp, [{ mode: 'collocated', componentPlacement: { 'rollout,actor': 'all' } }])
  const human = await runNode(agentctlMain, ['plan', 'workflow', join(repoRoot, 'examples/rlinf-grpo.yaml')])
  t.equal(human.code, 0, human.stderr)
  t.match(human.stdout, /mode {8}disaggregated\niteration {3}160\.7 s predicted/)
  t.match(human.stdout, /cluster:\n {2}component_placement:\n {4}rollout: 0-31\n {4}inference: 32-63\n {4}actor: 64-127\n/)
  t.match(human.stdout, /runners-up:\nMODE\s+ITERATION_S\s+PLACEMENT\ncollocated\s+186\.4\s+rollout,actor: all/)

  const dir = tempDir(t)
  const bad = join(dir, 'bad.yml')
  writeFileSync(bad, stringify({ ...minimal(), profile_data: {} }))
  const refused = await runNode(agentctlMain, ['plan', 'workflow', bad, '--json'])
  t.equal(refused.code, 1)
  const body = JSON.parse(refused.stdout)
  t.equal(body.error.code, 'ERR_WORKFLOW_INVALID')
  t.match(body.error.message, /profile_data.actor_cost: missing.*profile_data.rollout_cost: missing/)
})
