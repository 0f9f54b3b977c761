// Request bodies over a route's limit: a coded 413 that reaches every client, and the state batch
// routes' limits, derived from their schemas (core/schema-body-limit.ts).
import t from 'tap'
import { request } from 'node:http'
import { connect } from 'node:net'
import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import { bodyOf, listenApi, rawExchange } from './listening-api.ts'

const MiB = 2 ** 20
const head = (path: string, headers: string): string => `POST ${path} HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n${headers}\r\n`

/** POSTs `payload` as it is (no client of ours re-encoding it): status and parsed answer. */
function post (socketPath: string, path: string, payload: string): Promise<{ status: number, body: unknown }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method: 'POST', path, agent: false, headers: { 'content-type': 'application/json' } }, res => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { text += c })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }))
    })
    req.on('error', reject)
    req.end(payload)
  })
}

t.test('a body over api.bodyLimitBytes gets a coded 413 every client receives, also one that sends its whole body first', async t => {
  const { socketPath, client } = await listenApi(t, {})
  const message = /^request body larger than the 1048576 bytes POST \/v1\/leader\/decisions accepts \(api\.bodyLimitBytes\)$/
  for (const bytes of [2 * MiB, 64 * MiB]) {
    await t.rejects(client.call('POST', '/v1/leader/decisions', { kind: 'x', payload: 'a'.repeat(bytes) }), { code: 'ERR_BODY_TOO_LARGE', message },
      `a ${bytes / MiB} MiB body: the client gets the agent's code and message, not a broken connection`)
  }

  // A body declared too large: the agent reads it to its end before it answers and closes, so a
  // client that reads only once it has sent everything (Python's http.client) gets the answer, not EPIPE.
  const socket = connect(socketPath)
  await once(socket, 'connect')
  const errors: string[] = []
  socket.on('error', (err: NodeJS.ErrnoException) => { errors.push(err.code ?? err.message) })
  let text = ''
  socket.setEncoding('utf8')
  socket.on('data', (c: string) => { text += c })
  const closed = once(socket, 'close')
  socket.write(head('/v1/leader/decisions', `Content-Length: ${8 * MiB}\r\n`) + 'a'.repeat(MiB))
  await sleep(300)
  t.same([text, socket.readableEnded], ['', false], 'no answer and no close while the body is still coming')
  socket.end('a'.repeat(7 * MiB))
  await closed
  t.match(text, /^HTTP\/1\.1 413 /, 'the 413 once the whole body was read')
  t.match(bodyOf(text), { error: { code: 'ERR_BODY_TOO_LARGE', message } })
  t.same(errors, [], 'every byte was taken: no broken pipe, no reset')
  const chunk = 'a'.repeat(MiB)
  const chunked = await rawExchange(socketPath, [head('/v1/leader/decisions', 'Transfer-Encoding: chunked\r\n'), ...Array<string>(4).fill(`${MiB.toString(16)}\r\n${chunk}\r\n`), '0\r\n\r\n'])
  t.match(chunked.text, /^HTTP\/1\.1 413 /, 'a chunked body that grows too large: the same')
  t.equal(chunked.text.match(/HTTP\/1\.1/g)?.length, 1, 'one answer')
  t.same(await client.health(), { ok: true }, 'the agent serves on')
})

t.test('a refused body sent slower than api.requestTimeoutMs gets the timeout\'s answer, and only that', async t => {
  const { socketPath } = await listenApi(t, { requestTimeoutMs: 300 })
  const stalled = await rawExchange(socketPath, [head('/v1/leader/decisions', `Content-Length: ${4 * MiB}\r\n`), 'a'.repeat(1000)])
  t.ok(stalled.closed, 'connection closed')
  t.equal(stalled.text.match(/HTTP\/1\.1/g)?.length, 1, 'one answer')
  t.match(bodyOf(stalled.text), { error: { code: 'ERR_BAD_REQUEST', message: /within 300 ms \(api\.requestTimeoutMs\)/ } })
})

t.test('the state batch routes take their largest schema-valid body, whatever api.bodyLimitBytes says', async t => {
  const { socketPath, client } = await listenApi(t, { bodyLimitBytes: 1024 })
  const item = {
    key: 'k'.repeat(1024),
    source: { kind: 'cuda-ipc', device: Number.MAX_SAFE_INTEGER, handle: 'h'.repeat(128), offset: Number.MAX_SAFE_INTEGER, event: 'e'.repeat(128) },
    verify: false,
  }
  const largest = JSON.stringify({ tensors: Array<typeof item>(65_536).fill(item), durability: 'memory' }, null, 2)
  t.ok(largest.length > 90 * MiB, `the largest offload body is ${(largest.length / MiB).toFixed(1)} MiB`)
  // No StateManager here: a body that passed the limit and the schema is answered ERR_UNAVAILABLE.
  t.match(await post(socketPath, '/v1/state/offload', largest), { status: 503, body: { error: { code: 'ERR_UNAVAILABLE' } } }, 'accepted whole')
  t.match(await post(socketPath, '/v1/state/offload', `${largest} `), {
    status: 413,
    body: { error: { code: 'ERR_BODY_TOO_LARGE', message: `request body larger than the ${largest.length} bytes POST /v1/state/offload accepts (the largest body its schema admits)` } },
  }, 'one byte more is refused')

  const keys = Array.from({ length: 20_000 }, (_, i) => `job/actor/model.layers.${i}.mlp.up_proj.weight:param@[0]/[16]:u8#v1`)
  for (const [route, body] of Object.entries({ onload: { tensors: keys.map(key => ({ key, target: { kind: 'shm', name: 'n', offset: 0 } })) }, drop: { keys }, prefetch: { keys } })) {
    await t.rejects(client.call('POST', `/v1/state/${route}`, body), { code: 'ERR_UNAVAILABLE' }, `${route}: a batch far over api.bodyLimitBytes is accepted`)
  }
  await t.rejects(client.call('POST', '/v1/state/hints', { next: keys.slice(0, 4096).map(prefix => ({ prefix, inMs: 0 })) }), { code: 'ERR_UNAVAILABLE' }, 'hints: the same')
  await t.rejects(client.call('POST', '/v1/state/materialize', { prefix: 'p'.repeat(1024), version: 1, path: `/${'a'.repeat(1024)}.safetensors` }),
    { code: 'ERR_BODY_TOO_LARGE', message: /\(api\.bodyLimitBytes\)$/ }, 'a route that is not a batch keeps api.bodyLimitBytes')
})
