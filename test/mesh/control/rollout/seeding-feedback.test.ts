// Algorithm 1 between live steps: the observation built from a step's remote measurements and the
// trainer's report is the one the policy gets; a fixed window bypasses the loop.
import t from 'tap'
import { planSeedingWindow, remoteGenerationS, type RemoteMeasurement } from '../../../../mesh/control/rollout/seeding-feedback.ts'
import { initialSeeding, nextSeeding } from '../../../../mesh/policies/rollout-balancing/seeding-window.ts'

const request = { initialWindowS: 20, eta: 2, reservedEngines: 4, remoteNow: 2 }
const last: RemoteMeasurement = { stepS: 60, remotes: [{ joinedS: 0, lastResponseS: 50 }, { joinedS: 10, lastResponseS: 40 }], meanInstances: 2 }

t.test('the first step starts from T_init; without a report the window stays', async t => {
  const first = planSeedingWindow(undefined, request)
  t.equal(first.windowS, 20)
  const again = planSeedingWindow({ ...first.next!, last }, request)
  t.equal(again.windowS, 20, 'no report, no change')
})

t.test('with a report: t_remote_wait from the last responses to the answer plus the training after it', async t => {
  const state = initialSeeding({ reservedEngines: 4, eta: 2, minSeedS: 0, maxSeedS: 86_400 }, 20)
  const plan = planSeedingWindow({ state, last }, { ...request, training: { trainS: 30, trainWaitS: 12, endedAfterS: 5 } })
  t.equal(remoteGenerationS(last), 40, 'mean of 50 and 30 s generating')
  const expected = nextSeeding(state, { trainWaitS: 12, remoteWaitS: (10 + 20) / 2 + 5, trainS: 30, remoteS: 40, meanInstances: 2, nextInstances: 2 }, { reservedEngines: 4, eta: 2, minSeedS: 0, maxSeedS: 86_400 })
  t.same({ windowS: plan.windowS, maxInstances: plan.maxInstances }, { windowS: expected.seedS, maxInstances: expected.maxInstances })
  t.equal(plan.windowS, 20 + (12 - 20) / 2, 'the remote instances waited longer than the trainer: the window shrinks')
})

t.test('a fixed window: no adaptation, no bound on instances', async t => {
  const plan = planSeedingWindow(undefined, { ...request, windowS: 3 })
  t.same({ windowS: plan.windowS, maxInstances: plan.maxInstances, next: plan.next }, { windowS: 3, maxInstances: Number.POSITIVE_INFINITY, next: undefined })
})
