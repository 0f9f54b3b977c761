/**
 * RLinf's cost models (toolkits/auto_placement/node.py), per component kind:
 * from one job (rlinf-config.ts) to each component's time on every GPU
 * count g of the cluster (G GPUs), or none where RLinf would not place it.
 *
 * - Megatron actor and inference, from the collocated cost c on G GPUs:
 *   c·s / (1 + clamp(s/10, 0.1, 0.9)), s = G/g; g = data-parallel size ×
 *   model-parallel size, where the trainer's micro-step batch
 *   (rollout_batch × group / n_minibatches) divides by dp × group. At G: c.
 * - Rollout: c while its instances (g / model-parallel size) hold every
 *   request of the batch at once: instances × ⌈max_running_requests × q⌉ ≥
 *   rollout_batch × group, q = 0.9 from 128 requests up (RLinf's margin for
 *   queueing); below that c·G/g.
 * - Embodied env and env_rollout: the curve fitted to the profile points
 *   (curve-fit.ts) at environments per instance; env needs the environments
 *   split evenly (env_num divisible by g), generation takes ⌊env_num / g⌋;
 *   none beyond the largest profiled count per instance.
 *
 * Units: reasoning costs are per group batch (c / rollout_batch) and an
 * iteration is rollout_batch of them; embodied costs are per iteration and
 * a "group batch" is one environment's share (c / env_num), RLinf's
 * conventions, which its pipelined formula (rlinf-planner.ts) relies on.
 */
import { fitProfileCurve } from './curve-fit.ts'
import type { RlinfEmbodiedJob, RlinfJob, RlinfReasoningJob } from './rlinf-config.ts'

export interface RlinfComponentCost {
  /** The planner's name: rollout, inference, actor; env, env_rollout. */
  role: string
  /** The name in RLinf's cluster.component_placement (env_rollout is "rollout" there). */
  placementName: string
  /** Seconds per iteration on g GPUs (index g, 1..G); NaN where it cannot be placed on g. */
  iterationS: Float64Array
  /** Seconds per group batch on g GPUs (the pipelined formula's unit); NaN likewise. */
  groupBatchS: Float64Array
  /** How its costs were derived, one line. */
  model: string
}

export interface RlinfCostModel {
  totalGpus: number
  /** Group batches per iteration: rollout_batch_size (reasoning), 1 (embodied, RLinf's convention). */
  groupBatches: number
  /** In data-flow order: rollout → [inference →] actor, or env → env_rollout → actor. */
  components: RlinfComponentCost[]
}

export function rlinfCostModel (job: RlinfJob): RlinfCostModel {
  return job.taskType === 'reasoning' ? reasoningCosts(job) : embodiedCosts(job)
}

function reasoningCosts (job: RlinfReasoningJob): RlinfCostModel {
  const G = job.totalGpus
  const B = job.rolloutBatchSize
  const iteration = (table: Float64Array): Float64Array => table.map(v => v * B)
  const rolloutTable = rolloutCosts(G, job.costS.rollout / B, job.modelParallel.rollout, job.maxRunningRequests, B * job.groupSize)
  const components: RlinfComponentCost[] = [{
    role: 'rollout',
    placementName: 'rollout',
    iterationS: iteration(rolloutTable),
    groupBatchS: rolloutTable,
    model: `rollout: ${job.costS.rollout} s collocated; unchanged while its instances hold all ${B * job.groupSize} requests at once, else × G/g`,
  }]
  const trainerBatch = (B * job.groupSize) / job.nMinibatches
  const megatron = (role: 'inference' | 'actor', costS: number): RlinfComponentCost => {
    const table = megatronCosts(G, costS / B, job.modelParallel[role], trainerBatch, job.groupSize)
    return { role, placementName: role, iterationS: iteration(table), groupBatchS: table, model: `${role}: ${costS} s collocated; Megatron scaling c·s/(1 + clamp(s/10, 0.1, 0.9)), s = G/g` }
  }
  if (job.recomputeLogprobs) components.push(megatron('inference', job.costS.inference!))
  components.push(megatron('actor', job.costS.actor))
  return { totalGpus: G, groupBatches: B, components }
}

