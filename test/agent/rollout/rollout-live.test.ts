// Issue 22, live: rollout instances (engine doubles, each its own process) registered with three
// agents that elect a leader among themselves; a trainer runs a step through one agent. Half the
// instances are SIGKILLed mid-step together with the leader's agent: every response comes back
// complete and token-identical to an uninterrupted generation. A termination notice moves an
// instance's requests before it dies. Bad registrations and submissions are refused with a reason
// and change nothing.
import t, { type Test } from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { agentctlMain, runNode, tempDir } from '../../helpers/agent-process.ts'
import { spawnEngineDouble, uninterrupted } from '../../helpers/engine-double.ts'
import { startTestMesh, type MeshAgent, type TestMesh } from '../../helpers/test-mesh.ts'
import type { RolloutStepAnswer, RolloutStepBody } from '../../../agent/api/wire/rollout.ts'

const eosEvery = 80
const model = 'double-7b'

const requests = (n: number, maxTokens: number): RolloutStepBody['requests'] =>
  Array.from({ length: n }, (_, i) => ({ id: `r${i}`, prompt: Array.from({ length: 20 + (i % 7) * 10 }, (_, k) => `q${i}_${k}`).join(' '), maxTokens }))

function checkIdentical (t: Test, reqs: RolloutStepBody['requests'], answer: RolloutStepAnswer): void {
  const wrong = reqs.filter((r, i) => { const e = uninterrupted(r.prompt, r.maxTokens, eosEvery); return answer.responses[i]?.id !== r.id || answer.responses[i]!.text !== e.text || answer.responses[i]!.finish !== e.finish })
  t.same(wrong.map(r => r.id), [], `all ${reqs.length} responses complete and token-identical to an uninterrupted generation`)
}

/** Two engine doubles per agent, registered as "<node>/e0", "<node>/e1". */
async function engines (t: Test, mesh: TestMesh): Promise<Map<string, { kill(): void }>> {
  const all = new Map<string, { kill(): void }>()
  for (const agent of mesh.agents) {
    for (const id of ['e0', 'e1']) {
      const e = await spawnEngineDouble(t, `${agent.name}/${id}`, ['--eos-every', String(eosEvery), '--decode-step-ms', '8', '--model', model])
      await agent.client.rolloutRegister({ id, url: e.url, model })
      all.set(`${agent.name}/${id}`, e)
    }
  }
  return all
}

async function untilSeen (agent: MeshAgent, count: number): Promise<void> {
  for (const deadline = performance.now() + 30_000; ;) {
    const view = await agent.client.rollout()
    if (view.cluster.length === count) return
    if (performance.now() > deadline) throw new Error(`${agent.name} sees ${view.cluster.map(i => i.id).join(', ')}, not ${count} instances`)
    await sleep(100)
  }
}

t.test('three agents, six instances: the leader\'s node and half the instances die mid-step, nothing is lost', async t => {
  const mesh = await startTestMesh(t, { nodes: 3, clusterServers: 3 })
  await mesh.waitConverged()
  const all = await engines(t, mesh)
  let leaderId: string | null = null
  for (const deadline = performance.now() + 30_000; leaderId === null; await sleep(100)) {
    leaderId = (await mesh.agents[0]!.client.leader()).leaderId
    if (performance.now() > deadline) throw new Error('no leader elected')
  }
  const leader = mesh.agents.find(a => a.peerId === leaderId)!
  const trainer = mesh.agents.find(a => a !== leader)!
  const other = mesh.agents.find(a => a !== leader && a !== trainer)!
  await untilSeen(trainer, 6)

  const reqs = requests(36, 200)
  const step = trainer.client.rolloutStep({ model, requests: reqs, options: { maxPending: 2, stallMs: 5000 } })
  await sleep(700) // mid-generation
  const killed = [`${leader.name}/e0`, `${leader.name}/e1`, `${other.name}/e0`]
  leader.proc.kill('SIGKILL')
  for (const id of killed) all.get(id)!.kill()
  const answer = await step
  checkIdentical(t, reqs, answer)
  t.same(answer.removed.map(r => r.instance).sort(), [...killed].sort(), `the killed instances left the rotation (${answer.removed.map(r => `${r.instance}: ${r.reason}`).join('; ')})`)
  t.ok(answer.moves.lost > 0, `${answer.moves.lost} requests moved off the killed instances`)
  t.equal(answer.generatedTokens, answer.responses.reduce((n, r) => n + r.tokens, 0), 'no token generated twice: moved requests went on from their tokens')
  t.same(answer.instances.length, 6, 'the step used the six instances it saw')
  const movedOff = answer.responses.filter(r => r.route.slice(0, -1).some(id => killed.includes(id)))
  t.ok(movedOff.length > 0 && movedOff.every(r => !killed.includes(r.route.at(-1)!)), `${movedOff.length} responses began on a killed instance and finished on a survivor`)

  // The dead node's instances leave every view once it is declared dead.
  await untilSeen(trainer, 3)
})

