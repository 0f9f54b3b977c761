// The endpoint's HTTP behaviour over real TCP, from a stub source: paths, methods, errors, lifecycle.
import t from 'tap'
import { request } from 'node:http'
import { createServer as createTcpServer } from 'node:net'
import { once } from 'node:events'
import pino from 'pino'
import { createMetricsServer, type MetricsServer, type MetricsSource } from '../../../agent/metrics/metrics-server.ts'
import type { MetricFamily } from '../../../agent/metrics/exposition.ts'
import { parsePrometheusText, sampleValue } from './prometheus-text.ts'

const logger = pino({ level: 'silent' })

interface Answer { status: number, headers: Record<string, string | string[] | undefined>, body: string }

function http (address: string, method: string, path: string): Promise<Answer> {
  const [host, port] = [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))]
  return new Promise((resolve, reject) => {
    const req = request({ host, port, method, path, agent: false }, res => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { body += c })
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

function stubSource (families: () => MetricFamily[]): MetricsSource & { started: number, stopped: number, scrapes: number } {
  const source = {
    started: 0,
    stopped: 0,
    scrapes: 0,
    start () { source.started++ },
    stop () { source.stopped++ },
    async collect () { source.scrapes++; return families() },
  }
  return source
}

async function started (t: { teardown(fn: () => unknown): void }, source: MetricsSource, listen = '127.0.0.1:0'): Promise<MetricsServer> {
  const server = createMetricsServer({ listen, allowRemote: false }, { logger, source })
  await server.start()
  t.teardown(() => server.stop())
  return server
}

const families = (): MetricFamily[] => [{ name: 'agentd_test_total', help: 'A test counter.', type: 'counter', samples: [{ labels: { tier: 'host' }, value: 7 }] }]

t.test('GET and HEAD /metrics answer the text format; other paths 404, other methods 405', async t => {
  const source = stubSource(families)
  const server = await started(t, source)
  t.match(server.address(), /^127\.0\.0\.1:\d+$/)
  t.equal(source.started, 1, 'the source starts with the server')

  const get = await http(server.address(), 'GET', '/metrics')
  t.equal(get.status, 200)
  t.equal(get.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8')
  t.equal(sampleValue(parsePrometheusText(get.body), 'agentd_test_total', { tier: 'host' }), 7)
  t.equal(Number(get.headers['content-length']), Buffer.byteLength(get.body))

  const head = await http(server.address(), 'HEAD', '/metrics')
  t.equal(head.status, 200)
  t.equal(head.body, '', 'HEAD has no body')
  t.equal(Number(head.headers['content-length']), Buffer.byteLength(get.body), 'and the length GET would send')

  t.equal((await http(server.address(), 'GET', '/metrics?name[]=x')).status, 200, 'a query string is ignored')
  for (const path of ['/', '/metrics/', '/v1/status', '/metricsx']) {
    const other = await http(server.address(), 'GET', path)
    t.equal(other.status, 404, path)
    t.match(other.body, /GET \/metrics/)
  }
  for (const method of ['POST', 'PUT', 'DELETE', 'OPTIONS']) {
    const other = await http(server.address(), method, '/metrics')
    t.equal(other.status, 405, method)
    t.equal(other.headers.allow, 'GET, HEAD')
  }
})

t.test('a source that fails answers 500 and the endpoint keeps serving', async t => {
  let fail = true
  const server = await started(t, stubSource(() => { if (fail) throw new Error('boom'); return families() }))
  t.equal((await http(server.address(), 'GET', '/metrics')).status, 500)
  fail = false
  t.equal((await http(server.address(), 'GET', '/metrics')).status, 200)
})

t.test('an address in use is a start-up error naming it; stop is idempotent and closes the port', async t => {
  const blocker = createTcpServer()
  blocker.listen(0, '127.0.0.1')
  await once(blocker, 'listening')
  t.teardown(() => blocker.close())
  const port = (blocker.address() as { port: number }).port
  const source = stubSource(families)
  const busy = createMetricsServer({ listen: `127.0.0.1:${port}`, allowRemote: false }, { logger, source })
  await t.rejects(busy.start(), { code: 'ERR_SOCKET_IN_USE', message: new RegExp(`metrics\\.listen "127\\.0\\.0\\.1:${port}": the address is already in use`) })
  t.equal(source.started, 0, 'the source is not started when the server cannot listen')
  await busy.stop()

  const server = createMetricsServer({ listen: '127.0.0.1:0', allowRemote: false }, { logger, source })
  await server.start()
  const address = server.address()
  await server.stop()
  await server.stop()
  t.equal(source.stopped, 1, 'the source stops with the server, once')
  await t.rejects(http(address, 'GET', '/metrics'), { code: 'ECONNREFUSED' })
})

t.test('an address no interface has, or a non-loopback bind without allowRemote, is a configuration error', async t => {
  // 192.0.2.0/24 is TEST-NET-1: never a local address. Binding it needs allowRemote (not loopback).
  const elsewhere = createMetricsServer({ listen: '192.0.2.1:0', allowRemote: true }, { logger, source: stubSource(families) })
  await t.rejects(elsewhere.start(), { code: 'ERR_CONFIG_INVALID', message: /no local interface has that address/ })
  // Config load refuses this already; the server checks the address it actually bound as well.
  const source = stubSource(families)
  const wildcard = createMetricsServer({ listen: '0.0.0.0:0', allowRemote: false }, { logger, source })
  await t.rejects(wildcard.start(), { code: 'ERR_CONFIG_INVALID', message: /bound 0\.0\.0\.0, which is not loopback/ })
  t.equal(source.started, 0)
  t.equal(wildcard.address(), '')
})
