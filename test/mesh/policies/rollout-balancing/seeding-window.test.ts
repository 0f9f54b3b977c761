// RLBoost Algorithm 1 (adaptive partial response seeding) as a pure step function.
import t from 'tap'
import { initialSeeding, nextSeeding, type SeedingConfig, type StepObservation } from '../../../../mesh/policies/rollout-balancing/seeding-window.ts'

const config: SeedingConfig = { reservedEngines: 2, eta: 2, minSeedS: 0, maxSeedS: 120 }
const step = (o: Partial<StepObservation>): StepObservation => ({ trainWaitS: 0, remoteWaitS: 0, trainS: 40, remoteS: 30, meanInstances: 4, nextInstances: 4, ...o })

t.test('line 9: the trainer waiting lengthens the window, the instances waiting shorten it, by the difference over η', async t => {
  const s0 = initialSeeding(config, 10)
  t.equal(nextSeeding(s0, step({ trainWaitS: 4, remoteWaitS: 1 }), config).seedS, 11.5)
  t.equal(nextSeeding(s0, step({ trainWaitS: 0, remoteWaitS: 6 }), config).seedS, 7)
  t.equal(nextSeeding(s0, step({ remoteWaitS: 100 }), config).seedS, 0, 'never below minSeedS')
  t.equal(nextSeeding(s0, step({ trainWaitS: 1000 }), config).seedS, 120, 'never above maxSeedS')
})

t.test('line 10: as many instances as make remote rollout no longer than training', async t => {
  const s = nextSeeding(initialSeeding(config, 10), step({}), config)
  t.equal(s.maxInstances, 4, '(30 s × 4 instances + 10 s × 2 engines) / 40 s = 3.5, rounded up')
  t.equal(nextSeeding(s, step({ remoteS: 5, meanInstances: 1, trainS: 100 }), config).maxInstances, 1, 'at least one')
  t.equal(initialSeeding(config, 10).maxInstances, 2, 'starts at N_resv')
})

t.test('lines 11–14: a window learnt under a stable instance count is restored when that count comes back', async t => {
  let s = initialSeeding(config, 10)
  s = nextSeeding(s, step({ trainWaitS: 4, meanInstances: 4, nextInstances: 4 }), config) // stable at 4: remembered
  t.same(s.memory, { 4: 12 })
  s = nextSeeding(s, step({ trainWaitS: 10, meanInstances: 3.5, nextInstances: 2 }), config) // changed during the step
  t.equal(s.seedS, 17, 'a count never seen: the adapted window')
  t.same(s.memory, { 4: 12 }, 'not recorded: the count changed during the step')
  s = nextSeeding(s, step({ trainWaitS: 10, meanInstances: 2.5, nextInstances: 4 }), config)
  t.equal(s.seedS, 12, 'back to 4 instances: the window learnt for 4')
})

t.test('the window converges where the two waits balance', async t => {
  // A toy step: the trainer waits less the longer it seeds; the instances wait more.
  let s = initialSeeding(config, 2)
  for (let i = 0; i < 30; i++) s = nextSeeding(s, step({ trainWaitS: Math.max(0, 20 - s.seedS), remoteWaitS: Math.max(0, s.seedS - 12) }), config)
  t.ok(Math.abs(s.seedS - 16) < 0.01, `T_seed ${s.seedS.toFixed(3)} s, the balance point is 16 s`)
})

t.test('bad observations and rates are refused', async t => {
  const s = initialSeeding(config, 10)
  t.throws(() => nextSeeding(s, step({ trainS: Number.NaN }), config), RangeError)
  t.throws(() => nextSeeding(s, step({ remoteWaitS: -1 }), config), /remoteWaitS must be a finite number >= 0/)
  t.throws(() => nextSeeding(s, step({}), { ...config, eta: 0 }), /eta must be > 0/)
})
