// Route schemas compiled at first use: the same answers as compiled at start-up, a broken schema found by compileAll.
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { pino } from 'pino'
import { lazySchemaCompilers } from '../../../agent/api/lazy-schema-compilers.ts'
import { requestValidatorBuilder, schemaErrorFormatter } from '../../../agent/api/request-validation.ts'
import { buildApiApp } from '../../../agent/api/server.ts'

const body = { type: 'object', required: ['n'], additionalProperties: false, properties: { n: { type: 'integer', minimum: 1 } } }
const response = { 200: { type: 'object', properties: { n: { type: 'integer' }, label: { type: 'string' } } } }

async function app (t: { teardown(fn: () => unknown): void }, lazy: boolean): Promise<FastifyInstance> {
  const compilers = lazySchemaCompilers(requestValidatorBuilder())
  const a = Fastify({
    schemaController: { compilersFactory: lazy ? { buildValidator: compilers.buildValidator, buildSerializer: compilers.buildSerializer } : { buildValidator: requestValidatorBuilder() } },
    schemaErrorFormatter,
  })
  // The handler answers a field the response schema does not declare: the serializer leaves it out.
  a.post('/echo', { schema: { body, response } }, async request => ({ ...(request.body as object), label: 'x', secret: 'not serialized' }))
  a.get('/q', { schema: { querystring: { type: 'object', additionalProperties: false, properties: { limit: { type: 'integer' } } } } }, async request => request.query)
  await a.ready()
  t.teardown(() => a.close())
  return a
}

t.test('lazily compiled routes answer exactly as routes compiled at start-up, on their first request and after', async t => {
  const [lazy, eager] = [await app(t, true), await app(t, false)]
  const requests = [
    { method: 'POST' as const, url: '/echo', payload: { n: 'x' } }, // a failure first: errors come from the compiled validator's first call
    { method: 'POST' as const, url: '/echo', payload: { n: 3 } },
    { method: 'POST' as const, url: '/echo', payload: { n: 0 } },
    { method: 'POST' as const, url: '/echo', payload: { n: 2, extra: true } },
    { method: 'POST' as const, url: '/echo', payload: { n: 5 } },
    { method: 'GET' as const, url: '/q?limit=5' },
    { method: 'GET' as const, url: '/q?limit=x' },
    { method: 'GET' as const, url: '/q?other=1' },
  ]
  for (const request of requests) {
    const [a, b] = [await lazy.inject(request), await eager.inject(request)]
    t.same([a.statusCode, a.json()], [b.statusCode, b.json()], `${request.method} ${request.url} ${JSON.stringify(request.payload ?? '')}`)
  }
  t.same((await lazy.inject(requests[1]!)).json(), { n: 3, label: 'x' }, 'the response schema is applied')
  t.match((await lazy.inject(requests[3]!)).json(), { message: 'body/extra is not a field of this request' })
})

t.test('a schema that does not compile: the app starts, its route answers 500, compileAll throws', async t => {
  const compilers = lazySchemaCompilers(requestValidatorBuilder())
  const a = Fastify({ schemaController: { compilersFactory: { buildValidator: compilers.buildValidator, buildSerializer: compilers.buildSerializer } } })
  a.post('/broken', { schema: { body: { type: 'object', properties: { a: { $ref: '#/definitions/missing' } } } } }, async () => ({ ok: true }))
  a.get('/fine', async () => ({ ok: true }))
  await a.ready()
  t.teardown(() => a.close())
  t.equal((await a.inject({ url: '/fine' })).statusCode, 200)
  t.equal((await a.inject({ method: 'POST', url: '/broken', payload: { a: 1 } })).statusCode, 500)
  t.throws(() => compilers.compileAll(), /missing/, 'compileAll names the bad reference')
})

t.test('every schema of the agent\'s API compiles (compileSchemasNow)', async t => {
  const a = await buildApiApp({ bodyLimitBytes: 1024, version: '0', compileSchemasNow: true }, {
    logger: pino({ level: 'silent' }),
    status: { status: () => ({ node: { id: 'i', name: 'n' }, version: '0', uptimeS: 0, dev: true, subsystems: [] }) },
    inventory: { inventory: () => undefined },
  })
  t.teardown(() => a.close())
  t.ok(a.printRoutes().includes('decisions'), 'with every route registered')
})
