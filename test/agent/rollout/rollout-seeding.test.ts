// Issue 22, seeding live (RLBoost §4.1): the trainer's node runs reserved engines, a spot node remote
// ones. In a seeded step the reserved engines take requests for the window only; then their requests
// go on remotely from their tokens, token-identical. Without a remote instance the reserved engines
// finish the step themselves (colocated). The adaptive window follows Algorithm 1 from the trainer's
// report of its previous step.
import t, { type Test } from 'tap'
import { spawnEngineDouble, uninterrupted } from '../../helpers/engine-double.ts'
import { startTestMesh, type MeshAgent } from '../../helpers/test-mesh.ts'
import type { RolloutStepAnswer, RolloutStepBody } from '../../../agent/api/wire/rollout.ts'
import { setTimeout as sleep } from 'node:timers/promises'

const eosEvery = 80
const model = 'double-7b'
const requests = (n: number, maxTokens: number): RolloutStepBody['requests'] =>
  Array.from({ length: n }, (_, i) => ({ id: `r${i}`, prompt: `seed ${i} ` + 'w '.repeat(10 + i), maxTokens }))

function checkIdentical (t: Test, reqs: RolloutStepBody['requests'], answer: RolloutStepAnswer): void {
  const wrong = reqs.filter((r, i) => { const e = uninterrupted(r.prompt, r.maxTokens, eosEvery); return answer.responses[i]!.text !== e.text || answer.responses[i]!.finish !== e.finish })
  t.same(wrong.map(r => r.id), [], `all ${reqs.length} responses token-identical to an uninterrupted generation`)
}

async function register (t: Test, agent: MeshAgent, id: string, reserved: boolean): Promise<void> {
  const e = await spawnEngineDouble(t, `${agent.name}/${id}`, ['--eos-every', String(eosEvery), '--decode-step-ms', '10', '--model', model])
  await agent.client.rolloutRegister({ id, url: e.url, model, ...(reserved ? { reserved: true as const } : {}) })
}

async function untilSeen (agent: MeshAgent, count: number): Promise<void> {
  for (const deadline = performance.now() + 30_000; (await agent.client.rollout()).cluster.length !== count; await sleep(100)) {
    if (performance.now() > deadline) throw new Error(`${agent.name} does not see ${count} instances`)
  }
}

t.test('a seeded step: reserved engines for the window, then the remote ones from the tokens; the adaptive window', async t => {
  const mesh = await startTestMesh(t, { nodes: 2 })
  await mesh.waitConverged()
  const [trainer, spot] = mesh.agents as [MeshAgent, MeshAgent]
  await register(t, trainer, 'r0', true)
  await register(t, trainer, 'r1', true)
  await register(t, spot, 'e0', false)
  await untilSeen(trainer, 3)
  t.same((await trainer.client.rollout()).cluster.map(i => [i.id, i.reserved]).sort(), [[`${spot.name}/e0`, false], [`${trainer.name}/r0`, true], [`${trainer.name}/r1`, true]].sort(), 'peers see which engines are reserved')

  const reqs = requests(12, 300)
  const fixed = await trainer.client.rolloutStep({ model, requests: reqs, options: { maxPending: 6, seeding: { windowS: 0.8 } } })
  checkIdentical(t, reqs, fixed)
  t.same(fixed.removed.map(r => [r.instance, r.reason]).sort(), [[`${trainer.name}/r0`, 'seeding window over'], [`${trainer.name}/r1`, 'seeding window over']], 'the reserved engines left at the end of the window')
  const seeded = fixed.responses.filter(r => r.route[0]!.includes('/r') && r.route.at(-1) === `${spot.name}/e0`)
  t.ok(seeded.length > 0 && seeded.every(r => r.finishMs > 800), `${seeded.length} responses begun on the training cluster were finished remotely after the window`)
  t.equal(fixed.generatedTokens, fixed.responses.reduce((n, r) => n + r.tokens, 0), 'nothing generated twice')
  t.match(fixed.seeding, { windowS: 0.8, meanRemoteInstances: 1 })

  // Adaptive: the first step starts from T_init; the next adapts from the trainer's report.
  const first = await trainer.client.rolloutStep({ model, requests: reqs, options: { maxPending: 6, seeding: { initialWindowS: 0.5, eta: 1 } } })
  t.equal(first.seeding?.windowS, 0.5, 'T_init')
  // The trainer sat idle 2 s waiting for responses and the remote instance waited little: the window grows.
  const second = await trainer.client.rolloutStep({ model, requests: reqs, options: { maxPending: 6, seeding: { eta: 1, training: { trainS: 5, trainWaitS: 2, endedAfterS: 0 } } } })
  checkIdentical(t, reqs, second)
  t.ok(second.seeding!.windowS > 0.5, `the window grew to ${second.seeding!.windowS.toFixed(2)} s`)
  t.ok(second.seeding!.maxInstances >= 1, `N_prem ${second.seeding!.maxInstances}`)

  // A model only a reserved engine serves: no remote instance can take over, the window does not end (colocated).
  const solo = await spawnEngineDouble(t, 'solo', ['--eos-every', String(eosEvery), '--decode-step-ms', '10', '--model', 'solo'])
  await trainer.client.rolloutRegister({ id: 'solo', url: solo.url, model: 'solo', reserved: true })
  const few = requests(6, 100)
  const colocated = await trainer.client.rolloutStep({ model: 'solo', requests: few, options: { seeding: { windowS: 0.1 } } })
  checkIdentical(t, few, colocated)
  t.same(colocated.removed, [], 'no remote instance: the window did not end without anyone to take over')
  t.ok(colocated.responses.every(r => r.route.length === 1), 'each stayed on its engine')
})
