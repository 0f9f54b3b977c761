/**
 * Runtime scheduling (PlexRL §4.4): HRRS against FCFS on the same queue —
 * the same jobs pinned to the same nodes of a 4-node group, the same task
 * durations (seeded jitter), two concurrent request chains per job (actor
 * and critic) — measured in the same run.
 * Goals: fewer context switches at no worse mean task wait; no starvation
 * (every job completes; the longest wait stays bounded).
 *
 *   node_modules/.bin/node test/bench/hrrs-runtime.bench.ts [--seeds 1,2,3,4,5,6,7,8] [--jobs 5]
 */
import { parseArgs } from 'node:util'
import { generatePlacementTrace } from '../../mesh/sim/placement-trace.ts'
import { simulateRuntime, type RuntimeSimJob } from '../../mesh/sim/runtime-sim.ts'
import { createSeededRandom } from '../../core/seeded-random.ts'
import { median } from './bench-stats.ts'

const { values } = parseArgs({ options: { seeds: { type: 'string', default: '1,2,3,4,5,6,7,8' }, jobs: { type: 'string', default: '5' } } })
const seeds = values.seeds.split(',').map(Number)
const groupNodes = 4
const switchRatio: number[] = []
const waitRatio: number[] = []
let fewerSwitches = 0
let noWorseWait = 0
for (const seed of seeds) {
  const rnd = createSeededRandom(seed)
  const jobs: RuntimeSimJob[] = generatePlacementTrace({ jobs: Number(values.jobs), nodes: groupNodes, seed }).jobs.map(j => {
    const first = rnd.int(0, groupNodes - j.nodes)
    return { id: j.id, nodes: Array.from({ length: j.nodes }, (_, i) => first + i), startS: rnd.uniform(0, j.periodS), periodS: j.periodS, iterations: 40, segments: j.segments, switchS: j.switchS ?? 10, streams: 2 }
  })
  const fcfs = simulateRuntime({ nodes: groupNodes, jobs, scheduler: 'fcfs', seed })
  const hrrs = simulateRuntime({ nodes: groupNodes, jobs, scheduler: 'hrrs', seed })
  switchRatio.push(hrrs.contextSwitches / fcfs.contextSwitches)
  waitRatio.push(hrrs.taskWaitS.mean / fcfs.taskWaitS.mean)
  if (hrrs.contextSwitches < fcfs.contextSwitches) fewerSwitches++
  if (hrrs.taskWaitS.mean <= fcfs.taskWaitS.mean) noWorseWait++
  const done = (r: typeof hrrs): boolean => Object.values(r.slowdown).every(Number.isFinite)
  console.log(`seed ${seed}  FCFS switches ${fcfs.contextSwitches} mean wait ${fcfs.taskWaitS.mean.toFixed(1)} s max ${fcfs.taskWaitS.max.toFixed(0)} s | ` +
    `HRRS switches ${hrrs.contextSwitches} mean wait ${hrrs.taskWaitS.mean.toFixed(1)} s max ${hrrs.taskWaitS.max.toFixed(0)} s  all jobs done: ${done(fcfs) && done(hrrs)}`)
}
console.log(`median HRRS/FCFS context switches ${median(switchRatio).toFixed(3)}, mean task wait ${median(waitRatio).toFixed(3)}`)
console.log(`fewer switches in ${fewerSwitches}/${seeds.length} runs, no worse mean wait in ${noWorseWait}/${seeds.length} runs`)