t.test('a termination notice moves an instance\'s requests before it dies; a new instance joins a running step', async t => {
  const mesh = await startTestMesh(t, { nodes: 2 })
  await mesh.waitConverged()
  const [trainer, spot] = mesh.agents as [MeshAgent, MeshAgent]
  // Slow decoding and few sequences at once: the step lasts seconds, time for a new registration to reach the
  // trainer's view, and requests wait in the queue for a joiner to take.
  const engine = async (id: string): Promise<string> => (await spawnEngineDouble(t, id, ['--eos-every', String(eosEvery), '--decode-step-ms', '25', '--max-running', '4', '--model', model])).url
  await trainer.client.rolloutRegister({ id: 'e0', url: await engine('t0'), model })
  await spot.client.rolloutRegister({ id: 'e0', url: await engine('s0'), model })
  await untilSeen(trainer, 2)

  const reqs = requests(12, 200)
  const step = trainer.client.rolloutStep({ model, requests: reqs, options: { maxPending: 2 } })
  await sleep(500)
  const notice = await spot.client.rolloutTerminate({ reason: 'spot reclaim in 30 s' })
  t.same(notice.terminating.map(i => [i.id, i.state]), [['e0', 'terminating']], 'the spot node\'s instance is terminating')
  await spot.client.rolloutRegister({ id: 'e1', url: await engine('s1'), model })
  for (const deadline = performance.now() + 20_000; !(await trainer.client.rollout()).steps.some(s => s.instances === 3); await sleep(50)) {
    if (performance.now() > deadline) throw new Error('the new instance never joined the running step')
  }
  const answer = await step
  checkIdentical(t, reqs, answer)
  t.match(answer.removed, [{ instance: `${spot.name}/e0`, reason: 'termination notice' }], 'taken out of rotation by the notice, not by a broken stream')
  t.ok(answer.instances.includes(`${spot.name}/e1`), 'the instance registered mid-step joined it')
  t.ok(answer.responses.some(r => r.route.includes(`${spot.name}/e1`)), 'and took requests')
  t.match((await trainer.client.rollout()).cluster.find(i => i.id === `${spot.name}/e0`), { terminating: true }, 'peers see the notice')
})

