// api.maxConnections and api.requestTimeoutMs against the API listening on a
// real unix socket: connections over the cap are closed at once (one warning),
// a request not received in time is answered and closed, and what takes long
// on the response side (event streams, long polls) is not cut by the timeout.
import t from 'tap'
import { connect, createServer, type Socket } from 'node:net'
import { request, type IncomingMessage } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { pino } from 'pino'
import { capConnections } from '../../../agent/api/connection-limits.ts'
import { tempDir } from '../../helpers/agent-process.ts'
import { join } from 'node:path'
import { bodyOf, listenApi, rawExchange, until, type LogLine } from './listening-api.ts'

interface IdleConnection { socket: Socket, closed: boolean }

async function openIdle (socketPath: string): Promise<IdleConnection> {
  const socket = connect(socketPath)
  const idle: IdleConnection = { socket, closed: false }
  socket.on('error', () => {})
  socket.once('close', () => { idle.closed = true })
  await new Promise<void>((resolve, reject) => { socket.once('connect', resolve); socket.once('error', reject) })
  return idle
}

const warnings = (logs: LogLine[]): LogLine[] => logs.filter(l => l.level === 40)

t.test('connections over api.maxConnections are closed at once with one warning; a fresh one works once some close', async t => {
  const { server, socketPath, client, logs } = await listenApi(t, { maxConnections: 8, requestTimeoutMs: 60_000 })
  const idle: IdleConnection[] = []
  t.teardown(() => { for (const c of idle) c.socket.destroy() })
  for (let i = 0; i < 13; i++) idle.push(await openIdle(socketPath))
  await until(() => idle.filter(c => c.closed).length >= 5)
  await sleep(200) // nothing else closes
  t.same(idle.map(c => c.closed), [...Array<boolean>(8).fill(false), ...Array<boolean>(5).fill(true)], 'the 8 first stay open, the 5 over the cap are closed')

  await t.rejects(client.health(), { code: 'ERR_CONNECTION_LOST' }, 'a request on a new connection is refused while the cap is reached')
  t.equal(warnings(logs).length, 1, 'one warning for the burst of 6 refusals')
  t.match(warnings(logs)[0], { maxConnections: 8, refused: 1, msg: /api\.maxConnections/ })

  for (const c of idle.slice(0, 3)) c.socket.destroy()
  await until(async () => await new Promise<number>(resolve => server.app.server.getConnections((_, n) => resolve(n))) <= 5)
  t.same(await client.health(), { ok: true }, 'served again once connections closed')
})

t.test('refused connections: one warning at once, then at most one per interval with the count, none when quiet', async t => {
  const logs: LogLine[] = []
  const logger = pino({ level: 'info' }, { write: (line: string) => { logs.push(JSON.parse(line) as LogLine) } })
  const server = createServer(socket => { socket.on('error', () => {}) })
  capConnections(server, { maxConnections: 2, warningIntervalMs: 150 }, logger)
  const path = join(tempDir(t), 'cap.sock')
  await new Promise<void>(resolve => server.listen(path, resolve))
  const idle: IdleConnection[] = []
  t.teardown(() => { for (const c of idle) c.socket.destroy(); server.close() })
  for (let i = 0; i < 7; i++) idle.push(await openIdle(path))
  await until(() => idle.filter(c => c.closed).length >= 5)
  t.equal(logs.length, 1, 'the first refusal is logged at once')
  t.match(logs[0], { level: 40, maxConnections: 2, refused: 1 })
  await until(() => logs.length >= 2, 2000)
  t.match(logs[1], { level: 40, maxConnections: 2, refused: 4 }, 'the next warning counts the refusals held back')
  await sleep(400)
  t.equal(logs.length, 2, 'no warning for an interval without refusals')
})

t.test('a request not received in full within requestTimeoutMs is answered ERR_BAD_REQUEST and its connection closed', async t => {
  const { socketPath } = await listenApi(t, { requestTimeoutMs: 300 })
  const head = 'POST /v1/state/drop HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n'

  const halfBody = await rawExchange(socketPath, [head + '{"prefix":'])
  t.ok(halfBody.closed, 'a half-sent body: connection closed')
  t.ok(halfBody.elapsedMs >= 280 && halfBody.elapsedMs < 1500, `after the timeout (${Math.round(halfBody.elapsedMs)} ms)`)
  t.match(halfBody.text, /^HTTP\/1\.1 400 /)
  t.match(bodyOf(halfBody.text), { error: { code: 'ERR_BAD_REQUEST', message: /within 300 ms \(api\.requestTimeoutMs\)/ } })

  const halfHeaders = await rawExchange(socketPath, ['POST /v1/state/drop HTTP/1.1\r\nHost: agent\r\n'])
  t.ok(halfHeaders.closed && halfHeaders.elapsedMs < 1500, `half-sent headers: closed after ${Math.round(halfHeaders.elapsedMs)} ms`)
  const silent = await rawExchange(socketPath, [])
  t.ok(silent.closed && silent.elapsedMs < 1500, `a connection that sends nothing: closed after ${Math.round(silent.elapsedMs)} ms`)

  // Sent slowly but in full within the timeout: served (state is absent here, so 503 after the body is read).
  const pieces = ['{"pre', 'fix":', '"a/"}']
  const steady = await rawExchange(socketPath, [head.replace('100', String(pieces.join('').length)), ...pieces], { gapMs: 50, maxWaitMs: 400 })
  t.match(steady.text, /^HTTP\/1\.1 503 /, 'a body sent in pieces inside the timeout is served')
  t.match(bodyOf(steady.text), { error: { code: 'ERR_UNAVAILABLE' } })
})

