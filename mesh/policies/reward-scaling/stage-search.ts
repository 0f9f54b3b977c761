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
 */
import type { BatchSimulation } from './batch-simulation.ts'
import type { RewardStage } from './types.ts'

export function searchStageWorkers (simulation: BatchSimulation, stages: readonly RewardStage[]): number[] {
  const workers = [...simulation.stageDemand]
  const byCost = stages.map((stage, j) => ({ cost: stage.cost, j })).sort((a, b) => b.cost - a.cost || a.j - b.j)
  for (const { j } of byCost) {
    if (simulation.stageDemand[j] === 0) continue
    let low = 1
    let high = simulation.stageDemand[j]!
    while (low < high) {
      workers[j] = Math.floor((low + high) / 2)
      if (simulation.meetsConstraint(workers)) high = workers[j]!
      else low = workers[j]! + 1
    }
    workers[j] = low
  }
  return workers
}
