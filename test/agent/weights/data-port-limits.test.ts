// The data port's connection limits over real sockets on loopback: a keyless flood, per-address and total
// caps on connections still in their handshake, the partial-frame timeout, idle connections, the cap on
// authenticated connections, and the config options that set them. Flood sockets bind other loopback
// addresses (127.0.0.2, …) as their local end, so the server sees several remote addresses.
import t from 'tap'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { createDataAuth } from '../../../agent/weights/data-auth.ts'
import {
  decodeHello, decodeReplyHeader, encodeAuth, encodeManifestRequest, encodeRequestHeader, helloBytes, Op, proofBytes, replyHeaderBytes, Status,
} from '../../../agent/weights/protocol.ts'
import { createTcpConnector } from '../../../agent/weights/tcp-client.ts'
import { logger, sharedKey, tensor, weightsNode, writeSafetensors, type NodeFixture } from './weights-fixtures.ts'
import type { Test } from 'tap'

async function publish (node: NodeFixture, model: string, seed: number): Promise<void> {
  const file = join(node.dir, `${model}.safetensors`)
  writeSafetensors(file, [tensor('a.weight', 'f32', [256, 512], seed), tensor('b.weight', 'bf16', [512, 300], seed + 1)])
  await node.weights.publish({ model, version: 1, source: { kind: 'safetensors', path: file } })
}

interface Idle {
  from: string
  /** When the connection was established (performance.now(), ms). */
  openedAt: number
  /** Resolves with when the server closed it (performance.now(), ms). */
  closed: Promise<number>
  closedAt?: number
  socket: Socket
}

/** Opens `perSource` connections from each local address in `sources` that never send a byte; resolves once all are established. */
async function openIdle (t: Test, address: string, sources: string[], perSource: number): Promise<Idle[]> {
  const [host, port] = address.split(':') as [string, string]
  const opening: Array<Promise<Idle>> = []
  for (const from of sources) {
    for (let i = 0; i < perSource; i++) {
      opening.push(new Promise((resolve, reject) => {
        const socket = connect({ host, port: Number(port), localAddress: from })
        const closed = Promise.withResolvers<number>()
        const idle: Idle = { from, openedAt: 0, closed: closed.promise, socket }
        socket.on('error', () => {})
        socket.on('close', () => { idle.closedAt = performance.now(); closed.resolve(idle.closedAt); reject(new Error(`connection from ${from} failed`)) })
        socket.once('connect', () => { idle.openedAt = performance.now(); resolve(idle) })
        socket.resume()
        t.teardown(() => socket.destroy())
      }))
    }
  }
  return await Promise.all(opening)
}

const openCount = (idle: Idle[]): number => idle.filter(c => c.closedAt === undefined).length

/** Waits until `done()` holds, at most `ms`. */
async function until (done: () => boolean, ms: number): Promise<void> {
  const end = performance.now() + ms
  while (!done() && performance.now() < end) await sleep(10)
}

/**
 * A raw client that completes the handshake with the cluster key and then sends whatever a test
 * writes. `closed` resolves (performance.now(), ms) when the server closes it.
 */
async function authenticated (t: Test, address: string, key: Uint8Array): Promise<{ socket: Socket, closed: Promise<number>, replies: () => Buffer }> {
  const auth = createDataAuth(key)
  const [host, port] = address.split(':') as [string, string]
  const socket = connect({ host, port: Number(port) })
  t.teardown(() => socket.destroy())
  socket.on('error', () => {})
  const closed = Promise.withResolvers<number>()
  socket.on('close', () => closed.resolve(performance.now()))
  let received = Buffer.alloc(0)
  const ready = Promise.withResolvers<void>()
  const clientNonce = auth.newNonce()
  let sentAuth = false
  socket.on('data', (chunk: Buffer) => {
    received = Buffer.concat([received, chunk])
    if (!sentAuth && received.length >= helloBytes) {
      sentAuth = true
      const { nonce } = decodeHello(received.subarray(0, helloBytes))
      socket.write(encodeAuth(clientNonce, auth.clientProof(nonce, clientNonce)))
    }
    if (received.length >= helloBytes + replyHeaderBytes + proofBytes) ready.resolve()
  })
  void closed.promise.then(() => ready.reject(new Error('closed during the handshake')))
  await ready.promise
  const reply = decodeReplyHeader(received.subarray(helloBytes, helloBytes + replyHeaderBytes))
  if (reply.status !== Status.ok) throw new Error(`handshake refused: status ${reply.status}`)
  const handshakeBytes = helloBytes + replyHeaderBytes + proofBytes
  return { socket, closed: closed.promise, replies: () => received.subarray(handshakeBytes) }
}