t.test('bad registrations and submissions: a coded 4xx with the reason, nothing registered or sent', async t => {
  const mesh = await startTestMesh(t, { nodes: 1 })
  const agent = mesh.agents[0]!
  const url = (await spawnEngineDouble(t, 'x', ['--model', model])).url
  const refused = async (what: string, call: () => Promise<unknown>, code: string, message: RegExp): Promise<void> => {
    await t.rejects(call(), { code, message }, what)
  }
  await refused('nothing listens there', () => agent.client.rolloutRegister({ id: 'e0', url: 'http://127.0.0.1:1', model }), 'ERR_BAD_REQUEST', /not registered: GET http:\/\/127\.0\.0\.1:1\/v1\/models failed/)
  await refused('another model', () => agent.client.rolloutRegister({ id: 'e0', url, model: 'other' }), 'ERR_BAD_REQUEST', /serves "double-7b", not "other"/)
  await refused('not a URL', () => agent.client.rolloutRegister({ id: 'e0', url: 'ftp://x', model }), 'ERR_BAD_REQUEST', /url/)
  await refused('an id with a slash', () => agent.client.rolloutRegister({ id: 'a/b', url, model }), 'ERR_BAD_REQUEST', /id/)
  t.same((await agent.client.rollout()).local, [], 'nothing registered')
  await refused('unknown instance', () => agent.client.rolloutDeregister('nope'), 'ERR_NOT_FOUND', /no rollout instance "nope"/)
  await refused('notice for an unknown instance', () => agent.client.rolloutTerminate({ instances: ['nope'] }), 'ERR_NOT_FOUND', /nothing was marked/)

  await agent.client.rolloutRegister({ id: 'e0', url, model })
  const ok = requests(2, 5)
  await refused('no requests', () => agent.client.rolloutStep({ requests: [] }), 'ERR_BAD_REQUEST', /requests/)
  await refused('a request twice', () => agent.client.rolloutStep({ requests: [ok[0]!, ok[0]!] }), 'ERR_BAD_REQUEST', /appears twice/)
  await refused('n = 4', () => agent.client.rolloutStep({ requests: [{ ...ok[0]!, sampling: { n: 4 } }] }), 'ERR_BAD_REQUEST', /more than one sequence/)
  await refused('maxTokens 0', () => agent.client.rolloutStep({ requests: [{ ...ok[0]!, maxTokens: 0 }] }), 'ERR_BAD_REQUEST', /maxTokens/)
  await refused('an unknown option', () => agent.client.rolloutStep({ requests: ok, options: { bogus: 1 } as never }), 'ERR_BAD_REQUEST', /bogus|additional/)
  t.same((await agent.client.rollout()).steps, [], 'no step ran')

  const answer = await agent.client.rolloutStep({ model, requests: ok })
  checkIdentical(t, ok, answer)
  // A real step's prompts exceed the API's default 1 MiB body limit: 256 prompts of 12 KiB are taken.
  const big = Array.from({ length: 256 }, (_, i) => ({ id: `b${i}`, prompt: `${i} `.padEnd(12_288, 'x'), maxTokens: 1 }))
  t.equal((await agent.client.rolloutStep({ model, requests: big, options: { maxPending: 256 } })).responses.length, 256, 'a 3 MiB step is taken')
  await refused('no instance serves the model', () => agent.client.rolloutStep({ model: 'other', requests: ok, options: { noInstanceTimeoutMs: 200 } }), 'ERR_UNAVAILABLE', /no rollout instance in rotation/)
})

t.test('agentctl: register an engine, generate from a prompts file, see the instance, give notice', async t => {
  const mesh = await startTestMesh(t, { nodes: 1 })
  const agent = mesh.agents[0]!
  const url = (await spawnEngineDouble(t, 'x', ['--model', model, '--eos-every', String(eosEvery)])).url
  const ctl = async (...args: string[]): Promise<string> => {
    const r = await runNode(agentctlMain, ['--socket', agent.socketPath, ...args])
    t.equal(r.code, 0, `agentctl ${args.join(' ')}${r.code !== 0 ? `: ${r.stderr}` : ''}`)
    return r.stdout
  }
  t.match(await ctl('rollout', 'register', 'e0', '--url', url, '--model', model, '--gpu', '0'), /rollout instance e0 registered: .* serves double-7b \(up\)/)
  const prompts = join(tempDir(t), 'prompts.jsonl')
  writeFileSync(prompts, '{"prompt": "a b c"}\n\n{"id": "second", "prompt": "d e", "maxTokens": 3}\n')
  t.match(await ctl('rollout', 'generate', prompts, '--model', model, '--max-tokens', '5'), /^2 responses, 8 tokens in .* over 1 instances/)
  const answer = JSON.parse(await ctl('rollout', 'generate', prompts, '--json')) as RolloutStepAnswer
  t.same(answer.responses.map(r => [r.id, r.text]), [['p1', uninterrupted('a b c', 256, eosEvery).text], ['second', uninterrupted('d e', 3, eosEvery).text]], 'ids from the file or its line numbers; maxTokens from the line or --max-tokens')
  t.match(await ctl('rollout', 'status'), new RegExp(`e0 +${url.replaceAll('.', '\\.')} +double-7b +- +0 +up`))
  t.match(await ctl('rollout', 'terminate', '--reason', 'spot-reclaim'), /terminating: e0/)
  t.match(await ctl('rollout', 'status'), /node00\/e0 .* terminating/)
  t.match(await ctl('rollout', 'deregister', 'e0'), /deregistered/)
  const bad = await runNode(agentctlMain, ['--socket', agent.socketPath, 'rollout', 'generate', prompts.replace('.jsonl', '.missing')])
  t.not(bad.code, 0, 'a missing prompts file fails')
  writeFileSync(prompts, '{"prompt": "ok"}\n{"text": "no prompt"}\n')
  const badLine = await runNode(agentctlMain, ['--socket', agent.socketPath, 'rollout', 'generate', prompts])
  t.match(badLine.stderr, /prompts\.jsonl:2: expected \{"prompt": "\.\.\."\}/, 'a line without a prompt is named')
})