function embodiedCosts (job: RlinfEmbodiedJob): RlinfCostModel {
  const G = job.totalGpus
  const envCurve = fitProfileCurve(job.envProfile, 'profile_data.env_profile_data')
  const rolloutCurve = fitProfileCurve(job.rolloutProfile, 'profile_data.rollout_profile_data')
  const envTable = new Float64Array(G + 1).fill(Number.NaN)
  const rolloutTable = new Float64Array(G + 1).fill(Number.NaN)
  const maxEnvs = Math.max(...job.envProfile.keys())
  const maxRolloutEnvs = Math.max(...job.rolloutProfile.keys())
  // A curve extrapolated below the profiled counts can predict no time at all: that is no prediction, and
  // the count is not placed (RLinf would plan with it).
  const usable = (s: number): number => s > 0 && Number.isFinite(s) ? s : Number.NaN
  for (let g = 1; g <= G; g++) {
    if (job.envNum % g === 0 && job.envNum / g <= maxEnvs) envTable[g] = usable(envCurve.at(job.envNum / g))
    // Generation's instances take ⌊env_num / g⌋ each (RLinf does not require an even split). An instance
    // without a single environment is not placed (RLinf would price it on the curve at 0).
    const each = Math.floor(job.envNum / g)
    if (each >= 1 && each <= maxRolloutEnvs) rolloutTable[g] = usable(rolloutCurve.at(each))
  }
  // RLinf builds the embodied actor with a batch of one group of one, so below G only g = 1 (dp = 1) is valid.
  const actorTable = megatronCosts(G, job.actorCostS, 1, 1, 1)
  const perGroup = (table: Float64Array): Float64Array => table.map(v => v / job.envNum)
  const fitted = (what: string, c: ReturnType<typeof fitProfileCurve>): string => `${what}: ${c.kind} fit of its profile (R² ${c.rSquared.toFixed(3)}) at environments per instance`
  return {
    totalGpus: G,
    groupBatches: 1,
    components: [
      { role: 'env', placementName: 'env', iterationS: envTable, groupBatchS: perGroup(envTable), model: fitted('env', envCurve) },
      { role: 'env_rollout', placementName: 'rollout', iterationS: rolloutTable, groupBatchS: perGroup(rolloutTable), model: fitted('env_rollout', rolloutCurve) },
      { role: 'actor', placementName: 'actor', iterationS: actorTable, groupBatchS: perGroup(actorTable), model: `actor: ${job.actorCostS} s collocated, on all GPUs (RLinf keeps the embodied actor there)` },
    ],
  }
}

/** Megatron's cost on g GPUs over its collocated cost on G: s / (1 + clamp(s/10, 0.1, 0.9)), s = G/g; 1 at g = G. */
export function megatronScale (G: number, g: number): number {
  if (g === G) return 1
  const s = G / g
  return s / (1 + Math.min(0.9, Math.max(s / 10, 0.1)))
}

/** Rollout's cost on g GPUs over its collocated cost on G: 1 while its instances hold all `requests` at once, else G/g. */
export function rolloutScale (G: number, g: number, modelParallel: number, maxRunningRequests: number, requests: number): number {
  if (g === G) return 1
  const perInstance = Math.ceil(maxRunningRequests * (maxRunningRequests >= 128 ? 0.9 : 1))
  return Math.floor(g / modelParallel) * perInstance >= requests ? 1 : G / g
}

/** Megatron's per-group-batch cost on g GPUs from `collocated` on G (NaN where g is not a valid dp × mp). */
export function megatronCosts (G: number, collocated: number, modelParallel: number, trainerBatch: number, groupSize: number): Float64Array {
  const table = new Float64Array(G + 1).fill(Number.NaN)
  for (let dp = 1; dp * modelParallel < G; dp++) {
    if (trainerBatch % (dp * groupSize) !== 0) continue
    table[dp * modelParallel] = collocated * megatronScale(G, dp * modelParallel)
  }
  table[G] = collocated
  return table
}

/** Rollout's per-group-batch cost on g GPUs (NaN where g is not a multiple of its model-parallel size). */
export function rolloutCosts (G: number, collocated: number, modelParallel: number, maxRunningRequests: number, requests: number): Float64Array {
  const table = new Float64Array(G + 1).fill(Number.NaN)
  for (let g = modelParallel; g < G; g += modelParallel) table[g] = collocated * rolloutScale(G, g, modelParallel, maxRunningRequests, requests)
  table[G] = collocated
  return table
}