/** A MANIFEST request frame (header + body) for model `m`, latest version. */
function manifestFrame (requestId: number): Buffer {
  const body = encodeManifestRequest('m', -1)
  return Buffer.concat([encodeRequestHeader(Op.manifest, requestId, body.length), body])
}

/** Resolves with the close time, or with undefined when the connection is still open after `ms`. */
const closedWithin = async (closed: Promise<number>, ms: number): Promise<number | undefined> =>
  await Promise.race([closed, sleep(ms).then(() => undefined)])

/**
 * A keyless flood of `perSource` idle connections from each of `sources`, opened before 15 pulls (3
 * pullers × 5 models, 2 streams each) start; `reopen`: every flood connection the server closes is
 * opened again at once while the pulls run. All 15 pulls must succeed, and once the flood stops
 * re-opening, every flood connection must be closed by the server within 2 s of its opening.
 */
async function floodDuringPulls (t: Test, sources: string[], perSource: number, reopen: boolean): Promise<void> {
  const key = sharedKey()
  const a = await weightsNode(t, key) // the default limits
  const pullers = [await weightsNode(t, key), await weightsNode(t, key), await weightsNode(t, key)]
  const models = ['m0', 'm1', 'm2', 'm3', 'm4']
  for (const [i, model] of models.entries()) await publish(a, model, 10 * i + 1)
  const address = a.weights.address()
  const flood = await openIdle(t, address, sources, perSource)
  let sustaining = reopen
  let reopened = 0
  const again = (c: Idle): void => {
    void c.closed.then(async () => {
      if (!sustaining) return
      const [next] = await openIdle(t, address, [c.from], 1).catch(() => [])
      if (next === undefined) return
      reopened++
      flood.push(next)
      again(next)
    })
  }
  if (reopen) for (const c of [...flood]) again(c)
  const began = performance.now()
  const pulls = await Promise.allSettled(pullers.flatMap(p => models.map(model => p.weights.pull({ from: address, model, version: 1, streams: 2 }))))
  const pullsMs = performance.now() - began
  sustaining = false
  await until(() => openCount(flood) === 0, 8000)
  const heldMs = flood.map(c => (c.closedAt ?? performance.now()) - c.openedAt).sort((x, y) => x - y)
  const ok = pulls.filter(p => p.status === 'fulfilled').length
  const firstError = pulls.find((p): p is PromiseRejectedResult => p.status === 'rejected')?.reason as Error | undefined
  t.comment(`flood: ${perSource * sources.length} keyless connections from ${sources.length} address(es)${reopen ? `, re-opened ${reopened} times while the pulls ran` : ''}; pulls: ${ok}/${pulls.length} succeeded in ${pullsMs.toFixed(0)} ms${firstError !== undefined ? ` (first error: ${firstError.message})` : ''}; flood connections held open at most ${heldMs.at(-1)!.toFixed(0)} ms, median ${heldMs[heldMs.length >> 1]!.toFixed(0)} ms`)
  t.equal(ok, 15, 'every legitimate pull succeeded')
  t.equal(openCount(flood), 0, 'every flood connection was closed by the server')
  t.ok(heldMs.at(-1)! < 2000, 'no flood connection stayed open 2 s')
}

const floodSources = Array.from({ length: 10 }, (_, i) => `127.0.0.${i + 2}`)

t.test('a keyless flood of 300 idle connections from 10 addresses: 15 concurrent pulls all succeed and the flood is closed within 2 s', async t => {
  await floodDuringPulls(t, floodSources, 30, false)
})

t.test('a keyless flood of 300 idle connections from the pullers\' own address: 15 concurrent pulls all succeed and the flood is closed within 2 s', async t => {
  await floodDuringPulls(t, ['127.0.0.1'], 300, false)
})

t.test('a keyless flood from 10 addresses that re-opens every connection the server closes: 15 concurrent pulls all succeed', async t => {
  await floodDuringPulls(t, floodSources, 30, true)
})

