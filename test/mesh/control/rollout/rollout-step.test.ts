// A rollout step against real HTTP engines (the engine double, in separate processes where they are
// killed): every response complete and token-identical to an uninterrupted generation, whatever is
// preempted, stalls or streams garbage; delayed dispatch keeps Θ; balancing moves queued requests to
// an instance that joined.
import t, { type Test } from 'tap'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { spawnEngineDouble, startEngineDouble, uninterrupted, type EngineDoubleOptions } from '../../../helpers/engine-double.ts'
import { startRolloutStep, type RolloutInstance, type RolloutRequest } from '../../../../mesh/control/rollout/rollout-step.ts'

const eosEvery = 80

const requests = (n: number, maxTokens = 120): RolloutRequest[] =>
  Array.from({ length: n }, (_, i) => ({ id: `r${i}`, prompt: Array.from({ length: 20 + (i % 7) * 10 }, (_, k) => `q${i}_${k}`).join(' '), maxTokens }))

function checkIdentical (t: Test, reqs: RolloutRequest[], responses: Array<{ id: string, text: string, finish: string }>): void {
  const wrong = reqs.filter((r, i) => { const e = uninterrupted(r.prompt, r.maxTokens, eosEvery); return responses[i]!.text !== e.text || responses[i]!.finish !== e.finish })
  t.same(wrong.map(r => r.id), [], `all ${reqs.length} responses token-identical to an uninterrupted generation`)
}

async function inProcess (t: Test, id: string, o: Partial<EngineDoubleOptions> = {}): Promise<RolloutInstance & { load(): { running: number, queued: number } }> {
  const e = await startEngineDouble({ eosEvery, ...o })
  t.teardown(() => e.close())
  return { id, url: e.url, load: e.load }
}

const process_ = async (t: Test, id: string, args: string[] = []): Promise<RolloutInstance & { kill(): void }> =>
  await spawnEngineDouble(t, id, ['--eos-every', String(eosEvery), ...args])

t.test('no faults: every response as the engine generates it alone', async t => {
  const instances = [await inProcess(t, 'a', { decodeStepMs: 2 }), await inProcess(t, 'b', { decodeStepMs: 2 })]
  const reqs = requests(16)
  for (const balancer of ['rlboost', 'jsq', 'round-robin'] as const) {
    const r = await startRolloutStep(reqs, instances, { balancer, maxPending: 4 }).done
    checkIdentical(t, reqs, r.responses)
    // Only a request still queued in an engine may move (to an instance with an empty queue, under load).
    t.same({ ...r.moves, pending: 0 }, { lost: 0, pending: 0, executing: 0 }, `${balancer}: nothing lost, nothing moved while generating`)
    t.equal(r.generatedTokens, r.responses.reduce((n, x) => n + x.tokens, 0), `${balancer}: nothing generated twice`)
    t.equal(r.responses.reduce((n, x) => n + x.route.length - 1, 0), r.moves.pending, `${balancer}: each on one instance, but for the ${r.moves.pending} queued ones moved`)
    if (balancer === 'round-robin') t.same(r.responses.map(x => x.route[0]), reqs.map((_, i) => (i % 2 === 0 ? 'a' : 'b')), 'round-robin alternates')
  }
})

t.test('half the instances SIGKILLed mid-step: nothing lost, every token identical, one extra prefill per moved request', async t => {
  const instances = await Promise.all(['p0', 'p1', 'p2', 'p3', 'p4', 'p5'].map(id => process_(t, id, ['--decode-step-ms', '8'])))
  const reqs = requests(36, 200)
  const step = startRolloutStep(reqs, instances, { maxPending: 2, stallMs: 5000 })
  await sleep(400) // mid-generation: about 50 of up to 200 tokens each
  for (const i of [1, 3, 5]) instances[i]!.kill()
  const r = await step.done
  checkIdentical(t, reqs, r.responses)
  t.same(r.removed.map(x => x.instance).sort(), ['p1', 'p3', 'p5'], `the killed instances left the rotation: ${r.removed.map(x => x.reason).join('; ')}`)
  t.ok(r.removed.every(x => x.reason.startsWith('broken')), 'as broken streams')
  t.ok(r.moves.lost > 0, `${r.moves.lost} requests moved from the killed instances`)
  t.ok(r.responses.some(x => x.route.length > 1 && x.tokens > 0), 'some responses came from two instances')
  t.equal(r.generatedTokens, r.responses.reduce((n, x) => n + x.tokens, 0), 'no token generated twice: the moved requests went on from their tokens')
})

t.test('recompute (no token-level collection) gives the same answers and generates tokens twice', async t => {
  const instances = await Promise.all(['k0', 'k1'].map(id => process_(t, id, ['--decode-step-ms', '8'])))
  const reqs = requests(8, 200)
  const step = startRolloutStep(reqs, instances, { maxPending: 4, resume: 'recompute' })
  await sleep(400)
  instances[0]!.kill()
  const r = await step.done
  checkIdentical(t, reqs, r.responses)
  t.ok(r.generatedTokens > r.responses.reduce((n, x) => n + x.tokens, 0), `${r.generatedTokens} tokens generated for ${r.responses.reduce((n, x) => n + x.tokens, 0)} kept`)
})

