import t from 'tap'
import { simulateRuntime, type RuntimeSimJob } from '../../../mesh/sim/runtime-sim.ts'

const job = (id: string, startS: number, over: Partial<RuntimeSimJob> = {}): RuntimeSimJob =>
  ({ id, nodes: [0], startS, periodS: 100, iterations: 20, segments: [{ offsetS: 0, durationS: 20 }, { offsetS: 25, durationS: 20 }], switchS: 15, ...over })

t.test('one job alone: no waits, no switches, slowdown from the last idle tail only', async t => {
  const r = simulateRuntime({ nodes: 1, jobs: [job('a', 0)], scheduler: 'hrrs', jitter: 0 })
  t.equal(r.contextSwitches, 0)
  t.equal(r.taskWaitS.max, 0)
  t.equal(r.makespanS, 15 + 100 * 19 + 45, 'one initial onload (nothing to prefetch it in), then back-to-back periods')
})

t.test('HRRS vs FCFS on the same contended queue: fewer switches, no worse mean wait, nobody starves', async t => {
  // Two request chains per job (actor and critic, PlexRL §7.1): a resident job often has another request queued.
  const jobs = [job('a', 0), job('b', 10), job('c', 30, { periodS: 90 }), job('d', 50, { nodes: [0, 1] }), job('e', 5, { nodes: [1] })].map(j => ({ ...j, streams: 2 }))
  const fcfs = simulateRuntime({ nodes: 2, jobs, scheduler: 'fcfs', seed: 2 })
  const hrrs = simulateRuntime({ nodes: 2, jobs, scheduler: 'hrrs', seed: 2 })
  t.ok(hrrs.contextSwitches < fcfs.contextSwitches, `switches ${hrrs.contextSwitches} < ${fcfs.contextSwitches}`)
  t.ok(hrrs.taskWaitS.mean <= fcfs.taskWaitS.mean, `mean wait ${hrrs.taskWaitS.mean} <= ${fcfs.taskWaitS.mean}`)
  t.ok(Object.values(hrrs.slowdown).every(s => Number.isFinite(s)), 'every job completes')
  t.ok(hrrs.taskWaitS.max < 10 * 100, 'the longest wait stays within a few periods')
})