t.test('connections in their handshake are capped per address (its oldest evicted) and in all (the busiest address loses); a prompt client still authenticates', async t => {
  const key = sharedKey()
  // A long handshake timeout: only the caps close connections here.
  const a = await weightsNode(t, key, { authTimeoutMs: 30_000, maxPendingConnections: 32, maxPendingPerAddress: 8 })
  await publish(a, 'm', 1)
  const address = a.weights.address()
  const quiet = await openIdle(t, address, ['127.0.0.3'], 4)
  const noisy = await openIdle(t, address, ['127.0.0.2'], 20)
  await until(() => openCount(noisy) <= 8, 2000)
  await sleep(100)
  t.equal(openCount(noisy), 8, '20 from one address: 8 stay pending')
  t.ok(noisy.slice(0, 12).every(c => c.closedAt !== undefined), 'the oldest 12 were evicted')
  t.equal(openCount(quiet), 4, 'another address keeps its connections')

  // 4 more addresses × 8: 52 wanted, 32 allowed; the quiet address is never the busiest.
  const more = await openIdle(t, address, ['127.0.0.4', '127.0.0.5', '127.0.0.6', '127.0.0.7'], 8)
  const all = [...quiet, ...noisy, ...more]
  await until(() => openCount(all) <= 32, 2000)
  await sleep(100)
  t.equal(openCount(all), 32, 'at most 32 connections pending in all')
  t.equal(openCount(quiet), 4, 'the address with the fewest pending connections keeps them')
  for (const from of ['127.0.0.2', '127.0.0.4', '127.0.0.5', '127.0.0.6', '127.0.0.7']) t.ok(openCount(all.filter(c => c.from === from)) <= 8, `${from}: at most 8 pending`)

  const stream = await createTcpConnector(createDataAuth(key)).open(address)
  t.teardown(() => stream.close())
  t.equal((await stream.manifest('m', -1)).version, 1, 'a client that authenticates promptly is served while the pending caps are full')
})

t.test('an agent opening more connections at once than maxPendingPerAddress: the evicted ones are retried by the connector and all open', async t => {
  const key = sharedKey()
  // In one process the handshakes of a burst interleave with its accepts; a cap of 2 makes 40 at once overflow it.
  const a = await weightsNode(t, key, { maxPendingPerAddress: 2 })
  await publish(a, 'm', 1)
  const connector = createTcpConnector(createDataAuth(key))
  const began = performance.now()
  const streams = await Promise.all(Array.from({ length: 40 }, async () => await connector.open(a.weights.address())))
  t.teardown(() => { for (const s of streams) s.close() })
  t.comment(`40 connections from one address opened in ${(performance.now() - began).toFixed(0)} ms`)
  const manifests = await Promise.all(streams.map(async s => await s.manifest('m', 1)))
  t.ok(manifests.every(m => m.version === 1), 'all 40 serve')
})

t.test('an authenticated client that sends part of a request frame is disconnected after frameTimeoutMs, even if bytes keep trickling in', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key, { authTimeoutMs: 200, frameTimeoutMs: 300 })
  await publish(a, 'm', 1)
  const address = a.weights.address()
  const frame = manifestFrame(1)

  const half = await authenticated(t, address, key)
  await sleep(300) // past the handshake timeout: an authenticated connection is not subject to it
  const sent = performance.now()
  half.socket.write(frame.subarray(0, 10)) // half a header
  const closedAt = await closedWithin(half.closed, 3000)
  t.ok(closedAt !== undefined, 'half a header: disconnected')
  if (closedAt !== undefined) t.ok(closedAt - sent >= 280 && closedAt - sent < 1300, `after ${(closedAt - sent).toFixed(0)} ms (frameTimeoutMs 300)`)

  const body = await authenticated(t, address, key)
  body.socket.write(frame.subarray(0, frame.length - 3)) // the header and most of the body
  t.ok(await closedWithin(body.closed, 3000) !== undefined, 'a complete header and part of its body: disconnected')

  const trickle = await authenticated(t, address, key)
  const began = performance.now()
  let at = 0
  const timer = setInterval(() => { if (at < frame.length - 1) trickle.socket.write(frame.subarray(at, ++at)) }, 50)
  t.teardown(() => clearInterval(timer))
  const trickleClosed = await closedWithin(trickle.closed, 3000)
  clearInterval(timer)
  t.ok(trickleClosed !== undefined && trickleClosed - began < 1300, 'one byte every 50 ms does not extend the deadline: the frame must be complete 300 ms after its first byte')

  const whole = await authenticated(t, address, key)
  whole.socket.write(frame.subarray(0, 10))
  await sleep(100)
  whole.socket.write(frame.subarray(10))
  await until(() => whole.replies().length >= replyHeaderBytes, 2000)
  t.equal(decodeReplyHeader(whole.replies().subarray(0, replyHeaderBytes)).status, Status.ok, 'a frame completed within the timeout is answered')
  t.equal(await closedWithin(whole.closed, 600), undefined, 'and the connection stays open')
})

