// JSON bodies are validated as sent (no type coercion), while path params and
// query strings, text on the wire, are still coerced to their declared types.
// Unknown fields are refused, never stripped, naming the field.
// Over the API listening on a real unix socket, through the typed client.
import t from 'tap'
import { listenApi } from './listening-api.ts'

interface Teardown { teardown(fn: () => unknown): void }

async function served (t: Teardown) {
  const calls: Array<{ route: string, args: unknown[] }> = []
  const record = (route: string, answer: unknown) => async (...args: unknown[]) => { calls.push({ route, args }); return answer }
  const reward = {
    fetchWork: record('fetch', { lease: null }),
    completeWork: record('complete', { ok: true }),
    result: record('result', { state: 'pending' }),
    batchStart: record('batchStart', { started: true }),
    submit: record('submit', { requestId: 'r', duplicate: false }),
  }
  const weights = { retire: record('retire', undefined) }
  const state = { hints: record('hints', { hinted: 0 }), drop: record('drop', 0), prefetch: (selector: unknown) => { calls.push({ route: 'prefetch', args: [selector] }); return 0 } }
  const locks = { release: (request: unknown) => { calls.push({ route: 'release', args: [request] }); return { gpu: 1, holder: 'h', depth: 0 } } }
  const api = await listenApi(t, {}, {
    reward: { reward: () => reward as never },
    weights: { weights: () => weights as never },
    state: { stateManager: () => state as never },
    locks: { deviceLock: () => locks as never },
  })
  return { ...api, calls }
}

t.test('body fields are not coerced: null, "0", "1" or true for an integer (and the like) is a coded 400 naming the field', async t => {
  const { client, calls } = await served(t)
  const cases: Array<{ path: string, body: Record<string, unknown>, field: string }> = []
  for (const wrong of [null, '0', '1', true]) {
    cases.push({ path: '/v1/reward/work/fetch', body: { workerId: 'w1', waitMs: wrong }, field: 'waitMs' })
    cases.push({ path: '/v1/weights/retire', body: { model: 'm', version: wrong }, field: 'version' })
    cases.push({ path: '/v1/state/hints', body: { next: [{ prefix: 'a/', inMs: wrong }] }, field: 'next/0/inMs' })
  }
  cases.push({ path: '/v1/reward/work/fetch', body: { workerId: 7, waitMs: 0 }, field: 'workerId' }) // a number for a string
  cases.push({ path: '/v1/reward/work/complete', body: { workerId: 'w1', leaseId: 'l1', reward: '0.5' }, field: 'reward' }) // a string for a number
  cases.push({ path: '/v1/state/drop', body: { keys: 'a/b' }, field: 'keys' }) // a scalar for an array
  for (const wrong of [null, 'gpu', 7, true]) cases.push({ path: '/v1/state/prefetch', body: { prefix: 'a/', tier: wrong }, field: 'tier' }) // tier is a field; "host" its only value
  for (const { path, body, field } of cases) {
    await t.rejects(client.call('POST', path, body), { code: 'ERR_BAD_REQUEST', message: new RegExp(`invalid body: body/${field} `) }, `${path} ${JSON.stringify(body)}`)
  }
  t.same(calls, [], 'no handler saw a coerced body')
})

t.test('well-typed bodies pass unchanged', async t => {
  const { client, calls } = await served(t)
  t.same(await client.call('POST', '/v1/reward/work/fetch', { workerId: 'w1', waitMs: 0 }), { lease: null })
  t.same(await client.call('POST', '/v1/weights/retire', { model: 'm', version: 3 }), { retired: true })
  t.same(await client.call('POST', '/v1/reward/work/complete', { workerId: 'w1', leaseId: 'l1', reward: 0.5 }), { ok: true })
  t.same(calls[0]?.args[0], { workerId: 'w1', waitMs: 0 })
  t.same(calls[1]?.args, ['m', 3])
  t.same(calls[2]?.args[0], { workerId: 'w1', leaseId: 'l1', reward: 0.5 })
  t.same(await client.call('POST', '/v1/state/prefetch', { prefix: 'a/', tier: 'host' }), { scheduled: 0 })
  t.same(calls[3]?.args[0], { prefix: 'a/', tier: 'host' })
})

t.test('path params and query strings are still coerced from text; text that is no number is a coded 400', async t => {
  const { client, calls } = await served(t)
  t.same(await client.rewardResult('r-1', 250), { state: 'pending' })
  t.same(calls.at(-1)?.args.slice(0, 2), ['r-1', 250], '?waitMs=250 arrives as the number 250')
  t.same(await client.call('POST', '/v1/locks/gpu/1/release', {}), { gpu: 1, holder: 'h', depth: 0 })
  t.match(calls.at(-1)?.args[0], { gpu: 1 }, '/gpu/1/ arrives as the number 1')
  await t.rejects(client.call('GET', '/v1/reward/requests/r-1?waitMs=soon'), { code: 'ERR_BAD_REQUEST', message: /invalid querystring: querystring\/waitMs / })
  await t.rejects(client.call('POST', '/v1/locks/gpu/one/release', {}), { code: 'ERR_BAD_REQUEST', message: /invalid params: params\/n / })
})

t.test('every /v1/reward route refuses an unknown field (body or query), naming it, and strips nothing', async t => {
  const { client, calls } = await served(t)
  const cases: Array<{ method: 'GET' | 'POST', path: string, body?: Record<string, unknown>, field: string }> = [
    { method: 'POST', path: '/v1/reward/batches', body: { task: 't', batch: 0, size: 1, priority: 1 }, field: 'body/priority' },
    { method: 'POST', path: '/v1/reward/batches', body: { task: 't', batch: '0', size: 1 }, field: 'body/batch' },
    { method: 'POST', path: '/v1/reward/requests', body: { task: 't', batch: 0, requestId: 'r', payload: {}, retried: true }, field: 'body/retried' },
    { method: 'POST', path: '/v1/reward/requests', body: { task: 't', batch: '0', requestId: 'r', payload: {} }, field: 'body/batch' },
    { method: 'POST', path: '/v1/reward/requests', body: { task: 't', batch: 0, requestId: 'r', payload: {}, batchSize: '4' }, field: 'body/batchSize' },
    { method: 'GET', path: '/v1/reward/requests/r-1?waitMs=0&since=5', field: 'querystring/since' },
    { method: 'POST', path: '/v1/reward/work/fetch', body: { workerId: 'w1', waitMs: 0, stage: 'verify' }, field: 'body/stage' },
    { method: 'POST', path: '/v1/reward/work/complete', body: { workerId: 'w1', leaseId: 'l1', reward: 0.5, retried: true }, field: 'body/retried' },
  ]
  for (const { method, path, body, field } of cases) {
    await t.rejects(client.call(method, path, body), { code: 'ERR_BAD_REQUEST', message: new RegExp(`${field} `) }, `${method} ${path} ${JSON.stringify(body ?? {})}`)
  }
  t.same(calls, [], 'no handler saw a stripped or coerced request')
  const payload = { anything: { nested: [1, 'two'] }, retried: true }
  t.same(await client.call('POST', '/v1/reward/requests', { task: 't', batch: 0, requestId: 'r', payload }), { requestId: 'r', duplicate: false })
  t.same(calls.at(-1)?.args[0], { task: 't', batch: 0, requestId: 'r', payload }, 'a payload is the trainer\'s own JSON: passed whole')
})
