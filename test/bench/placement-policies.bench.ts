/**
 * Placement policies on generated traces (PlexRL §6.3, Fig. 8; issue 8):
 * per policy and seed, makespan (time to drain the trace) over the isolated
 * baseline simulated on the same trace in the same run, the share of jobs
 * whose realized slowdown exceeds their own maxSlowdown (§7.2), the worst
 * slowdown, the normalized queue delay (wait / own run time) p50 / p90 / p99 / max,
 * the slowdown prediction error (realized − predicted, p50 / p90), and the
 * median wait of the cold-start jobs. "sb without claim" is spread-backfill
 * with backfillReservation off (every job that fits starts), the ablation
 * of the oldest waiting job's claim on its nodes.
 * "sb without guard" turns the slowdown guard off; "sb stale profiles"
 * runs the same trace with `--stale` of the jobs really taking 1.4× their
 * traced durations, with and without the guard (what the guard is for).
 * Goals: spread-backfill makespan <= 56 % of isolated's (PlexRL's figure), pack
 * and spread in between, a far lighter delay tail than isolated's, and no
 * job over its bound. A second table sweeps κ (`conflictCostBlocks`, the
 * density / slowdown trade-off) for spread-backfill; `--kappas` picks the
 * values. `--bound`, `--segments` and `--gangs` shape the trace as `agentctl
 * sim trace placement` does; `--bounds 1.1,1.25,1.5` adds the curve of
 * spread-backfill's makespan against one bound for every job.
 *
 *   node_modules/.bin/node test/bench/placement-policies.bench.ts [--jobs 300] [--nodes 32] [--seeds 1,2,3] [--kappas 0.75,1]
 *     [--bound B] [--segments gap|back-to-back] [--gangs 1-8] [--stale 0.3] [--bounds 1.1,1.25,1.5]
 */
import { parseArgs } from 'node:util'
import { generatePlacementTrace } from '../../mesh/sim/placement-trace.ts'
import { simulatePlacement, type PlacementSimResult } from '../../mesh/sim/placement-sim.ts'
import { defaultConflictCostBlocks, placementPolicyNames } from '../../mesh/policies/placement/placement-policy.ts'
import { median } from './bench-stats.ts'
import { createSeededRandom } from '../../core/seeded-random.ts'

const { values } = parseArgs({
  options: {
    jobs: { type: 'string', default: '300' },
    nodes: { type: 'string', default: '32' },
    seeds: { type: 'string', default: '1,2,3' },
    kappas: { type: 'string', default: '0.75,1' },
    bound: { type: 'string' },
    segments: { type: 'string', default: 'gap' },
    gangs: { type: 'string' },
    stale: { type: 'string', default: '0.3' },
    bounds: { type: 'string', default: '' },
  },
})
const shape = {
  ...(values.bound !== undefined ? { maxSlowdown: Number(values.bound) } : {}),
  segments: values.segments === 'back-to-back' ? 'back-to-back' as const : 'gap' as const,
  ...(values.gangs !== undefined ? { gangs: { min: Number(values.gangs.split('-')[0]), max: Number(values.gangs.split('-')[1]) } } : {}),
}
const staleShare = Number(values.stale)
const bounds = values.bounds === '' ? [] : values.bounds.split(',').map(Number)
const jobs = Number(values.jobs)
const nodes = Number(values.nodes)
const seeds = values.seeds.split(',').map(Number)
const kappas = values.kappas.split(',').map(Number).filter(k => k !== defaultConflictCostBlocks)

/** Nearest-rank quantile. */
const quantile = (xs: readonly number[], p: number): number => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))]! }

interface Row { ratio: number, overShare: number, worst: number, nqdP50: number, nqdP90: number, nqdP99: number, nqdMax: number, coldWaitH: number, errP50: number, errP90: number }

function row (r: PlacementSimResult, isolated: PlacementSimResult, cold: ReadonlySet<string>): Row {
  const err = r.jobs.map(j => j.slowdown - j.predictedSlowdown)
  return {
    ratio: r.makespanS / isolated.makespanS,
    overShare: r.jobsOverBound / r.jobs.length,
    worst: r.slowdown.max,
    nqdP50: r.normalizedQueueDelay.p50,
    nqdP90: r.normalizedQueueDelay.p90,
    nqdP99: r.normalizedQueueDelay.p99,
    nqdMax: r.normalizedQueueDelay.max,
    coldWaitH: median(r.jobs.filter(j => cold.has(j.id)).map(j => j.waitS / 3600)),
    errP50: quantile(err, 0.5),
    errP90: quantile(err, 0.9),
  }
}

