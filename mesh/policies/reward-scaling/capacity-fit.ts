/**
 * Fits a scaling decision's workers per stage into the capacity the cluster
 * has (DistRS Alg. 1 sizes each stage as if workers were unlimited; a live
 * cluster has so many cores and GPUs). Pure: the leader, the tests and a
 * simulator call the same function over a snapshot.
 *
 * Rules, per resource (cpu stages share the cores, gpu stages the GPUs):
 * - When the wanted workers fit, they are the plan (not capacity-bound).
 * - A resource nobody reported (capacity 0) is left as wanted: nothing can be
 *   placed, the placement reports it unplaced, and the leader re-plans when
 *   an agent reports.
 * - Otherwise the capacity is split. A stage "has work" when requests wait or
 *   run at it now, or the estimated requests (Alg. 2) need it, or a batch
 *   without history may still bring requests to it. First every stage with
 *   work gets one worker, in this order: stages with requests at them now,
 *   the last in the pipeline first (their requests are closest to done, so
 *   the pipeline drains), then stages with only future work, pipeline order.
 *   Then each remaining worker goes, one at a time, to the stage where it
 *   shortens the simulated completion of the active batches most (SIMULATE of
 *   Alg. 1 over the Alg. 2 estimates: the DistRS search, constrained by
 *   capacity); a stage never gets more than the unconstrained plan wanted.
 *   Ties (and batches without history, which cannot be simulated) go to the
 *   stage furthest below what it wanted, relative to it.
 * - More stages with work than workers fit: the stages left without one are
 *   `waiting`. They take turns: requests queued at a stage without a worker
 *   make the leader plan again, and as stages further down drain, the stages
 *   with requests now get the workers. Nothing waits for ever: the stage
 *   timeout also bounds time spent queued (reward-proxy.ts).
 */
import { prepareBatchSimulation, type BatchSimulation } from './batch-simulation.ts'
import { collectRequestInformation } from './request-information.ts'
import type { PlannerSnapshot } from './types.ts'

export interface ClusterCapacity {
  /** CPU cores the agents offer to cpu-stage workers, in all. */
  readonly cpuCores: number
  /** GPUs the agents offer to gpu-stage workers, in all. */
  readonly gpus: number
  /** Per stage (snapshot order): units one worker holds, cores for a cpu stage, GPUs (1) for a gpu stage. >= 1. */
  readonly unitsPerWorker: readonly number[]
}

export interface CapacityFit {
  /** Workers per stage that fit the capacity. */
  readonly workers: number[]
  /** The wanted workers did not fit: the plan was cut down. */
  readonly capacityBound: boolean
  /** Per stage: wanted − workers (0 when not capacity-bound). */
  readonly shortBy: number[]
  /** Stages with work and no worker in this plan (more stages with work than capacity): they take turns. */
  readonly waiting: number[]
  /** The plan's simulated completion of the last active batch, seconds from now; null when nothing could be simulated. */
  readonly predictedCompletionS: number | null
}

