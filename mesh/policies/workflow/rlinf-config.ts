/**
 * An RLinf training config (Hydra YAML) read as RLinf's auto-placement reads
 * it (toolkits/auto_placement): the cluster's size, the task type, the batch
 * and parallelism keys its cost models use, and the hand-entered
 * `profile_data`. Every other key is left alone, Hydra interpolations
 * (`${…}`) in them included. A key the planner reads may be a plain
 * interpolation of another key (`${data.rollout_batch_size}`, or relative:
 * `${.x}` a sibling, `${..x}` the parent's); a resolver (`${subtract:…}`)
 * there is refused, naming the key. Hydra's `defaults` list is not composed:
 * the keys must be in the file.
 *
 * Values are taken as written: no coercion of "128" to 128. Every bad key is
 * reported in one ERR_WORKFLOW_INVALID error.
 */
import { parse as parseYaml } from 'yaml'
import { AgentError } from '../../../core/errors.ts'

/** What the planner needs of a reasoning job (rollout → [inference →] actor). */
export interface RlinfReasoningJob {
  taskType: 'reasoning'
  totalGpus: number
  /** cluster.num_gpus_per_node was absent: 8 assumed. */
  gpusPerNodeAssumed: boolean
  groupSize: number
  nMinibatches: number
  rolloutBatchSize: number
  maxRunningRequests: number
  recomputeLogprobs: boolean
  seqLength?: number
  /** Model-parallel size (tensor × pipeline) per component. */
  modelParallel: { rollout: number, inference: number, actor: number }
  /** Seconds per iteration, measured collocated on all GPUs (profile_data.*_cost). */
  costS: { rollout: number, inference?: number, actor: number }
}

/** What the planner needs of an embodied job (env → env_rollout → actor). */
export interface RlinfEmbodiedJob {
  taskType: 'embodied'
  totalGpus: number
  gpusPerNodeAssumed: boolean
  envNum: number
  /** profile_data.actor_cost (or trainer_cost): seconds per iteration collocated on all GPUs. */
  actorCostS: number
  /** Seconds per iteration keyed by environments per instance (profile_data.env_profile_data). */
  envProfile: Map<number, number>
  /** The same for generation (profile_data.rollout_profile_data). */
  rolloutProfile: Map<number, number>
}

export type RlinfJob = RlinfReasoningJob | RlinfEmbodiedJob

/** RLinf's Cluster counts the GPUs it finds; a config file need not say. */
const defaultGpusPerNode = 8

/** The config's top-level mapping from YAML text (or an already parsed value); throws ERR_WORKFLOW_INVALID. */
export function parseRlinfRoot (input: unknown, source = 'RLinf config'): Record<string, unknown> {
  let root = input
  if (typeof input === 'string') {
    try {
      root = parseYaml(input)
    } catch (err) {
      throw new AgentError('ERR_WORKFLOW_INVALID', `${source} is not YAML: ${(err as Error).message}`, { cause: err })
    }
  }
  if (typeof root !== 'object' || root === null || Array.isArray(root)) throw new AgentError('ERR_WORKFLOW_INVALID', `${source}: not a mapping of keys`)
  return root as Record<string, unknown>
}

/** Parses RLinf YAML text (or an already parsed value); throws ERR_WORKFLOW_INVALID naming every bad key. */
export function parseRlinfConfig (input: unknown, source = 'RLinf config'): RlinfJob {
  const reader = createKeyReader(parseRlinfRoot(input, source))
  const job = readJob(reader)
  if (reader.issues.length > 0 || job === undefined) {
    throw new AgentError('ERR_WORKFLOW_INVALID', `${source}: ${reader.issues.map(i => `${i.key}: ${i.message}`).join('; ')}`, { details: { issues: reader.issues } })
  }
  return job
}

