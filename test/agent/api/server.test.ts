import t from 'tap'
import { pino } from 'pino'
import { buildApiApp } from '../../../agent/api/server.ts'
import { toAgentError } from '../../../agent/api/error-mapping.ts'
import { httpStatusOf } from '../../../agent/api/error-status.ts'
import { AgentError } from '../../../core/errors.ts'
import type { StatusBody } from '../../../agent/api/wire/status.ts'

const status: StatusBody = { node: { id: 'id-1', name: 'n1' }, version: '1.2.3', uptimeS: 1.5, dev: true, subsystems: [{ id: 'api', state: 'ok' }] }

async function app (t: { teardown(fn: () => unknown): void }, inventory: () => unknown = () => undefined) {
  const a = await buildApiApp({ bodyLimitBytes: 1024, version: '1.2.3' }, {
    logger: pino({ level: 'silent' }),
    status: { status: () => status },
    inventory: { inventory: inventory as never },
  })
  t.teardown(() => a.close())
  return a
}

t.test('GET /v1/status and /healthz', async t => {
  const a = await app(t)
  const res = await a.inject({ method: 'GET', url: '/v1/status' })
  t.equal(res.statusCode, 200)
  t.same(res.json(), status)
  t.same((await a.inject({ url: '/healthz' })).json(), { ok: true })
})

t.test('while the agent starts, status and the OpenAPI document answer; every other route, health included, answers 503 ERR_STARTING', async t => {
  let lifecycle: 'starting' | 'ready' = 'starting'
  const starting: StatusBody = { ...status, state: 'starting', subsystems: [{ id: 'api', state: 'ok' }, { id: 'state', state: 'pending' }] }
  const a = await buildApiApp({ bodyLimitBytes: 1024, version: '1.2.3' }, {
    logger: pino({ level: 'silent' }),
    status: { status: () => lifecycle === 'starting' ? starting : status, lifecycle: () => lifecycle },
    inventory: { inventory: () => undefined },
  })
  t.teardown(() => a.close())
  t.equal((await a.inject({ url: '/v1/status' })).json().state, 'starting')
  t.equal((await a.inject({ url: '/v1/openapi.json' })).statusCode, 200)
  for (const request of [{ url: '/healthz' }, { url: '/v1/node' }, { url: '/v1/state/residency' }, { method: 'POST' as const, url: '/v1/state/drop', payload: { prefix: 'x' } }]) {
    const res = await a.inject(request)
    t.equal(res.statusCode, 503, request.url)
    t.equal(res.json().error.code, 'ERR_STARTING')
    t.match(res.json().error.message, /subsystems not started yet: state/)
  }
  lifecycle = 'ready'
  t.same((await a.inject({ url: '/healthz' })).json(), { ok: true })
  t.equal((await a.inject({ url: '/v1/node' })).json().error.code, 'ERR_UNAVAILABLE', 'routes answer as usual')
})

t.test('GET /v1/node: 503 with a code while no inventory, 200 after', async t => {
  let inventory: unknown
  const a = await app(t, () => inventory)
  const missing = await a.inject({ url: '/v1/node' })
  t.equal(missing.statusCode, 503)
  t.equal(missing.json().error.code, 'ERR_UNAVAILABLE')
  inventory = {
    hostname: 'n1',
    cpu: { model: 'x', cores: 2, physicalCores: 2, sockets: 1 },
    memory: { totalBytes: 1024, availableBytes: 512 },
    disks: [],
    filesystems: [],
    network: [],
    gpus: { detected: false, source: 'detected', reason: 'none', devices: [] },
    probedAtMs: 1,
  }
  t.same((await a.inject({ url: '/v1/node' })).json(), inventory)
})

t.test('errors are JSON with a stable code and matching status', async t => {
  const a = await app(t)
  const notFound = await a.inject({ url: '/v1/nope' })
  t.equal(notFound.statusCode, 404)
  t.same(notFound.json(), { error: { code: 'ERR_NOT_FOUND', message: 'no route GET /v1/nope' } })

  const badJson = await a.inject({ method: 'POST', url: '/v1/status', headers: { 'content-type': 'application/json' }, payload: '{"a":' })
  t.equal(badJson.statusCode, 400)
  t.equal(badJson.json().error.code, 'ERR_BAD_REQUEST')

  const tooLarge = await a.inject({ method: 'POST', url: '/v1/status', headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ x: 'y'.repeat(4096) }) })
  t.equal(tooLarge.statusCode, 413)
  t.equal(tooLarge.json().error.code, 'ERR_BODY_TOO_LARGE')

  const after = await a.inject({ url: '/v1/status' })
  t.equal(after.statusCode, 200, 'the server keeps serving after bad requests')
})

t.test('routes validate input against their schema (wrong types get 400)', async t => {
  const { Type } = await import('@sinclair/typebox')
  // A route declared the way service routes are: the schema alone rejects wrong types.
  const c = (await import('fastify')).default({ logger: false })
  t.teardown(() => c.close())
  const { createErrorHandler } = await import('../../../agent/api/error-mapping.ts')
  c.setErrorHandler(createErrorHandler(pino({ level: 'silent' })))
  c.post('/x', { schema: { body: Type.Object({ n: Type.Integer() }, { additionalProperties: false }) } }, async () => ({ ok: true }))
  const res = await c.inject({ method: 'POST', url: '/x', payload: { n: 'one' } })
  t.equal(res.statusCode, 400)
  t.equal(res.json().error.code, 'ERR_BAD_REQUEST')
  t.match(res.json().error.message, /invalid body: .*n/)
  const media = await c.inject({ method: 'POST', url: '/x', headers: { 'content-type': 'application/x-weird' }, payload: 'zz' })
  t.equal(media.statusCode, 415)
  t.equal(media.json().error.code, 'ERR_UNSUPPORTED_MEDIA_TYPE')
})

t.test('GET /v1/openapi.json documents the routes and the error body', async t => {
  const a = await app(t)
  const doc = (await a.inject({ url: '/v1/openapi.json' })).json()
  t.equal(doc.openapi, '3.1.0')
  t.ok(doc.paths['/v1/status']?.get, 'status documented')
  t.ok(doc.paths['/v1/node']?.get, 'node documented')
  t.ok(doc.paths['/healthz']?.get, 'healthz documented')
  t.notOk(doc.paths['/v1/openapi.json'], 'the document itself is hidden')
  t.match(JSON.stringify(doc.components), /Stable error code/)
})

t.test('error mapping: AgentError kept, unexpected errors hidden as ERR_INTERNAL', async t => {
  const own = new AgentError('ERR_SOCKET_IN_USE', 'busy')
  t.equal(toAgentError(own), own)
  const internal = toAgentError(new TypeError('x is undefined'))
  t.equal(internal.code, 'ERR_INTERNAL')
  t.equal(httpStatusOf(internal), 500)
  t.notMatch(internal.message, /x is undefined/, 'internals are not leaked to clients')
})
