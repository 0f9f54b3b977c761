/**
 * An RLinf config's `profile_data` from a live job's measured profile
 * (mesh/control/jobs/component-profile.ts) instead of numbers entered by
 * hand: `agentctl plan workflow CONFIG --job ID`.
 *
 * Which measurement fills which key:
 * - reasoning: component `rollout` → rollout_cost, `inference` →
 *   inference_cost, `actor` → actor_cost (trainer_cost where the config names
 *   it so). The live job is taken to run the config's batch, so its time per
 *   iteration is the cost at its own GPU count g. RLinf's keys are the cost
 *   collocated on all G GPUs: at g = G the measurement is the key
 *   ("measured"); otherwise the component's cost model (rlinf-cost-models.ts)
 *   is inverted from g to G ("extrapolated"): c = m / scale(g), with the
 *   scale the forward model uses (megatronScale, rolloutScale): Megatron
 *   c = m·(1 + clamp(s/10, 0.1, 0.9))/s with s = G/g; rollout c = m while its
 *   instances at g hold the whole batch, else m·g/G. Of several GPU counts
 *   the one nearest G is used; granularities at that count are pooled
 *   (weighted by iterations).
 * - embodied: `env` → env_profile_data and `env_rollout` →
 *   rollout_profile_data, one point per measured granularity (environments
 *   per instance; a point per instance, so the job's GPU count does not
 *   matter), replacing the config's point at the same count and keeping its
 *   others; `actor` → actor_cost as above (Megatron, model-parallel 1).
 * - A key with no measurement keeps the config's value ("config"); a key
 *   the planner needs that has neither is refused, naming the component
 *   whose operations would fill it.
 * The config's other keys are read as without --job (rlinf-config.ts).
 */
import { AgentError } from '../../../core/errors.ts'
import { parseRlinfConfig, parseRlinfRoot, type RlinfJob } from './rlinf-config.ts'
import { megatronScale, rolloutScale } from './rlinf-cost-models.ts'

/** One measured series of a live job's component (what `GET /v1/jobs/top` gives per job: mesh/control/jobs/component-profile.ts). */
export interface ComponentSample {
  component: string
  gpus: number
  /** Environments per instance (env components) or the batch; null: not given. */
  granularity: number | null
  iterations: number
  ops: number
  /** Mean time per iteration, ms. */
  iterationMs: number
}

export interface ProfileSource {
  /** The profile_data key, e.g. profile_data.rollout_cost. */
  key: string
  source: 'measured' | 'extrapolated' | 'config'
  /** How it was derived, one line. */
  detail: string
}

export interface MeasuredRlinfJob {
  job: RlinfJob
  sources: ProfileSource[]
}

/** Placeholders that let the config's other keys be read before the measured costs are known (they are never planned with). */
const placeholders: Record<string, unknown> = {
  actor_cost: 1, rollout_cost: 1, inference_cost: 1, env_profile_data: { 1: 1, 2: 1 }, rollout_profile_data: { 1: 1, 2: 1 },
}