t.test('an authenticated connection idle between requests is kept and serves a later request', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key, { authTimeoutMs: 200, frameTimeoutMs: 200 })
  await publish(a, 'm', 1)
  const stream = await createTcpConnector(createDataAuth(key)).open(a.weights.address())
  t.teardown(() => stream.close())
  t.equal((await stream.manifest('m', -1)).version, 1)
  await sleep(1200)
  t.equal(stream.closed, false, 'still open after 1.2 s idle (handshake and frame timeouts 200 ms)')
  t.equal((await stream.manifest('m', 1)).version, 1, 'serves the next request')
})

t.test('idleTimeoutMs closes an authenticated connection with nothing in progress, and frees its slot', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key, { idleTimeoutMs: 300, maxConnections: 1, frameTimeoutMs: 200 })
  await publish(a, 'm', 1)
  const connector = createTcpConnector(createDataAuth(key), { connectTimeoutMs: 1000 })
  const stream = await connector.open(a.weights.address())
  t.teardown(() => stream.close())
  t.equal((await stream.manifest('m', -1)).version, 1)
  await until(() => stream.closed, 3000)
  t.equal(stream.closed, true, 'closed after being idle')
  const next = await connector.open(a.weights.address())
  t.teardown(() => next.close())
  t.equal((await next.manifest('m', 1)).version, 1, 'the only authenticated slot is free again')
  // A connection the server closes for a partial frame frees its slot too.
  const half = await authenticated(t, a.weights.address(), key).catch(() => undefined)
  t.equal(half, undefined, 'a second connection is refused while the slot is taken')
  next.close()
  await until(() => next.closed, 1000)
  await sleep(50)
  const partial = await authenticated(t, a.weights.address(), key)
  partial.socket.write(manifestFrame(1).subarray(0, 5))
  t.ok(await closedWithin(partial.closed, 2000) !== undefined, 'closed for its partial frame')
  const last = await connector.open(a.weights.address())
  t.teardown(() => last.close())
  t.equal((await last.manifest('m', 1)).version, 1, 'and the slot is free again')
})

t.test('a connection refused for a wrong key that never closes its side is closed after authTimeoutMs', async t => {
  const a = await weightsNode(t, sharedKey(), { authTimeoutMs: 300 })
  const [host, port] = a.weights.address().split(':') as [string, string]
  const socket = connect({ host, port: Number(port), allowHalfOpen: true })
  t.teardown(() => socket.destroy())
  const closed = Promise.withResolvers<void>()
  socket.on('error', () => {})
  socket.on('close', () => closed.resolve())
  const ended = Promise.withResolvers<void>()
  socket.on('end', () => ended.resolve())
  socket.once('data', () => socket.write(Buffer.concat([Buffer.from('AGWA'), Buffer.alloc(64, 1)]))) // a well-formed AUTH with a wrong proof
  socket.resume()
  await ended.promise // status 5 and the server's FIN; this side stays open
  await sleep(500)
  // Bytes to a connection the server has let go of are answered with a reset: the next write fails.
  socket.write(Buffer.alloc(16))
  await sleep(100)
  socket.write(Buffer.alloc(16))
  t.equal(await Promise.race([closed.promise.then(() => 'closed'), sleep(2000).then(() => 'open')]), 'closed', 'the server let go of it')
})

