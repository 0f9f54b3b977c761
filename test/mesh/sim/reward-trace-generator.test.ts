// The generated trace follows DistRS §3 and is a valid, reproducible trace.
import t from 'tap'
import { generateRewardTrace, outcomeMix } from '../../../mesh/sim/reward-trace-generator.ts'
import { validateRewardTrace } from '../../../mesh/sim/reward-trace.ts'

const trace = generateRewardTrace({ tasks: 2, batchSize: 1000, iterations: 6, seed: 11 })

t.test('valid, reproducible, shaped as asked', async t => {
  // (compared as JSON text: tap's deep comparison is slow on 12,000 requests)
  t.equal(validateRewardTrace(trace), trace)
  t.equal(JSON.stringify(generateRewardTrace({ tasks: 2, batchSize: 1000, iterations: 6, seed: 11 })), JSON.stringify(trace))
  t.not(JSON.stringify(generateRewardTrace({ tasks: 2, batchSize: 1000, iterations: 6, seed: 12 })), JSON.stringify(trace))
  t.same(trace.stages.map(s => [s.name, s.resource, s.timeoutS]), [['compile', 'cpu', 120], ['execute', 'gpu', 60]])
  t.equal(trace.tasks.length, 2)
  t.ok(trace.tasks.every(task => task.batches.length === 6 && task.batches.every(b => b.requests.length === 1000)))
  t.equal(trace.tasks[1]!.batches[0]!.startS, 20, 'tasks staggered by 20 s')
  t.throws(() => generateRewardTrace({ tasks: 0, batchSize: 1, iterations: 2, seed: 1 }), /tasks must be an integer >= 1/)
  t.throws(() => generateRewardTrace({ tasks: 1, batchSize: 1, iterations: 1, seed: 1 }), /iterations must be an integer >= 2/)
})

t.test('§3.1 arrivals: none early in the rollout, a peak then a long tail, about half of each iteration idle', async t => {
  const task = trace.tasks[0]!
  for (let i = 0; i + 1 < task.batches.length; i++) {
    const batch = task.batches[i]!
    const offsets = batch.requests.map(r => r.arrivalS - batch.startS).sort((a, b) => a - b)
    t.ok(offsets[0]! >= 70, 'no request in the first 70 s')
    const median = offsets[offsets.length >> 1]!
    t.ok(offsets.at(-1)! - median > 2 * (median - offsets[0]!) * 0.5, 'the tail after the median is longer than the rise before it')
    const iterationS = task.batches[i + 1]!.startS - batch.startS
    const busyS = Math.max(...batch.requests.map(r => r.arrivalS + r.stageS[0]! + r.stageS[1]!)) - offsets[0]! - batch.startS
    t.ok(busyS / iterationS > 0.35 && busyS / iterationS < 0.65, `requests during ${(100 * busyS / iterationS).toFixed(0)}% of the iteration`)
  }
})

t.test('§3.1 resources: compile ~50 s, execute a few seconds, some run to their timeouts; the outcome mix shifts', async t => {
  const all = trace.tasks.flatMap(task => task.batches.flatMap(b => b.requests))
  const compiles = all.map(r => r.stageS[0]!).filter(s => s > 0 && s < 120).sort((a, b) => a - b)
  const executes = all.map(r => r.stageS[1]!).filter(s => s > 0 && s < 60).sort((a, b) => a - b)
  t.ok(Math.abs(compiles[compiles.length >> 1]! - 45) < 10, `median compile ${compiles[compiles.length >> 1]} s`)
  t.ok(executes[executes.length >> 1]! > 1 && executes[executes.length >> 1]! < 5, `median execute ${executes[executes.length >> 1]} s`)
  t.ok(all.some(r => r.stageS[0] === 120) && all.some(r => r.stageS[1] === 60), 'timeouts occur at both stages')
  const failedEarly = (i: number) => trace.tasks[0]!.batches[i]!.requests.filter(r => r.stageS[0] === 0).length
  const executed = (i: number) => trace.tasks[0]!.batches[i]!.requests.filter(r => r.stageS[1]! > 0).length
  t.ok(failedEarly(0) > failedEarly(5) * 2, `generation failures fall: ${failedEarly(0)} → ${failedEarly(5)}`)
  t.ok(executed(5) > executed(0) * 1.5, `executions grow: ${executed(0)} → ${executed(5)}`)
  const start = outcomeMix(0)
  const middle = outcomeMix(0.5)
  const end = outcomeMix(1)
  t.ok(middle.executeError > start.executeError && middle.executeError > end.executeError, 'execute errors rise then fall')
  for (const mix of [start, middle, end]) t.equal(Math.round((mix.generationFailed + mix.compileFailed + mix.executeError + mix.success) * 1e9), 1e9)
})
