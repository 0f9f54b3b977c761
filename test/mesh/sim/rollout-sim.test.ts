// The rollout step in simulated time: cases worked by hand from the engine model (module comment),
// then preemption with migration against recompute.
import t from 'tap'
import { simulateRolloutStep, type RolloutSimOptions, type SimEngine, type SimRolloutRequest } from '../../../mesh/sim/rollout-sim.ts'

const engine = (id: string, o: Partial<SimEngine> = {}): SimEngine => ({ id, decodeStepMs: 10, decodeMsPerSeq: 0, prefillMsPerToken: 0.1, kvCapacityTokens: 1_000_000, maxRunning: 256, ...o })
const req = (id: string, responseTokens: number, promptTokens = 100): SimRolloutRequest => ({ id, promptTokens, maxTokens: 1000, responseTokens })
const options: RolloutSimOptions = { balancer: 'rlboost', resume: 'tokens', maxPending: 4, rebalanceIntervalMs: 200, plateau: null }
const close = (a: number, b: number): boolean => Math.abs(a - b) < 1e-9

t.test('timing of one engine, worked by hand', async t => {
  // First step: 10 ms + 100 prompt tokens × 0.1 ms; then 9 steps of 10 ms.
  t.ok(close(simulateRolloutStep([engine('a')], [req('r', 10)], options).stepS, 0.11), 'one request: 20 ms + 9 × 10 ms')
  // Two at once, 5 ms per sequence: (10 + 10 + 20) ms, then 9 × 20 ms.
  t.ok(close(simulateRolloutStep([engine('a', { decodeMsPerSeq: 5 })], [req('r1', 10), req('r2', 10)], options).stepS, 0.22), 'two in one batch: 40 ms + 9 × 20 ms')
  // Room for one (100 + 1000 tokens): the second starts when the first is done, at 110 ms.
  const queued = simulateRolloutStep([engine('a', { kvCapacityTokens: 1500 })], [req('r1', 10), req('r2', 10)], options)
  t.ok(close(queued.finishS.r1!, 0.11) && close(queued.finishS.r2!, 0.22), `the KV capacity queues the second: ${JSON.stringify(queued.finishS)}`)
  t.ok(close(simulateRolloutStep([engine('a')], [req('z', 0)], options).stepS, 0.02), 'a response that ends at once ends with its prefill step')
})

t.test('half the engines preempted: migration keeps the tokens, recompute throws them away', async t => {
  const engines = [engine('a'), engine('b', { preemptAtS: 0.505 })]
  const reqs = [req('r1', 100), req('r2', 100)]
  const migrate = simulateRolloutStep(engines, reqs, options)
  const recompute = simulateRolloutStep(engines, reqs, { ...options, resume: 'recompute' })
  t.same(migrate.moves, { lost: 1, pending: 0, executing: 0 })
  t.equal(migrate.generatedTokens, 200, 'migration: nothing generated twice')
  t.equal(recompute.generatedTokens, 249, 'recompute: the 49 tokens of the lost stream generated again')
  // r2 had 49 tokens at 0.505 s (20 ms + 48 × 10 ms = 0.50 s); it resumes on a: prefill of 149 tokens (10 + 14.9 ms) then 50 steps.
  t.ok(close(migrate.finishS.r2!, 0.51 + 0.0249 + 0.5), `migrate: r2 done at ${migrate.finishS.r2}`)
  t.ok(recompute.stepS > migrate.stepS + 0.45, `recompute ${recompute.stepS.toFixed(3)} s against migrate ${migrate.stepS.toFixed(3)} s`)
})

t.test('the baselines dispatch at once; round-robin cycles', async t => {
  const r = simulateRolloutStep([engine('a'), engine('b')], [req('r1', 50), req('r2', 5), req('r3', 5), req('r4', 5)], { ...options, balancer: 'round-robin' })
  t.equal(r.moves.pending + r.moves.executing, 0, 'no balancing')
  // a: r1 and r3 together (first step 10 + 200 × 0.1 ms), b: r2 and r4 together.
  const want = { r1: 0.03 + 0.49, r2: 0.07, r3: 0.07, r4: 0.07 }
  t.ok(Object.entries(want).every(([id, s]) => close(r.finishS[id]!, s)), `finish times ${JSON.stringify(r.finishS)}`)
})

t.test('a step that runs out of engines fails instead of running for ever; a late engine saves it', async t => {
  t.throws(() => simulateRolloutStep([engine('a', { preemptAtS: 0.05 })], [req('r', 100)], options), /1 requests never finished/)
  const late = simulateRolloutStep([engine('a', { preemptAtS: 0.05 }), engine('b', { joinAtS: 1 })], [req('r', 100)], options)
  t.ok(late.stepS > 1, `finished on the engine that joined at 1 s: ${late.stepS.toFixed(3)} s`)
})