t.test('a step on weight version N uses the engines on N; one that pulled N registers again and joins', async t => {
  const mesh = await startTestMesh(t, { nodes: 1 })
  const agent = mesh.agents[0]!
  const args = ['--eos-every', String(eosEvery), '--decode-step-ms', '8', '--model', model, '--max-running', '4'] // requests queue: work is left for a joiner
  const current = await spawnEngineDouble(t, 'v4', args)
  const behind = await spawnEngineDouble(t, 'v3', args)
  await agent.client.rolloutRegister({ id: 'new', url: current.url, model, weightVersion: 4 })
  await agent.client.rolloutRegister({ id: 'old', url: behind.url, model, weightVersion: 3 })
  const reqs = requests(16, 200)
  const step = agent.client.rolloutStep({ model, weightVersion: 4, requests: reqs, options: { maxPending: 2 } })
  await sleep(400)
  t.same((await agent.client.rollout()).steps.map(s => s.instances), [1], 'only the engine on version 4 at first')
  await agent.client.rolloutRegister({ id: 'old', url: behind.url, model, weightVersion: 4 }) // it pulled version 4
  const answer = await step
  checkIdentical(t, reqs, answer)
  t.same(answer.instances.sort(), [`${agent.name}/new`, `${agent.name}/old`], 'the updated engine joined the step')
  t.ok(answer.responses.some(r => r.route.includes(`${agent.name}/old`)), 'and took requests')
  await t.rejects(agent.client.rolloutStep({ model, weightVersion: 5, requests: reqs.slice(0, 1), options: { noInstanceTimeoutMs: 200 } }), { code: 'ERR_UNAVAILABLE' }, 'no engine on version 5')
})

t.test('a step with a step id survives the death of the agent that ran it: submitted again, it goes on from the journaled tokens', async t => {
  const mesh = await startTestMesh(t, { nodes: 1 })
  let agent = mesh.agents[0]!
  const args = ['--eos-every', String(eosEvery), '--decode-step-ms', '40', '--model', model] // responses take seconds
  for (const id of ['e0', 'e1']) await agent.client.rolloutRegister({ id, url: (await spawnEngineDouble(t, id, args)).url, model })
  const reqs = requests(12, 300)
  const body: RolloutStepBody = { stepId: 'train-step-41', model, requests: reqs, options: { maxPending: 6 } }
  const lost = agent.client.rolloutStep(body)
  lost.catch(() => {})
  await sleep(1600) // a journal written (every second), mid-generation
  agent.proc.kill('SIGKILL')
  await t.rejects(lost, { code: 'ERR_CONNECTION_LOST' }, 'the trainer sees its agent die')
  agent = await mesh.addAgent({ name: agent.name, stateDir: agent.stateDir })
  // Submitted twice at once (a trainer's retry racing its first try): one step runs, both get its answer.
  const twice = [agent.client.rolloutStep(body), agent.client.rolloutStep(body)]
  await sleep(300)
  t.equal((await agent.client.rollout()).steps.length, 1, 'one step runs for both submissions')
  const [answer, duplicate] = await Promise.all(twice) as [RolloutStepAnswer, RolloutStepAnswer]
  t.same(duplicate.responses, answer.responses, 'the duplicate gets the same answer')
  checkIdentical(t, reqs, answer)
  const total = answer.responses.reduce((n, r) => n + r.tokens, 0)
  t.ok(answer.resumed !== undefined && answer.resumed.tokens > 0, `resumed ${answer.resumed?.requests} requests with ${answer.resumed?.tokens} tokens from the journal`)
  t.equal(answer.generatedTokens, total - answer.resumed!.tokens, 'the engines generated only what the journal did not hold')

  const again = await agent.client.rolloutStep(body)
  t.same(again.responses, answer.responses, 'once complete, the same step is answered again')
  await t.rejects(agent.client.rolloutStep({ ...body, requests: reqs.slice(1) }), { code: 'ERR_BAD_REQUEST', message: /was used for other requests/ }, 'the same id with other requests is refused')
})

