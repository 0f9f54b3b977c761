// The lock routes over a real unix socket (SO_PEERCRED identifies this test
// process), through the typed client: results, errors, waiter cancellation by
// closing the connection, the event stream, and an agent without the lock.
import t from 'tap'
import { join } from 'node:path'
import { request } from 'node:http'
import type { Socket } from 'node:net'
import { pino } from 'pino'
import { buildApiApp } from '../../../agent/api/server.ts'
import { createAgentClient, type AgentClient, type GpuLockStreamEvent } from '../../../agent/client/client.ts'
import { createDeviceLock, type DeviceLockService } from '../../../agent/state/device-lock.ts'
import { createProcfsProcessTable } from '../../../core/process-table.ts'
import type { StatusBody } from '../../../agent/api/wire/status.ts'
import { tempDir } from '../../helpers/agent-process.ts'

interface Teardown { teardown(fn: () => unknown): void }

const logger = pino({ level: 'silent' })
const me = `pid:${process.pid}`

interface Served { client: AgentClient, socketPath: string, connections: Set<Socket> }

async function serve (t: Teardown, lock: DeviceLockService | { unavailable: string }): Promise<Served> {
  const app = await buildApiApp({ bodyLimitBytes: 1024 * 1024, version: '0.0.0' }, {
    logger,
    status: { status: () => ({}) as StatusBody },
    inventory: { inventory: () => undefined },
    locks: { deviceLock: () => lock },
  })
  const socketPath = join(tempDir(t), 'api.sock')
  const connections = new Set<Socket>()
  app.server.on('connection', (socket: Socket) => connections.add(socket))
  await app.listen({ path: socketPath })
  t.teardown(() => app.close())
  return { client: createAgentClient({ socketPath, timeoutMs: 5000 }), socketPath, connections }
}

async function withLock (t: Teardown): Promise<Served & { lock: DeviceLockService }> {
  const lock = createDeviceLock({ gpuCount: 2, holderCheckIntervalMs: 20 }, { logger, processes: createProcfsProcessTable() })
  await lock.start()
  t.teardown(() => lock.stop())
  return { lock, ...await serve(t, lock) }
}

async function until (predicate: () => boolean | Promise<boolean>, timeoutMs = 3000): Promise<void> {
  const began = Date.now()
  while (!(await predicate())) {
    if (Date.now() - began > timeoutMs) throw new Error('condition not met in time')
    await new Promise(resolve => setTimeout(resolve, 5))
  }
}

t.test('acquire, re-enter, release and list through the API; the caller is the default holder', async t => {
  const { client } = await withLock(t)
  t.same(await client.acquireGpu(1), { gpu: 1, holder: me, depth: 1, waiting: 0 })
  t.same(await client.acquireGpu(1), { gpu: 1, holder: me, depth: 2, waiting: 0 })
  const listed = await client.locks()
  t.equal(listed.gpus.length, 2)
  t.match(listed.gpus[1], { gpu: 1, holder: me, pids: [process.pid], depth: 2, waiters: [] })
  t.ok(Math.abs(listed.gpus[1]!.heldSinceMs! - Date.now()) < 5000)
  t.same(listed.gpus[0], { gpu: 0, holder: null, pids: [], depth: 0, heldSinceMs: null, waiters: [] })
  t.same(await client.releaseGpu(1), { gpu: 1, holder: me, depth: 1 })
  t.same(await client.releaseGpu(1), { gpu: 1, holder: me, depth: 0 })
  t.same(await client.acquireGpu(0, { holder: 'job42/actor' }), { gpu: 0, holder: 'job42/actor', depth: 1, waiting: 0 })
  t.same(await client.releaseGpu(0, { holder: 'job42/actor' }), { gpu: 0, holder: 'job42/actor', depth: 0 })
})

t.test('FIFO over the socket: queued acquires are answered in arrival order', async t => {
  const { lock, client } = await withLock(t)
  await client.acquireGpu(0, { holder: 'a' })
  const order: string[] = []
  const queued: Array<Promise<unknown>> = []
  for (const holder of ['b', 'c', 'd']) {
    queued.push(client.acquireGpu(0, { holder }).then(r => { order.push(r.holder) }))
    await until(() => lock.gpuLock(0).waiters.some(w => w.holder === holder))
  }
  for (const holder of ['a', 'b', 'c']) {
    await client.releaseGpu(0, { holder })
    await until(() => lock.gpuLock(0).holder !== holder)
  }
  await Promise.all(queued)
  t.same(order, ['b', 'c', 'd'])
})

