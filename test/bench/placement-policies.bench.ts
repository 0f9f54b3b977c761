/**
 * Placement policies on generated traces (PlexRL §6.3, Fig. 8): makespan
 * (time to drain the trace) and the normalized queue delay distribution
 * (wait / own run time) of pack, spread and spread-backfill, against the
 * isolated baseline simulated on the same trace in the same run.
 * Goals: spread-backfill makespan <= 60 % of isolated's (PlexRL: 56 %), pack
 * and spread in between, a far lighter delay tail than isolated's.
 *
 *   node_modules/.bin/node test/bench/placement-policies.bench.ts [--jobs 300] [--nodes 32] [--seeds 1,2,3]
 */
import { parseArgs } from 'node:util'
import { generatePlacementTrace } from '../../mesh/sim/placement-trace.ts'
import { simulatePlacement, type PlacementSimResult } from '../../mesh/sim/placement-sim.ts'
import { placementPolicyNames } from '../../mesh/policies/placement/placement-policy.ts'
import { median } from './bench-stats.ts'

const { values } = parseArgs({ options: { jobs: { type: 'string', default: '300' }, nodes: { type: 'string', default: '32' }, seeds: { type: 'string', default: '1,2,3' } } })
const jobs = Number(values.jobs)
const nodes = Number(values.nodes)
const seeds = values.seeds.split(',').map(Number)

const ratios = new Map<string, number[]>(placementPolicyNames.map(p => [p, []]))
const strictRatios: number[] = []
console.log(`${jobs} jobs on ${nodes} nodes per trace, seeds ${seeds.join(',')}; ratios are makespan / isolated makespan of the same trace`)
for (const seed of seeds) {
  const trace = generatePlacementTrace({ jobs, nodes, seed })
  const results: PlacementSimResult[] = placementPolicyNames.map(policy => simulatePlacement(trace, { policy }))
  const isolated = results.find(r => r.policy === 'isolated')!
  for (const r of results) {
    const ratio = r.makespanS / isolated.makespanS
    ratios.get(r.policy)!.push(ratio)
    const q = r.normalizedQueueDelay
    const slow = r.jobs.map(j => j.slowdown).sort((a, b) => a - b)
    const overBound = r.jobs.filter((j, i) => j.slowdown > trace.jobs[i]!.maxSlowdown + 1e-9).length
    console.log(`seed ${seed} ${r.policy.padEnd(15)} makespan ${(r.makespanS / 3600).toFixed(1).padStart(6)} h  ratio ${ratio.toFixed(3)}  ` +
      `queue delay p50 ${q.p50.toFixed(2)} p90 ${q.p90.toFixed(2)} p99 ${q.p99.toFixed(2)} max ${q.max.toFixed(2)}  ` +
      `GPU busy ${(r.gpuBusyFraction * 100).toFixed(1)} %  slowdown p50 ${median(slow).toFixed(2)} max ${slow[slow.length - 1]!.toFixed(2)} over own bound ${overBound}  switches ${r.contextSwitches}`)
  }
  // The density / slowdown trade-off: a dearer conflict prediction admits fewer overlapping placements.
  const strict = simulatePlacement(trace, { policy: 'spread-backfill', conflictCostBlocks: 4 })
  const strictOver = strict.jobs.filter((j, i) => j.slowdown > trace.jobs[i]!.maxSlowdown + 1e-9).length
  strictRatios.push(strict.makespanS / isolated.makespanS)
  console.log(`seed ${seed} spread-backfill, conflict cost 4 blocks: ratio ${(strict.makespanS / isolated.makespanS).toFixed(3)}  over own bound ${strictOver}/${jobs}`)
}
const sb = median(ratios.get('spread-backfill')!)
console.log(placementPolicyNames.map(p => `median ratio ${p}: ${median(ratios.get(p)!).toFixed(3)}`).join('\n'))
console.log(`median ratio spread-backfill with conflict cost 4 blocks: ${median(strictRatios).toFixed(3)}`)
console.log(`goal spread-backfill <= 0.60 of isolated: ${sb <= 0.6 ? 'met' : 'NOT met'} (${sb.toFixed(3)}); pack and spread in between: ` +
  `${['pack', 'spread'].every(p => median(ratios.get(p)!) >= sb && median(ratios.get(p)!) < 1) ? 'yes' : 'no'}`)