/** An engine that misbehaves: `garbage` streams an event that is not JSON after a few tokens, `stall` never answers. */
async function misbehaving (t: Test, mode: 'garbage' | 'stall' | 'overrun' | 'status'): Promise<RolloutInstance> {
  const server: Server = createServer((req, res) => {
    req.resume()
    if (mode === 'stall') return
    if (mode === 'status') { res.writeHead(500).end('{"error":{"message":"engine crashed"}}'); return }
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    const chunk = (text: string): string => `data: ${JSON.stringify({ choices: [{ index: 0, text, finish_reason: null }] })}\n\n`
    if (mode === 'garbage') { res.write(chunk(' w1')); res.write('data: {oops\n\n'); return }
    // Far more than max_tokens, but not so many that writing them blocks this process (the good
    // engine runs in it too) long enough for its first token to miss firstTokenMs on a loaded machine.
    for (let i = 0; i < 1000; i++) res.write(chunk(' w2'))
  })
  server.listen(0, '127.0.0.1')
  await new Promise(resolve => server.once('listening', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { id: mode, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }
}

t.test('an instance that streams garbage, overruns max_tokens, stalls or fails is taken out with the reason; its requests finish elsewhere', async t => {
  const good = await inProcess(t, 'good', { decodeStepMs: 2 })
  const bad = [await misbehaving(t, 'garbage'), await misbehaving(t, 'overrun'), await misbehaving(t, 'stall'), await misbehaving(t, 'status')]
  const reqs = requests(12)
  // Balancing off: it would move the stalled instance's queued requests away before the stall is noticed.
  const r = await startRolloutStep(reqs, [...bad, good], { maxPending: 2, firstTokenMs: 2000, stallMs: 2000, rebalanceIntervalMs: 0 }).done
  checkIdentical(t, reqs, r.responses)
  const reasons = Object.fromEntries(r.removed.map(x => [x.instance, x.reason]))
  t.match(reasons, { garbage: /^garbage: an event that is not JSON/, overrun: /^garbage: more than the \d+ tokens/, stall: /^stalled: no first token for 2000 ms/, status: /^garbage: the engine answered 500/ })
  t.notOk('good' in reasons, 'the good instance stays')
})

t.test('delayed dispatch: no instance ever holds more than Θ requests that have not started', async t => {
  const e = await inProcess(t, 'one', { decodeStepMs: 2, kvCapacityTokens: 4 * 200 })
  const step = startRolloutStep(requests(20, 60), [e], { maxPending: 2 })
  let maxQueued = 0
  let running = true
  void step.done.finally(() => { running = false })
  while (running) { maxQueued = Math.max(maxQueued, e.load().queued); await sleep(2) }
  const r = await step.done
  t.ok(maxQueued <= 2 && maxQueued > 0, `at most Θ = 2 queued in the engine (seen ${maxQueued}); the rest waited in the manager`)
  t.equal(r.responses.filter(x => x.finish !== '').length, 20)
})

t.test('continuous balancing: an instance that joins takes queued requests one at a time; no step fails for want of instances while one can join', async t => {
  const busy = await inProcess(t, 'busy', { decodeStepMs: 4, kvCapacityTokens: 3 * 200 })
  const reqs = requests(18)
  const step = startRolloutStep(reqs, [busy], { maxPending: 100, rebalanceIntervalMs: 20 })
  await sleep(100)
  step.add(await inProcess(t, 'joined', { decodeStepMs: 4 }))
  const r = await step.done
  checkIdentical(t, reqs, r.responses)
  t.ok(r.moves.pending > 0, `${r.moves.pending} queued requests moved to the new instance`)
  t.ok(r.responses.some(x => x.route.at(-1) === 'joined'), 'the new instance finished some')

  const none = startRolloutStep(requests(2), [], { noInstanceTimeoutMs: 2000 })
  await sleep(200)
  none.add(await inProcess(t, 'late', { decodeStepMs: 1 }))
  t.equal((await none.done).responses.length, 2, 'a step with no instance yet waits for one')
  await t.rejects(startRolloutStep(requests(1), [], { noInstanceTimeoutMs: 100 }).done, { code: 'ERR_UNAVAILABLE', message: /no rollout instance in rotation for 100 ms/ })
})

t.test('a queued request moved to an instance slow to start it stays there: no back and forth between queues', async t => {
  // busy runs 3 at a time (KV): the 4th queues. joined takes long to prefill: the moved request waits
  // many balancing rounds for its first token, while busy's queue is empty again.
  const busy = await inProcess(t, 'busy', { decodeStepMs: 4, kvCapacityTokens: 3 * 200 })
  const reqs = requests(4, 150)
  const step = startRolloutStep(reqs, [busy], { maxPending: 100, rebalanceIntervalMs: 20, maxMoves: 8 })
  await sleep(50)
  step.add(await inProcess(t, 'joined', { decodeStepMs: 4, prefillMsPerToken: 15 }))
  const r = await step.done
  checkIdentical(t, reqs, r.responses)
  t.ok(r.responses.every(x => x.route.length <= 2), `each request moved at most once (routes: ${r.responses.map(x => x.route.join('>')).join(', ')})`)
})

t.test('bad steps are refused before anything is sent', async t => {
  t.throws(() => startRolloutStep([{ id: 'x', prompt: 'a', maxTokens: 1 }, { id: 'x', prompt: 'b', maxTokens: 1 }], []), { code: 'ERR_BAD_REQUEST', message: /appears twice/ })
  t.throws(() => startRolloutStep([{ id: 'x', prompt: 'a', maxTokens: 0 }], []), { code: 'ERR_BAD_REQUEST', message: /maxTokens/ })
  t.same((await startRolloutStep([], []).done).responses, [], 'an empty step ends at once')
})
