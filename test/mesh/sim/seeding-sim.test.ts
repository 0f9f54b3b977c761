// Adaptive response seeding over many steps (RLBoost Algorithm 1, Figure 12's ablation): the window
// adapts to the remote instances available, the scheduler memory restores a window learned under an
// instance count seen before, and without seeding the training cluster idles.
import t from 'tap'
import { recoveringAvailability, simulateSeeding, type SeedingSimOptions } from '../../../mesh/sim/seeding-sim.ts'
import { parseAvailability } from '../../../cli/commands/sim-seeding.ts'

const base: Omit<SeedingSimOptions, 'variant'> = {
  steps: 34, requestsPerStep: 256, meanResponseTokens: 300, maxTokens: 768, seed: 3,
  available: parseAvailability('1x6,3x4,6x4,1x4,3x4,6x4,2x4,6x4'), trainSPerResponse: 0.03, microbatch: 32,
  seeding: { reservedEngines: 4, eta: 2, minSeedS: 0, maxSeedS: 3600 }, initialSeedS: 10,
  engine: { decodeStepMs: 20, decodeMsPerSeq: 0.25, prefillMsPerToken: 0.05, kvCapacityTokens: 65_536, maxRunning: 256 },
}

t.test('the ablation\'s trends: full >= without memory > without seeding; seeding removes most of the trainer\'s idle time', async t => {
  const [full, noMemory, noSeeding] = (['full', 'no-memory', 'no-seeding'] as const).map(variant => simulateSeeding({ ...base, variant }))
  t.ok(full!.throughput >= noMemory!.throughput, `full ${full!.throughput.toFixed(2)} >= no-memory ${noMemory!.throughput.toFixed(2)} responses/s`)
  t.ok(noMemory!.throughput > noSeeding!.throughput, `no-memory > no-seeding ${noSeeding!.throughput.toFixed(2)}`)
  t.ok(noSeeding!.trainIdleShare > 2 * full!.trainIdleShare, `the trainer idles ${(100 * noSeeding!.trainIdleShare).toFixed(0)} % without seeding, ${(100 * full!.trainIdleShare).toFixed(0)} % with`)
  t.equal(full!.steps.length, 34)
  t.ok(full!.steps.every(s => s.remote <= s.available), 'never more instances than available')
  // No seeding when six are back: as fast as with seeding (the paper: w/o seeding matches once all are available).
  const lastSix = (r: typeof full): number => r!.steps.slice(-4).reduce((n, s) => n + s.stepS, 0)
  t.ok(lastSix(noSeeding) < 1.5 * lastSix(full), 'with all six back, no seeding is close to full')
})

t.test('the window shrinks as instances come back; memory restores the window learned under a count seen before', async t => {
  const full = simulateSeeding({ ...base, variant: 'full' })
  const windowAt = (i: number): number => full.steps[i]!.seedS
  t.ok(windowAt(13) < windowAt(5), `six instances: a shorter window (${windowAt(13).toFixed(1)} s) than one (${windowAt(5).toFixed(1)} s)`)
  // Step 14: back to one instance. Full starts from the window learned under one (step 5's, updated);
  // without memory it starts from the short window of six and needs steps to grow it.
  const noMemory = simulateSeeding({ ...base, variant: 'no-memory' })
  t.ok(Math.abs(windowAt(14) - windowAt(5)) < 0.25 * windowAt(5), `full: ${windowAt(14).toFixed(1)} s, about the one-instance window ${windowAt(5).toFixed(1)} s`)
  t.ok(noMemory.steps[14]!.seedS < 0.8 * windowAt(14), `no memory: ${noMemory.steps[14]!.seedS.toFixed(1)} s, near the six-instance window ${windowAt(13).toFixed(1)} s`)
  t.ok(noMemory.steps[14]!.stepS > full.steps[14]!.stepS, 'and that step takes longer')
})

t.test('no remote instance: the training cluster generates the whole step itself (colocated), nothing is lost', async t => {
  const r = simulateSeeding({ ...base, steps: 3, available: [0], variant: 'full' })
  t.ok(r.steps.every(s => s.remote === 0 && s.seedS === 0 && s.trainWaitS === 0 && s.stepS > 0))
  t.equal(r.remoteUtilization, 0)
  t.ok(r.throughput > 0)
})

t.test('bad scenarios are refused', async t => {
  t.throws(() => simulateSeeding({ ...base, steps: 0, variant: 'full' }), RangeError)
  t.throws(() => simulateSeeding({ ...base, available: [], variant: 'full' }), RangeError)
  t.throws(() => simulateSeeding({ ...base, microbatch: 0, variant: 'full' }), RangeError)
  t.throws(() => parseAvailability('3x'), /COUNTxSTEPS/)
  t.throws(() => parseAvailability('3x0'), /COUNTxSTEPS/)
  t.same(recoveringAvailability(3, 2, 1), [1, 1, 2, 3])
})