const format = (label: string, x: Row): string => `${label.padEnd(24)} ratio ${x.ratio.toFixed(3)}  over bound ${(x.overShare * 100).toFixed(1).padStart(5)} %  worst ${x.worst.toFixed(2)}  ` +
  `queue delay p50 ${x.nqdP50.toFixed(2).padStart(5)} p90 ${x.nqdP90.toFixed(2).padStart(5)} p99 ${x.nqdP99.toFixed(2).padStart(5)} max ${x.nqdMax.toFixed(1).padStart(5)}  ` +
  `cold-start wait p50 ${x.coldWaitH.toFixed(1).padStart(4)} h  realized−predicted p50 ${x.errP50.toFixed(3)} p90 ${x.errP90.toFixed(3)}`

const rows = new Map<string, Row[]>()
const add = (key: string, x: Row): void => { rows.set(key, [...(rows.get(key) ?? []), x]) }
console.log(`${jobs} jobs on ${nodes} nodes per trace, seeds ${seeds.join(',')}, segments ${shape.segments}${values.bound !== undefined ? `, bound ${values.bound}` : ''}${values.gangs !== undefined ? `, gangs ${values.gangs}` : ''}; ratio = makespan / isolated makespan of the same trace; κ default ${defaultConflictCostBlocks}`)
for (const seed of seeds) {
  const trace = generatePlacementTrace({ jobs, nodes, seed, ...shape })
  const cold = new Set(trace.jobs.filter(j => j.profiled === false).map(j => j.id))
  const results = placementPolicyNames.map(policy => simulatePlacement(trace, { policy }))
  const isolated = results.find(r => r.policy === 'isolated')!
  for (const r of results) {
    const x = row(r, isolated, cold)
    add(r.policy, x)
    console.log(format(`seed ${seed} ${r.policy}`, x))
  }
  const greedy = row(simulatePlacement(trace, { policy: 'spread-backfill', backfillReservation: false }), isolated, cold)
  add('sb without claim', greedy)
  console.log(format(`seed ${seed} sb without claim`, greedy))
  const unguarded = row(simulatePlacement(trace, { policy: 'spread-backfill', guard: false }), isolated, cold)
  add('sb without guard', unguarded)
  console.log(format(`seed ${seed} sb without guard`, unguarded))
  // Stale profiles: a share of the jobs really take 1.4x their traced durations (the isolated baseline runs them so too).
  const rnd = createSeededRandom(seed + 1000)
  const stale = { ...trace, jobs: trace.jobs.map(j => rnd.next() < staleShare ? { ...j, runScale: 1.4 } : j) }
  const staleIsolated = simulatePlacement(stale, { policy: 'isolated' })
  for (const guard of [true, false]) {
    const x = row(simulatePlacement(stale, { policy: 'spread-backfill', guard }), staleIsolated, cold)
    add(`sb stale, guard ${guard ? 'on' : 'off'}`, x)
    console.log(format(`seed ${seed} sb stale ${guard ? 'guard' : 'no guard'}`, x))
  }
  for (const b of bounds) {
    const tight = { ...trace, jobs: trace.jobs.map(j => ({ ...j, maxSlowdown: b })) }
    const x = row(simulatePlacement(tight, { policy: 'spread-backfill' }), isolated, cold)
    add(`sb bound ${b}`, x)
    console.log(format(`seed ${seed} sb bound ${b}`, x))
  }
  for (const k of kappas) {
    const x = row(simulatePlacement(trace, { policy: 'spread-backfill', conflictCostBlocks: k }), isolated, cold)
    add(`spread-backfill κ=${k}`, x)
    console.log(format(`seed ${seed} sb κ=${k}`, x))
  }
}
console.log('medians over seeds:')
for (const [key, xs] of rows) {
  const m = (f: (x: Row) => number): number => median(xs.map(f))
  console.log(format(key, { ratio: m(x => x.ratio), overShare: m(x => x.overShare), worst: m(x => x.worst), nqdP50: m(x => x.nqdP50), nqdP90: m(x => x.nqdP90), nqdP99: m(x => x.nqdP99), nqdMax: m(x => x.nqdMax), coldWaitH: m(x => x.coldWaitH), errP50: m(x => x.errP50), errP90: m(x => x.errP90) }))
}
const sb = rows.get('spread-backfill')!
const sbRatio = median(sb.map(x => x.ratio))
const between = ['pack', 'spread'].every(p => { const r = median(rows.get(p)!.map(x => x.ratio)); return r >= sbRatio && r < 1 })
console.log(`goal spread-backfill <= 0.56 of isolated: ${sbRatio <= 0.56 ? 'met' : 'NOT met'} (median ${sbRatio.toFixed(3)}, worst seed ${Math.max(...sb.map(x => x.ratio)).toFixed(3)}); pack and spread in between: ${between ? 'yes' : 'no'}`)
for (const key of ['spread-backfill', 'sb stale, guard on', 'sb stale, guard off']) {
  const worstOver = Math.max(...rows.get(key)!.map(x => x.overShare))
  console.log(`goal no ${key} job over its bound: ${worstOver === 0 ? 'met' : 'NOT met'} (worst seed ${(worstOver * 100).toFixed(1)} %)`)
}