t.test('maxConnections counts authenticated connections only; one past it is closed and the connector gives up after its timeout', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key, { maxConnections: 2, authTimeoutMs: 30_000 })
  await publish(a, 'm', 1)
  const address = a.weights.address()
  const pendingOnes = await openIdle(t, address, ['127.0.0.2', '127.0.0.3'], 4)
  const connector = createTcpConnector(createDataAuth(key), { connectTimeoutMs: 500 })
  const first = await connector.open(address)
  const second = await connector.open(address)
  t.teardown(() => { first.close(); second.close() })
  t.equal(openCount(pendingOnes), 8, 'pending connections did not take authenticated slots')
  await t.rejects(connector.open(address), { code: 'ERR_WEIGHTS_TRANSFER' }, 'a third authenticated connection is refused')
  t.equal((await second.manifest('m', 1)).version, 1, 'the two admitted connections still serve')
  first.close()
  await until(() => first.closed, 1000)
  await sleep(50)
  const third = await connector.open(address)
  t.teardown(() => third.close())
  t.equal((await third.manifest('m', 1)).version, 1, 'a slot freed by a closed connection is taken again')
})

t.test('pending connections are counted per IPv4 address and per IPv6 /64', async t => {
  const { pendingAddressKey } = await import('../../../agent/weights/tcp-server.ts')
  t.equal(pendingAddressKey('10.1.2.3'), '10.1.2.3')
  t.equal(pendingAddressKey('::ffff:10.1.2.3'), '10.1.2.3')
  t.equal(pendingAddressKey('2001:db8:1:2:aaaa::1'), '2001:db8:1:2::/64')
  t.equal(pendingAddressKey('2001:db8:1:2:ffff:1:2:3'), '2001:db8:1:2::/64')
  t.equal(pendingAddressKey('2001:db8::1'), '2001:db8:0:0::/64')
  t.equal(pendingAddressKey('fe80::1%eth0'), 'fe80:0:0:0::/64')
  t.equal(pendingAddressKey('::1'), '0:0:0:0::/64')
})

t.test('the limits are config options with bounds; per-address above the total is refused', async t => {
  const { loadConfig } = await import('../../../agent/config/load.ts')
  const { createTcpWeightServer } = await import('../../../agent/weights/tcp-server.ts')
  const { defaultWeightsConfig } = await import('../../../agent/weights/weights-config.ts')
  const base = { hostname: 'n', readDefaultFile: false, flags: [] }
  const w = loadConfig({ ...base, env: {} }).config.weights
  t.match(w, { authTimeoutMs: 1000, maxPendingConnections: 32, maxPendingPerAddress: 8, maxConnections: 256, frameTimeoutMs: 5000, idleTimeoutMs: 300_000 }, 'defaults')
  t.equal(loadConfig({ ...base, env: { AGENTD_WEIGHTS_FRAME_TIMEOUT_MS: '750' } }).config.weights.frameTimeoutMs, 750)
  for (const [name, value] of [['AGENTD_WEIGHTS_MAX_PENDING_CONNECTIONS', '0'], ['AGENTD_WEIGHTS_FRAME_TIMEOUT_MS', '10'], ['AGENTD_WEIGHTS_AUTH_TIMEOUT_MS', '600000'], ['AGENTD_WEIGHTS_MAX_CONNECTIONS', '1000000'], ['AGENTD_WEIGHTS_IDLE_TIMEOUT_MS', '-1']] as const) {
    t.throws(() => loadConfig({ ...base, env: { [name]: value } }), { code: 'ERR_CONFIG_INVALID' }, `${name}=${value} is out of bounds`)
  }
  t.throws(() => loadConfig({ ...base, env: { AGENTD_WEIGHTS_MAX_PENDING_PER_ADDRESS: '64' } }), { code: 'ERR_CONFIG_INVALID', message: /maxPendingPerAddress/ })
  const components = { stateManager: undefined as never, versions: undefined as never, auth: createDataAuth(sharedKey()), logger }
  t.throws(() => createTcpWeightServer({ listen: '127.0.0.1:0', frameTimeoutMs: 0 }, components), { code: 'ERR_ARG_INVALID', message: /frameTimeoutMs/ })
  t.throws(() => createTcpWeightServer({ listen: '127.0.0.1:0', maxPendingPerAddress: defaultWeightsConfig.maxPendingConnections + 1 }, components), { code: 'ERR_ARG_INVALID' })
})