export function fitWorkersToCapacity (snapshot: PlannerSnapshot, wanted: readonly number[], capacity: ClusterCapacity): CapacityFit {
  const stageCount = snapshot.stages.length
  if (wanted.length !== stageCount || capacity.unitsPerWorker.length !== stageCount) {
    throw new RangeError(`need ${stageCount} wanted counts and units per worker, got ${wanted.length} and ${capacity.unitsPerWorker.length}`)
  }
  const units = capacity.unitsPerWorker.map(u => Math.max(1, Math.floor(u)))
  const want = wanted.map(w => Math.max(0, Math.floor(w)))
  const resourceOf = (j: number): 'cpu' | 'gpu' => snapshot.stages[j]!.resource
  const budget = { cpu: Math.max(0, Math.floor(capacity.cpuCores)), gpu: Math.max(0, Math.floor(capacity.gpus)) }
  const wantedUnits = { cpu: 0, gpu: 0 }
  want.forEach((w, j) => { wantedUnits[resourceOf(j)] += w * units[j]! })
  const bound = { cpu: budget.cpu > 0 && wantedUnits.cpu > budget.cpu, gpu: budget.gpu > 0 && wantedUnits.gpu > budget.gpu }

  const { present, hasWork, simulation } = stageWork(snapshot)
  const objective = (workers: readonly number[]): Completion => completionOf(simulation, workers, snapshot.nowS)

  if (!bound.cpu && !bound.gpu) {
    return { workers: want, capacityBound: false, shortBy: want.map(() => 0), waiting: [], predictedCompletionS: objective(want).latestS }
  }

  const workers = want.map((w, j) => bound[resourceOf(j)] ? 0 : w)
  const free = { cpu: bound.cpu ? budget.cpu : 0, gpu: bound.gpu ? budget.gpu : 0 }
  const constrained = want.map((_, j) => bound[resourceOf(j)] && hasWork[j]! && want[j]! > 0)

  // One worker each, stages with requests now (last first), then those with only future work (pipeline order).
  const floorOrder = [
    ...want.map((_, j) => j).filter(j => constrained[j] && present[j]! > 0).reverse(),
    ...want.map((_, j) => j).filter(j => constrained[j] && present[j] === 0),
  ]
  for (const j of floorOrder) {
    const r = resourceOf(j)
    if (free[r] >= units[j]!) { workers[j] = 1; free[r] -= units[j]! }
  }

  // The rest one at a time, where the simulated completion drops most.
  for (;;) {
    let best = -1
    let bestCompletion: Completion | undefined
    for (let j = 0; j < stageCount; j++) {
      if (!constrained[j] || workers[j]! >= want[j]! || free[resourceOf(j)] < units[j]!) continue
      workers[j]!++
      const completion = objective(workers)
      workers[j]!--
      if (best === -1 || isEarlier(completion, bestCompletion!) ||
        (!isEarlier(bestCompletion!, completion) && want[j]! / (workers[j]! + 1) > want[best]! / (workers[best]! + 1))) {
        best = j
        bestCompletion = completion
      }
    }
    if (best === -1) break
    workers[best]!++
    free[resourceOf(best)] -= units[best]!
  }

  return {
    workers,
    capacityBound: true,
    shortBy: want.map((w, j) => w - workers[j]!),
    waiting: want.map((_, j) => j).filter(j => hasWork[j]! && workers[j] === 0),
    predictedCompletionS: objective(workers).latestS,
  }
}

interface StageWork {
  /** Requests waiting or running at each stage now. */
  present: number[]
  hasWork: boolean[]
  /** SIMULATE over the Alg. 2 estimates of the batches with history; null when there are none. */
  simulation: BatchSimulation | null
}

function stageWork (snapshot: PlannerSnapshot): StageWork {
  const stageCount = snapshot.stages.length
  const present = new Array<number>(stageCount).fill(0)
  const hasWork = new Array<boolean>(stageCount).fill(false)
  for (const batch of snapshot.batches) for (const r of batch.inFlight) present[r.stage]!++
  const { requests, withoutHistory } = collectRequestInformation(snapshot)
  // A batch without history may still bring requests to every stage from its earliest one in use.
  for (const b of withoutHistory) {
    const batch = snapshot.batches[b]!
    const toArrive = batch.size - batch.completed - batch.inFlight.length
    const from = toArrive > 0 ? 0 : Math.min(stageCount, ...batch.inFlight.map(r => r.stage))
    for (let k = from; k < stageCount; k++) hasWork[k] = true
  }
  let simulation: BatchSimulation | null = null
  if (requests.length > 0) {
    simulation = prepareBatchSimulation({
      stages: snapshot.stages,
      requests,
      batchPriorityS: snapshot.batches.map(b => b.priorityS),
      maxExtraDelayS: snapshot.maxExtraDelayS,
      discipline: 'ebf',
      timeoutAware: false,
    })
    simulation.stageDemand.forEach((d, k) => { if (d > 0) hasWork[k] = true })
  }
  present.forEach((n, k) => { if (n > 0) hasWork[k] = true })
  return { present, hasWork, simulation }
}

/** Simulated completions of the active batches: how many never complete (a stage with work and no worker), and the sum and latest of the others. */
interface Completion { never: number, sumS: number, latestS: number | null }

function completionOf (simulation: BatchSimulation | null, workers: readonly number[], nowS: number): Completion {
  if (simulation === null) return { never: 0, sumS: 0, latestS: null }
  let never = 0
  let sumS = 0
  let latestS: number | null = null
  for (const t of simulation.run(workers).batchCompletionS) {
    if (t === -Infinity) continue
    if (t === Infinity) { never++; continue }
    sumS += t - nowS
    latestS = Math.max(latestS ?? 0, t - nowS)
  }
  return { never, sumS, latestS }
}

const completionEpsilonS = 1e-9

function isEarlier (a: Completion, b: Completion): boolean {
  if (a.never !== b.never) return a.never < b.never
  return a.sumS < b.sumS - completionEpsilonS
}