t.test('errors keep their code through HTTP and change nothing', async t => {
  const { client } = await withLock(t)
  await client.acquireGpu(0, { holder: 'owner' })
  await t.rejects(client.releaseGpu(0), { code: 'ERR_LOCK_NOT_HELD', message: `GPU 0 is not held by ${me} (held by owner)` })
  await t.rejects(client.releaseGpu(1), { code: 'ERR_LOCK_NOT_HELD', message: `GPU 1 is not held by ${me} (it is free)` })
  await t.rejects(client.acquireGpu(7), { code: 'ERR_NOT_FOUND', message: 'no GPU 7 on this node (GPUs 0-1)' })
  await t.rejects(client.releaseGpu(7), { code: 'ERR_NOT_FOUND' })
  await t.rejects(client.call('GET', '/v1/locks/gpu/7/events'), { code: 'ERR_NOT_FOUND' })
  await t.rejects(client.call('POST', '/v1/locks/gpu/x/acquire', {}), { code: 'ERR_BAD_REQUEST', message: /invalid params/ })
  await t.rejects(client.acquireGpu(1, { holder: 'pid:1' }), { code: 'ERR_BAD_REQUEST', message: /invalid body: .*holder/ })
  await t.rejects(client.acquireGpu(1, { timeoutMs: -5 }), { code: 'ERR_BAD_REQUEST', message: /timeoutMs/ })
  await t.rejects(client.call('POST', '/v1/locks/gpu/1/acquire', { timeoutMS: 100 }), {
    code: 'ERR_BAD_REQUEST', message: 'invalid body: unknown field "timeoutMS"; did you mean "timeoutMs"? (accepted: holder, timeoutMs)',
  }, 'a misspelt field is not silently dropped')
  await t.rejects(client.call('POST', '/v1/locks/gpu/1/acquire', []), { code: 'ERR_BAD_REQUEST', message: /invalid body/ })
  await t.rejects(client.acquireGpu(0, { timeoutMs: 50 }), { code: 'ERR_LOCK_TIMEOUT', message: `GPU 0 not granted to ${me} within 50 ms: held by owner (depth 1), 0 queued` })
  t.same((await client.locks()).gpus.map(g => [g.holder, g.depth, g.waiters.length]), [['owner', 1, 0], [null, 0, 0]], 'no partial state')
})

t.test('a waiting acquire whose connection closes leaves the queue', async t => {
  const { lock, client } = await withLock(t)
  await client.acquireGpu(0, { holder: 'holder' })
  const controller = new AbortController()
  const abandoned = client.acquireGpu(0, { holder: 'impatient', signal: controller.signal })
  const patient = client.acquireGpu(0, { holder: 'patient' })
  await until(() => lock.gpuLock(0).waiters.length === 2)
  controller.abort()
  await t.rejects(abandoned, { name: 'AbortError' })
  await until(() => lock.gpuLock(0).waiters.length === 1)
  t.same(lock.gpuLock(0).waiters.map(w => w.holder), ['patient'])
  await client.releaseGpu(0, { holder: 'holder' })
  t.equal((await patient).holder, 'patient', 'the next waiter is granted, not the one that left')
})

t.test('a grant whose connection is gone before the answer is given back, once: the next waiter gets the GPU', async t => {
  const { lock, client, socketPath, connections } = await withLock(t)
  await client.acquireGpu(0, { holder: 'holder' })
  const before = new Set(connections)
  // The waiter on a connection of its own, so that only it can be cut.
  const lost = request({ socketPath, method: 'POST', path: '/v1/locks/gpu/0/acquire', agent: false, headers: { 'content-type': 'application/json' } })
  lost.on('error', () => {})
  lost.end(JSON.stringify({ holder: 'lost' }))
  await until(() => lock.gpuLock(0).waiters.length === 1)
  const lostConnections = [...connections].filter(c => !before.has(c))
  t.equal(lostConnections.length, 1)
  const next = client.acquireGpu(0, { holder: 'next' })
  await until(() => lock.gpuLock(0).waiters.length === 2)
  const events: string[] = []
  lock.subscribe(e => {
    events.push(`${e.type} ${e.holder}`)
    // Cut the waiter's connection at the moment of its grant, before the route can answer.
    if (e.type === 'granted' && e.holder === 'lost') for (const c of lostConnections) c.destroy()
  })
  t.same(await client.releaseGpu(0, { holder: 'holder' }), { gpu: 0, holder: 'holder', depth: 0 })
  t.same(await next, { gpu: 0, holder: 'next', depth: 1, waiting: 0 })
  t.same(events, ['released holder', 'granted lost', 'waiter lost', 'released lost', 'granted next'])
  t.match(lock.gpuLock(0), { holder: 'next', depth: 1, waiters: [] })
})

