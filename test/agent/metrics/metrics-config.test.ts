// Config section `metrics`: off by default, loopback unless allowRemote, refused at load with the reason.
import t from 'tap'
import { isLoopbackHost, metricsConfigProblems, splitHostPort } from '../../../agent/metrics/metrics-config.ts'
import { loadConfig, setFlagAssignment } from '../../../agent/config/load.ts'

const load = (flags: string[], env: NodeJS.ProcessEnv = {}) => loadConfig({ hostname: 'n1', devStateDir: '/tmp/agentd-x', readDefaultFile: false, env, flags: flags.map(setFlagAssignment) })

t.test('loopback addresses', async t => {
  for (const host of ['127.0.0.1', '127.1.2.3', '::1', '0:0:0:0:0:0:0:1', '::ffff:127.0.0.1', 'localhost']) t.ok(isLoopbackHost(host), host)
  for (const host of ['0.0.0.0', '::', '10.0.0.5', '192.168.1.1', '::2', 'fe80::1', 'metrics.example', '128.0.0.1']) t.notOk(isLoopbackHost(host), host)
  t.same(splitHostPort('[::1]:9464'), { host: '::1', port: 9464 })
  t.same(splitHostPort('127.0.0.1:0'), { host: '127.0.0.1', port: 0 })
})

t.test('off by default; loopback accepted; anything else only with allowRemote', async t => {
  t.same(load([]).config.metrics, { listen: '', allowRemote: false }, 'off unless configured')
  for (const listen of ['127.0.0.1:9464', '[::1]:9464', 'localhost:9464', '127.0.0.1:0']) {
    t.same(metricsConfigProblems({ listen, allowRemote: false }), [], listen)
  }
  for (const listen of ['0.0.0.0:9464', '[::]:9464', '10.0.0.5:9464', 'metrics.example:9464']) {
    const problems = metricsConfigProblems({ listen, allowRemote: false })
    t.equal(problems.length, 1, listen)
    t.match(problems[0], /is not a loopback address: the metrics endpoint has no authentication .* set metrics\.allowRemote = true/, listen)
    t.same(metricsConfigProblems({ listen, allowRemote: true }), [], `${listen} with allowRemote`)
  }
  t.match(metricsConfigProblems({ listen: '127.0.0.1:70000', allowRemote: false }), [/port 70000 is over 65535/])
})

t.test('loadConfig refuses a non-loopback address with the reason; flags and env reach the keys', async t => {
  t.throws(() => load(['metrics.listen=0.0.0.0:9464']), { code: 'ERR_CONFIG_INVALID', message: /metrics\.listen "0\.0\.0\.0:9464" is not a loopback address.*metrics\.allowRemote = true/ })
  t.same(load(['metrics.listen=0.0.0.0:9464', 'metrics.allowRemote=true']).config.metrics, { listen: '0.0.0.0:9464', allowRemote: true })
  t.equal(load([], { AGENTD_METRICS_LISTEN: '127.0.0.1:9464' }).config.metrics.listen, '127.0.0.1:9464', 'env AGENTD_METRICS_LISTEN')
  t.throws(() => load(['metrics.listen=9464']), { code: 'ERR_CONFIG_INVALID', message: /metrics\.listen/ }, 'a port alone is not host:port')
  t.throws(() => load(['metrics.listen=127.0.0.1:9464/metrics']), { code: 'ERR_CONFIG_INVALID' })
})