function readJob (r: KeyReader): RlinfJob | undefined {
  const nodes = r.integer('cluster.num_nodes', { min: 1 })
  const perNode = r.integer('cluster.num_gpus_per_node', { min: 1, optional: true })
  const taskType = r.choice('runner.task_type', ['reasoning', 'math', 'embodied'])
  const totalGpus = nodes === undefined ? undefined : nodes * (perNode ?? defaultGpusPerNode)
  const gpusPerNodeAssumed = perNode === undefined
  // Without the task type the keys to read are unknown: reporting every key of both kinds would bury the one that matters.
  if (taskType === undefined) return undefined
  if (taskType === 'embodied') {
    const envNum = r.integer('data.env_num', { min: 1 })
    const actorCostS = actorCost(r)
    const envProfile = r.profilePoints('profile_data.env_profile_data')
    const rolloutProfile = r.profilePoints('profile_data.rollout_profile_data')
    if (totalGpus === undefined || envNum === undefined || actorCostS === undefined || envProfile === undefined || rolloutProfile === undefined) return undefined
    return { taskType: 'embodied', totalGpus, gpusPerNodeAssumed, envNum, actorCostS, envProfile, rolloutProfile }
  }
  const groupSize = r.integer('algorithm.group_size', { min: 1 })
  const nMinibatches = r.integer('algorithm.n_minibatches', { min: 1 })
  const recomputeLogprobs = r.boolean('algorithm.recompute_logprobs')
  const rolloutBatchSize = r.integer('data.rollout_batch_size', { min: 1 })
  const maxRunningRequests = r.integer('rollout.max_running_requests', { min: 1 })
  const seqLength = r.integer('runner.seq_length', { min: 1, optional: true })
  const parallel = (prefix: string, tp: string, pp: string, fallback?: number): number | undefined => {
    const t = r.integer(`${prefix}.${tp}`, { min: 1, optional: true })
    const p = r.integer(`${prefix}.${pp}`, { min: 1, optional: true })
    if (t === undefined && p === undefined && fallback !== undefined) return fallback
    return (t ?? 1) * (p ?? 1)
  }
  const rolloutMp = parallel('rollout', 'tensor_parallel_size', 'pipeline_parallel_size')
  const actorMp = parallel('actor.model', 'tensor_model_parallel_size', 'pipeline_model_parallel_size')
  const inferenceMp = parallel('inference.model', 'tensor_model_parallel_size', 'pipeline_model_parallel_size', actorMp)
  const actorS = actorCost(r)
  const rolloutS = r.seconds('profile_data.rollout_cost')
  const inferenceS = recomputeLogprobs === true ? r.seconds('profile_data.inference_cost') : undefined
  if (totalGpus === undefined || groupSize === undefined || nMinibatches === undefined || recomputeLogprobs === undefined ||
    rolloutBatchSize === undefined || maxRunningRequests === undefined || rolloutMp === undefined || actorMp === undefined || inferenceMp === undefined ||
    actorS === undefined || rolloutS === undefined || (recomputeLogprobs && inferenceS === undefined)) return undefined
  if ((rolloutBatchSize * groupSize) % nMinibatches !== 0) {
    r.issue('algorithm.n_minibatches', `${nMinibatches} does not divide data.rollout_batch_size × algorithm.group_size = ${rolloutBatchSize * groupSize} (RLinf asserts it)`)
  }
  for (const [key, mp] of [['rollout.tensor_parallel_size', rolloutMp], ['actor.model.tensor_model_parallel_size', actorMp], ['inference.model.tensor_model_parallel_size', inferenceMp]] as const) {
    if (mp > totalGpus) r.issue(key, `a model-parallel size of ${mp} (tensor × pipeline) is more than the cluster's ${totalGpus} GPUs`)
  }
  if (r.issues.length > 0) return undefined
  return {
    taskType: 'reasoning',
    totalGpus,
    gpusPerNodeAssumed,
    groupSize,
    nMinibatches,
    rolloutBatchSize,
    maxRunningRequests,
    recomputeLogprobs,
    ...(seqLength !== undefined ? { seqLength } : {}),
    modelParallel: { rollout: rolloutMp, inference: inferenceMp, actor: actorMp },
    costS: { rollout: rolloutS, actor: actorS, ...(inferenceS !== undefined ? { inference: inferenceS } : {}) },
  }
}

/** profile_data.actor_cost, or its other name trainer_cost (one of them, not both). */
function actorCost (r: KeyReader): number | undefined {
  const both = r.has('profile_data.actor_cost') && r.has('profile_data.trainer_cost')
  if (both) { r.issue('profile_data.trainer_cost', 'give actor_cost or trainer_cost, not both'); return undefined }
  return r.seconds(r.has('profile_data.trainer_cost') ? 'profile_data.trainer_cost' : 'profile_data.actor_cost')
}

interface KeyReader {
  issues: Array<{ key: string, message: string }>
  issue(key: string, message: string): void
  has(key: string): boolean
  integer(key: string, o: { min: number, optional?: boolean }): number | undefined
  /** Seconds > 0. */
  seconds(key: string): number | undefined
  boolean(key: string): boolean | undefined
  choice<T extends string>(key: string, choices: readonly T[]): T | undefined
  /** A mapping of environments per instance (integer keys) to seconds (> 0). */
  profilePoints(key: string): Map<number, number> | undefined
}