t.test('a streamed step: each response as soon as it is complete, then the summary; a failure after the first is an error event', async t => {
  const mesh = await startTestMesh(t, { nodes: 1 })
  const agent = mesh.agents[0]!
  const args = ['--eos-every', String(eosEvery), '--decode-step-ms', '8', '--model', model]
  const engines = [await spawnEngineDouble(t, 's0', args), await spawnEngineDouble(t, 's1', args)]
  for (const [i, e] of engines.entries()) await agent.client.rolloutRegister({ id: `s${i}`, url: e.url, model })
  const reqs = requests(10, 200)
  const seen: Array<{ event: string, atMs: number, data: unknown }> = []
  const began = performance.now()
  for await (const e of agent.client.rolloutStepEvents({ model, requests: reqs, stepId: 'streamed-1' })) seen.push({ ...e, atMs: performance.now() - began })
  t.same(seen.map(e => e.event), [...reqs.map(() => 'response'), 'done'], 'one event per response, then done')
  const responses = seen.slice(0, -1).map(e => e.data as RolloutStepAnswer['responses'][number])
  const byId = new Map(responses.map(r => [r.id, r]))
  checkIdentical(t, reqs, { ...(seen.at(-1)!.data as RolloutStepAnswer), responses: reqs.map(r => byId.get(r.id)!) })
  t.ok(seen[0]!.atMs < 0.8 * seen.at(-1)!.atMs, `the first response came at ${seen[0]!.atMs.toFixed(0)} ms, before the step ended at ${seen.at(-1)!.atMs.toFixed(0)} ms`)
  t.notOk('responses' in (seen.at(-1)!.data as object), 'the summary does not repeat the responses')

  const replay = []
  for await (const e of agent.client.rolloutStepEvents({ model, requests: reqs, stepId: 'streamed-1' })) replay.push(e.event)
  t.same(replay, [...reqs.map(() => 'response'), 'done'], 'a complete named step streams its responses again')

  await t.rejects(async () => { for await (const _ of agent.client.rolloutStepEvents({ model: 'other', requests: reqs, options: { noInstanceTimeoutMs: 100 } })) { /* none */ } },
    { code: 'ERR_UNAVAILABLE' }, 'a failure before any response is the usual coded answer')

  const failing: string[] = []
  const stream = agent.client.rolloutStepEvents({ model, requests: requests(10, 400).map(r => ({ ...r, prompt: `${r.prompt} slow` })), options: { noInstanceTimeoutMs: 300, maxPending: 10 } })
  let killed = false
  for await (const e of stream) {
    failing.push(e.event)
    if (!killed) { killed = true; for (const x of engines) x.kill() }
    if (e.event === 'error') t.match(e.data, { code: 'ERR_UNAVAILABLE', message: /no rollout instance in rotation/ })
  }
  t.equal(failing.at(-1), 'error', `the stream ends with an error event (${failing.join(', ')})`)
})