/** Parses `text` (RLinf YAML) with profile_data filled from `samples` of live job `jobId`; throws ERR_WORKFLOW_INVALID. */
export function rlinfJobFromMeasurements (text: string, source: string, jobId: string, samples: readonly ComponentSample[]): MeasuredRlinfJob {
  const config = parseRlinfRoot(text, source)
  const given = isMapping(config.profile_data) ? config.profile_data : {}
  const actorKey = Object.hasOwn(given, 'trainer_cost') ? 'trainer_cost' : 'actor_cost'
  // The shape of the job (GPUs, batch, parallelism) with the config's own profile where it has one.
  const filled = { ...placeholders, ...(actorKey === 'trainer_cost' ? { actor_cost: undefined } : {}), ...given }
  const shape = parseRlinfConfig({ ...config, profile_data: withoutUndefined(filled) }, source)

  const measured: Record<string, unknown> = {}
  const sources: ProfileSource[] = []
  const missing: string[] = []
  const of = (component: string): ComponentSample[] => samples.filter(s => s.component === component && s.gpus > 0 && s.iterations > 0)
  const cost = (key: string, component: string, collocated: (s: ComponentSample) => number): void => {
    const pick = nearest(of(component), shape.totalGpus)
    if (pick === undefined) {
      if (Object.hasOwn(given, key)) sources.push({ key: `profile_data.${key}`, source: 'config', detail: `the config's ${String(given[key])} s: job ${jobId} has no measured ${component} operation` })
      else missing.push(`profile_data.${key} (operations with component "${component}")`)
      return
    }
    const seconds = collocated(pick)
    measured[key] = seconds
    const over = `${pick.iterations} iteration${pick.iterations === 1 ? '' : 's'}, ${pick.ops} op${pick.ops === 1 ? '' : 's'}`
    sources.push(pick.gpus === shape.totalGpus
      ? { key: `profile_data.${key}`, source: 'measured', detail: `${seconds.toFixed(3)} s: ${component} of job ${jobId} on all ${pick.gpus} GPUs (${over})` }
      : { key: `profile_data.${key}`, source: 'extrapolated', detail: `${seconds.toFixed(3)} s on ${shape.totalGpus} GPUs from ${(pick.iterationMs / 1000).toFixed(3)} s measured on ${pick.gpus} (${component} of job ${jobId}, ${over})` })
  }
  const G = shape.totalGpus
  // The cost model's own scale from G to the measured count, undone.
  const megatron = (s: ComponentSample): number => s.iterationMs / 1000 / megatronScale(G, s.gpus)
  if (shape.taskType === 'reasoning') {
    const { modelParallel, maxRunningRequests, rolloutBatchSize, groupSize } = shape
    cost('rollout_cost', 'rollout', s => s.iterationMs / 1000 / rolloutScale(G, s.gpus, modelParallel.rollout, maxRunningRequests, rolloutBatchSize * groupSize))
    if (shape.recomputeLogprobs) cost('inference_cost', 'inference', megatron)
    cost(actorKey, 'actor', megatron)
  } else {
    points('env_profile_data', 'env')
    points('rollout_profile_data', 'env_rollout')
    cost(actorKey, 'actor', megatron)
  }
  if (missing.length > 0) {
    throw new AgentError('ERR_WORKFLOW_INVALID', `${source}: neither the config nor job ${jobId}'s measurements give ${missing.join(', ')}; run those operations with --component (or component= in the Python client), or write the key`)
  }
  const job = parseRlinfConfig({ ...config, profile_data: { ...given, ...measured } }, source)
  return { job, sources }

  /** A curve's points: measured granularities over the config's points. */
  function points (key: string, component: string): void {
    const byGranularity = new Map<number, { ms: number, iterations: number }>()
    for (const s of of(component)) {
      if (s.granularity === null) continue
      const p = byGranularity.get(s.granularity) ?? { ms: 0, iterations: 0 }
      p.ms += s.iterationMs * s.iterations
      p.iterations += s.iterations
      byGranularity.set(s.granularity, p)
    }
    const fromConfig = isMapping(given[key]) ? given[key] : {}
    if (byGranularity.size === 0) {
      if (Object.hasOwn(given, key)) sources.push({ key: `profile_data.${key}`, source: 'config', detail: `the config's points: job ${jobId} has no measured ${component} operation with a granularity` })
      else missing.push(`profile_data.${key} (operations with component "${component}" and a granularity, environments per instance)`)
      return
    }
    const merged: Record<string, unknown> = { ...fromConfig }
    for (const [envs, p] of byGranularity) merged[String(envs)] = p.ms / p.iterations / 1000
    measured[key] = merged
    const kept = Object.keys(fromConfig).filter(k => !byGranularity.has(Number(k)))
    const list = [...byGranularity.keys()].sort((a, b) => a - b).join(', ')
    sources.push({ key: `profile_data.${key}`, source: 'measured', detail: `${component} of job ${jobId} at ${list} environments per instance${kept.length > 0 ? `; the config's points at ${kept.join(', ')} kept` : ''}` })
  }
}

/** Of the samples, those at the GPU count nearest `gpus` (the larger on a tie), pooled; undefined when none. */
function nearest (samples: readonly ComponentSample[], gpus: number): ComponentSample | undefined {
  if (samples.length === 0) return undefined
  const distance = (s: ComponentSample): number => Math.abs(Math.log(s.gpus / gpus))
  const best = samples.reduce((a, b) => distance(b) < distance(a) || (distance(b) === distance(a) && b.gpus > a.gpus) ? b : a)
  const same = samples.filter(s => s.gpus === best.gpus)
  const iterations = same.reduce((n, s) => n + s.iterations, 0)
  return {
    component: best.component,
    gpus: best.gpus,
    granularity: same.length === 1 ? best.granularity : null,
    iterations,
    ops: same.reduce((n, s) => n + s.ops, 0),
    iterationMs: same.reduce((n, s) => n + s.iterationMs * s.iterations, 0) / iterations,
  }
}

function isMapping (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function withoutUndefined (o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined))
}