function createKeyReader (root: Record<string, unknown>): KeyReader {
  const issues: KeyReader['issues'] = []
  const issue = (key: string, message: string): void => { issues.push({ key, message }) }
  const lookup = (path: readonly string[]): { found: boolean, value?: unknown } => {
    let at: unknown = root
    for (const part of path) {
      if (typeof at !== 'object' || at === null || !Object.hasOwn(at, part)) return { found: false }
      at = (at as Record<string, unknown>)[part]
    }
    return { found: true, value: at }
  }
  /** The key's value with plain interpolations followed; undefined (and an issue) when it cannot be. */
  const resolved = (key: string): { found: boolean, value?: unknown } => {
    let path = key.split('.')
    let got = lookup(path)
    for (let hops = 0; got.found && typeof got.value === 'string'; hops++) {
      const text = got.value.trim()
      if (!text.startsWith('${') || !text.endsWith('}')) break
      const ref = text.slice(2, -1).trim()
      if (ref.includes(':') || ref.includes('${')) { issue(key, `${JSON.stringify(got.value)} uses a Hydra resolver, which the planner does not evaluate: write the value`); return { found: false } }
      if (!/^\.*[\w-]+(\.[\w-]+)*$/.test(ref)) { issue(key, `${JSON.stringify(got.value)} is not an interpolation the planner follows (\${a.b}, \${.sibling})`); return { found: false } }
      if (hops >= 16) { issue(key, `interpolations of ${JSON.stringify(key)} do not end (a cycle?)`); return { found: false } }
      const dots = /^\.*/.exec(ref)![0].length
      const rest = ref.slice(dots).split('.').filter(Boolean)
      // ${.x}: a sibling of the key holding it; each further dot goes up one level.
      path = dots === 0 ? rest : [...path.slice(0, Math.max(0, path.length - dots)), ...rest]
      got = lookup(path)
      if (!got.found) { issue(key, `${JSON.stringify(text)} names ${path.join('.')}, which the file does not have`); return { found: false } }
    }
    return got
  }
  const shown = (v: unknown): string => JSON.stringify(v) ?? String(v)
  /** Reports a missing key, unless resolving it already reported why. */
  const missing = (key: string, why: string): undefined => {
    if (!issues.some(i => i.key === key)) issue(key, `missing: ${why}`)
    return undefined
  }
  return {
    issues,
    issue,
    has: key => lookup(key.split('.')).found,
    integer (key, o) {
      const got = resolved(key)
      if (!got.found || got.value === null) return o.optional ? undefined : missing(key, 'RLinf\'s auto-placement reads it')
      if (!Number.isSafeInteger(got.value) || (got.value as number) < o.min) { issue(key, `expected an integer >= ${o.min}, got ${shown(got.value)}`); return undefined }
      return got.value as number
    },
    seconds (key) {
      const got = resolved(key)
      if (!got.found || got.value === null) return missing(key, 'the profiled seconds per iteration, collocated on all GPUs')
      if (typeof got.value !== 'number' || !Number.isFinite(got.value) || got.value <= 0) { issue(key, `expected seconds > 0, got ${shown(got.value)}`); return undefined }
      return got.value
    },
    boolean (key) {
      const got = resolved(key)
      if (!got.found) return missing(key, 'it decides whether inference is a component')
      if (typeof got.value !== 'boolean') { issue(key, `expected true or false, got ${shown(got.value)}`); return undefined }
      return got.value
    },
    choice (key, choices) {
      const got = resolved(key)
      if (!got.found) return missing(key, `one of ${choices.join(', ')}`)
      if (!choices.includes(got.value as never)) { issue(key, `expected one of ${choices.join(', ')}, got ${shown(got.value)}`); return undefined }
      return got.value as (typeof choices)[number]
    },
    profilePoints (key) {
      const got = resolved(key)
      if (!got.found) return missing(key, 'seconds per iteration keyed by environments per instance')
      if (typeof got.value !== 'object' || got.value === null || Array.isArray(got.value)) { issue(key, `expected a mapping of environments per instance to seconds, got ${shown(got.value)}`); return undefined }
      const points = new Map<number, number>()
      for (const [k, v] of Object.entries(got.value)) {
        const envs = /^[1-9]\d*$/.test(k) ? Number(k) : Number.NaN
        if (!Number.isSafeInteger(envs)) { issue(`${key}.${k}`, 'expected a key that is a number of environments (an integer >= 1)'); continue }
        if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) { issue(`${key}.${k}`, `expected seconds > 0, got ${shown(v)}`); continue }
        points.set(envs, v)
      }
      if (points.size < 2) issue(key, `${points.size} usable point${points.size === 1 ? '' : 's'}; the fitted curve needs two at least`)
      return points.size >= 2 ? points : undefined
    },
  }
}
