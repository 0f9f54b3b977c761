/**
 * DistRS Algorithm 1 (simulation-based searching for scaling, §5.1): stages
 * in descending order of worker cost C_j (line 7, ties in pipeline order),
 * and for each a binary search over [1, B] (lines 9–17) for the fewest
 * workers whose SIMULATE still meets the batch constraint, with every stage
 * not yet searched held at B (line 6), so nothing queues there.
 *
 * B is per stage the number of estimated requests that need it (with that
 * many workers no request of the stage queues). A stage no request needs
 * gets 0 workers here; the policy decides the floor it keeps.
 *
 * SIMULATE is not monotone in a stage's workers (§5.1 assumes it is): with
 * EBF, shared workers and the timeout-aware check, one more worker can hand a
 * low-priority request the worker a protected request needed a moment later.
 * What the search still guarantees: a count only ever moves to a count
 * SIMULATE satisfied (B, line 6's start, satisfies: nothing queues anywhere),
 * and each stage's result minus one was seen to fail with the other stages
 * as they were then. The result is feasible and locally minimal; a smaller
 * feasible count below a failing one may exist and is not searched for.
 *
 * Re-search (`passes`): a stage sized early was sized with the later ones at
 * B, i.e. against the most bursty arrivals a pipeline can produce. Once every
 * stage is sized, the pass is repeated in the same order, each stage searched
 * over [1, its current count] with the others at their current counts, until
 * a pass changes nothing; a stage none of whose others changed since its last
 * search is not searched again. Counts never grow, and each is satisfied when
 * set. With two stages the second pass costs one search of the costliest
 * stage (the cheap one: the stage-prefix cache of SIMULATE replays the
 * earlier stages) unless that search lowers it.
 */
import type { BatchSimulation } from './batch-simulation.ts'
import type { RewardStage } from './types.ts'

export interface StageSearchOptions {
  /** Most passes over the stages (>= 1); 1 is Alg. 1 as written. Default 2. */
  readonly passes?: number
}

export function searchStageWorkers (simulation: BatchSimulation, stages: readonly RewardStage[], options: StageSearchOptions = {}): number[] {
  const passes = options.passes ?? 2
  if (!Number.isInteger(passes) || passes < 1) throw new RangeError(`passes must be an integer >= 1, got ${passes}`)
  const workers = [...simulation.stageDemand]
  const byCost = stages.map((stage, j) => ({ cost: stage.cost, j })).sort((a, b) => b.cost - a.cost || a.j - b.j)
  // A stage whose search would see the same other counts as its last one is skipped (SIMULATE is deterministic).
  let changes = 0
  const searchedAtChange = new Array<number>(stages.length).fill(-1)
  for (let pass = 0; pass < passes; pass++) {
    let changed = false
    for (const { j } of byCost) {
      if (simulation.stageDemand[j] === 0 || searchedAtChange[j] === changes) continue
      const before = workers[j]!
      let low = 1
      let high = before
      while (low < high) {
        workers[j] = Math.floor((low + high) / 2)
        if (simulation.meetsConstraint(workers)) high = workers[j]!
        else low = workers[j]! + 1
      }
      workers[j] = low
      if (low !== before) { changed = true; changes++ }
      searchedAtChange[j] = changes
    }
    if (!changed) break
  }
  return workers
}