/** GET with a streamed answer: resolves with the response once the status line and headers arrived. */
function openStream (socketPath: string, path: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path, agent: false, headers: { accept: 'text/event-stream' } }, resolve)
    req.on('error', reject)
    req.end()
  })
}

/** A JSON call on its own connection (no keep-alive pool), with the time it took. */
async function timedCall (socketPath: string, method: string, path: string, body?: unknown): Promise<{ status: number, body: unknown, elapsedMs: number }> {
  const began = performance.now()
  const payload = body === undefined ? undefined : JSON.stringify(body)
  return await new Promise((resolve, reject) => {
    const req = request({ socketPath, method, path, agent: false, headers: payload === undefined ? {} : { 'content-type': 'application/json' } }, res => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { text += c })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text), elapsedMs: performance.now() - began }))
    })
    req.on('error', reject)
    req.end(payload)
  })
}

t.test('the timeout bounds reception only: an event stream and long polls outlive it', async t => {
  const requestTimeoutMs = 300
  let send: ((type: string, data: unknown) => void) | undefined
  let detached = false
  const seen: unknown[] = []
  const workers = {
    registry: {
      attach: (_id: string, emit: (type: string, data: unknown) => void) => { send = emit; return () => { detached = true } },
    },
  }
  const reward = {
    result: async (id: string, waitMs: number) => { seen.push({ id, waitMs }); await sleep(waitMs); return { state: 'pending' } },
    fetchWork: async (body: { waitMs: number }) => { seen.push(body); await sleep(body.waitMs); return { lease: null } },
  }
  const jobs = {
    runOp: async (job: string, body: { name: string }) => {
      await sleep(1000)
      return { job, opId: 'op-1', name: body.name, ranks: [], switched: false, offloadMs: 0, onloadMs: 0, switchMs: 0, runMs: 1000, queuedMs: 0, totalMs: 1000 }
    },
  }
  const { socketPath } = await listenApi(t, { requestTimeoutMs }, { workers: { workers: () => workers as never }, reward: { reward: () => reward as never }, jobs: { jobs: () => jobs as never } })

  const stream = await openStream(socketPath, '/v1/workers/w-00000000-0000-0000-0000-000000000000/events')
  t.equal(stream.statusCode, 200)
  let text = ''
  stream.setEncoding('utf8')
  stream.on('data', (c: string) => { text += c })
  await sleep(4 * requestTimeoutMs)
  t.ok(send !== undefined && !stream.destroyed && !detached, 'the event stream is still open after 4× the request timeout')
  send!('run', { step: 1 })
  await until(() => text.includes('event: run'), 2000)
  t.match(text, /event: run\ndata: \{"step":1\}/, 'and still delivers events')
  stream.destroy()

  const [poll, fetch, op] = await Promise.all([
    timedCall(socketPath, 'GET', '/v1/reward/requests/r-1?waitMs=1200'),
    timedCall(socketPath, 'POST', '/v1/reward/work/fetch', { workerId: 'w1', waitMs: 1200 }),
    timedCall(socketPath, 'POST', '/v1/jobs/j1/ops', { name: 'step' }),
  ])
  t.match(poll, { status: 200, body: { state: 'pending' } }, `GET long poll answered after ${Math.round(poll.elapsedMs)} ms`)
  t.match(fetch, { status: 200, body: { lease: null } }, `POST long poll answered after ${Math.round(fetch.elapsedMs)} ms`)
  t.match(op, { status: 200, body: { job: 'j1', name: 'step' } }, `jobs op answered after ${Math.round(op.elapsedMs)} ms`)
  t.ok(Math.min(poll.elapsedMs, fetch.elapsedMs, op.elapsedMs) >= 3 * requestTimeoutMs, 'each well past the request timeout')
  t.same(seen, [{ id: 'r-1', waitMs: 1200 }, { workerId: 'w1', waitMs: 1200 }], 'the query\'s waitMs arrives as a number')
})