t.test('event stream: the holder learns of a waiter, then sees its release; the waiter sees its grant', async t => {
  const { client } = await withLock(t)
  await client.acquireGpu(1, { holder: 'trainer' })
  const controller = new AbortController()
  t.teardown(() => controller.abort())
  const trainerEvents = client.gpuLockEvents(1, { holder: 'trainer', signal: controller.signal })[Symbol.asyncIterator]()
  const first = (await trainerEvents.next()).value as GpuLockStreamEvent
  t.match(first, { type: 'state', gpu: 1, holder: 'trainer', depth: 1, waiters: [] }, 'the stream opens with the state')
  const rolloutEvents = client.gpuLockEvents(1, { holder: 'rollout', signal: controller.signal })[Symbol.asyncIterator]()
  t.match((await rolloutEvents.next()).value, { type: 'state', holder: 'trainer' })

  const rollout = client.acquireGpu(1, { holder: 'rollout' })
  t.same((await trainerEvents.next()).value, { type: 'waiter', gpu: 1, holder: 'trainer', waiter: 'rollout', waiting: 1 })
  // What a holder does on `waiter`: offload, then release.
  await client.releaseGpu(1, { holder: 'trainer' })
  t.same((await trainerEvents.next()).value, { type: 'released', gpu: 1, holder: 'trainer', reason: 'released' })
  t.same((await rolloutEvents.next()).value, { type: 'granted', gpu: 1, holder: 'rollout', depth: 1, waiting: 0 })
  t.equal((await rollout).holder, 'rollout')

  // A holder that subscribes after a waiter queued is told at once.
  const late = client.acquireGpu(1, { holder: 'late' })
  await until(async () => (await client.locks()).gpus[1]!.waiters.length === 1)
  const again = client.gpuLockEvents(1, { holder: 'rollout', signal: controller.signal })[Symbol.asyncIterator]()
  t.match((await again.next()).value, { type: 'state', waiters: [{ holder: 'late' }] })
  t.same((await again.next()).value, { type: 'waiter', gpu: 1, holder: 'rollout', waiter: 'late', waiting: 1 })
  await client.releaseGpu(1, { holder: 'rollout' })
  await late
  controller.abort()
  t.same(await trainerEvents.next(), { done: true, value: undefined }, 'aborting ends the iteration quietly')
})

t.test('event stream without ?holder= follows the calling process\'s own holder (pid:<pid>)', async t => {
  const { client } = await withLock(t)
  const controller = new AbortController()
  t.teardown(() => controller.abort())
  const events = client.gpuLockEvents(0, { signal: controller.signal })[Symbol.asyncIterator]()
  t.match((await events.next()).value, { type: 'state', gpu: 0, holder: null })
  await client.acquireGpu(0)
  t.same((await events.next()).value, { type: 'granted', gpu: 0, holder: me, depth: 1, waiting: 0 })
  const other = client.acquireGpu(0, { holder: 'other' })
  t.same((await events.next()).value, { type: 'waiter', gpu: 0, holder: me, waiter: 'other', waiting: 1 })
  await client.releaseGpu(0)
  t.same((await events.next()).value, { type: 'released', gpu: 0, holder: me, reason: 'released' })
  t.equal((await other).holder, 'other')
  await client.releaseGpu(0, { holder: 'other' })
  await client.acquireGpu(0)
  t.same((await events.next()).value, { type: 'granted', gpu: 0, holder: me, depth: 1, waiting: 0 }, 'the grant and release of "other" were not in this stream')
})

t.test('without a device lock every lock route answers ERR_UNAVAILABLE with the reason', async t => {
  const { client } = await serve(t, { unavailable: 'no GPUs in the inventory' })
  const expected = { code: 'ERR_UNAVAILABLE', message: 'the device lock is unavailable: no GPUs in the inventory' }
  await t.rejects(client.locks(), expected)
  await t.rejects(client.acquireGpu(0), expected)
  await t.rejects(client.releaseGpu(0), expected)
  const events = client.gpuLockEvents(0)[Symbol.asyncIterator]()
  await t.rejects(events.next(), expected)
})

t.test('without peer credentials (no unix socket) a lock request is refused with the reason', async t => {
  const lock = createDeviceLock({ gpuCount: 1 }, { logger, processes: createProcfsProcessTable() })
  await lock.start()
  t.teardown(() => lock.stop())
  const app = await buildApiApp({ bodyLimitBytes: 1024, version: '0.0.0' }, {
    logger, status: { status: () => ({}) as StatusBody }, inventory: { inventory: () => undefined }, locks: { deviceLock: () => lock },
  })
  t.teardown(() => app.close())
  const res = await app.inject({ method: 'POST', url: '/v1/locks/gpu/0/acquire' })
  t.equal(res.statusCode, 503)
  t.match(res.json().error, { code: 'ERR_UNAVAILABLE', message: /cannot be identified: the device lock needs SO_PEERCRED/ })
  t.equal(lock.gpuLock(0).holder, null)
})

t.test('OpenAPI documents the lock routes, their bodies and the event stream', async t => {
  const { client } = await withLock(t)
  const doc = await client.openapi() as { paths: Record<string, Record<string, { requestBody?: unknown, responses: Record<string, { content?: Record<string, unknown> }> }>> }
  t.ok(doc.paths['/v1/locks']?.get)
  t.match(JSON.stringify(doc.paths['/v1/locks/gpu/{n}/acquire']?.post?.requestBody), /timeoutMs/)
  t.ok(doc.paths['/v1/locks/gpu/{n}/acquire']?.post?.responses['423'], 'ERR_LOCK_TIMEOUT documented')
  t.ok(doc.paths['/v1/locks/gpu/{n}/release']?.post?.responses['409'], 'ERR_LOCK_NOT_HELD documented')
  t.ok(doc.paths['/v1/locks/gpu/{n}/events']?.get?.responses['200']?.content?.['text/event-stream'])
})
