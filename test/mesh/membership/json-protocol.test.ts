// One JSON request, one answer, between real libp2p nodes: a keep-alive protocol sends request after
// request on one stream; an answer from a peer that closes its end after one (an older agent) or
// a kept stream closed under a request is sent again on a fresh stream; one-shot requesters, and a
// handler that fails, behave as before.
import t, { type Test } from 'tap'
import { lpStream } from '@libp2p/utils'
import { generateClusterKey, parseClusterKey } from '../../../mesh/membership/cluster-key.ts'
import { handleJson, requestJson } from '../../../mesh/membership/json-protocol.ts'
import type { MeshLibp2p } from '../../../mesh/membership/libp2p-node.ts'
import { startMeshNode } from '../../helpers/mesh-node.ts'

const kept = { protocol: '/agentd/test-kept/1.0.0', maxMessageBytes: 1024, keepAlive: true }
const oneShot = { protocol: '/agentd/test-once/1.0.0', maxMessageBytes: 1024 }

/** Ids of the streams of `protocol` the handler side has seen, request by request. */
async function echoServer (node: MeshLibp2p, protocol: typeof kept | typeof oneShot, seen: string[]): Promise<void> {
  await handleJson(node, { ...protocol, handlerTimeoutMs: 2000 }, async (from, message) => {
    const stream = node.getConnections().flatMap(c => c.streams).find(s => s.protocol === protocol.protocol && s.direction === 'inbound')
    seen.push(stream?.id ?? '?')
    if ((message as { fail?: boolean }).fail === true) throw new Error('refused by the handler')
    return { echo: message, from }
  })
}

/** Two connected nodes of one cluster. */
async function connectedPair (t: Test): Promise<[MeshLibp2p, MeshLibp2p]> {
  const key = parseClusterKey(generateClusterKey(), 'test key')
  const [a, b] = await Promise.all([startMeshNode(t, key), startMeshNode(t, key)])
  await a.dial(b.getMultiaddrs()[0]!)
  return [a, b]
}

t.test('keep-alive: one stream for many requests; a stream closed under a request is replaced; failures still fail', async t => {
  const [a, b] = await connectedPair(t)
  const seen: string[] = []
  await echoServer(b, kept, seen)
  const peer = b.peerId.toString()
  for (let i = 0; i < 10; i++) t.same(await requestJson(a, peer, kept, { i }, AbortSignal.timeout(5000)), { echo: { i }, from: a.peerId.toString() })
  t.equal(new Set(seen).size, 1, `ten requests, one stream (handler saw ${JSON.stringify([...new Set(seen)])})`)

  // The handler's end goes away between requests: the next request still gets its answer.
  for (const c of b.getConnections(a.peerId)) for (const s of c.streams) if (s.protocol === kept.protocol) s.abort(new Error('closed by the test'))
  t.same(await requestJson(a, peer, kept, { after: 'abort' }, AbortSignal.timeout(5000)), { echo: { after: 'abort' }, from: a.peerId.toString() }, 'answered on a fresh stream')

  // Concurrent requests each get their own stream and answer.
  const many = await Promise.all(Array.from({ length: 5 }, (_, i) => requestJson(a, peer, kept, { n: i }, AbortSignal.timeout(5000))))
  t.same(many.map(r => (r as { echo: { n: number } }).echo.n), [0, 1, 2, 3, 4], 'five at once')

  // A handler that throws aborts the stream: the request fails, and the next one is answered.
  await t.rejects(requestJson(a, peer, kept, { fail: true }, AbortSignal.timeout(5000)), 'a failing handler fails the request')
  t.same(await requestJson(a, peer, kept, { ok: 1 }, AbortSignal.timeout(5000)), { echo: { ok: 1 }, from: a.peerId.toString() }, 'and the next one is answered')
})

t.test('a keep-alive requester and a peer that answers once and closes (an older agent)', async t => {
  const [a, b] = await connectedPair(t)
  let streams = 0
  await b.handle(kept.protocol, async stream => {
    streams++
    const lp = lpStream(stream)
    const request = JSON.parse(new TextDecoder().decode((await lp.read()).subarray())) as unknown
    await lp.write(new TextEncoder().encode(JSON.stringify({ once: request })))
    await stream.close()
  })
  // Back to back (the close may still be on its way when the next request takes the stream) and spaced.
  for (let i = 0; i < 10; i++) {
    t.same(await requestJson(a, b.peerId.toString(), kept, i, AbortSignal.timeout(5000)), { once: i }, `request ${i} answered`)
    if (i >= 5) await new Promise(resolve => setTimeout(resolve, 50))
  }
  t.ok(streams >= 10, `a stream per request at least (${streams})`)
})

t.test('a one-shot requester against a handler that would keep the stream: answered, and the stream closes', async t => {
  const [a, b] = await connectedPair(t)
  const seen: string[] = []
  await echoServer(b, oneShot, seen)
  for (let i = 0; i < 3; i++) t.same(await requestJson(a, b.peerId.toString(), oneShot, { i }, AbortSignal.timeout(5000)), { echo: { i }, from: a.peerId.toString() })
  t.equal(new Set(seen).size, 3, 'a stream per request')
  for (let i = 0; i < 50 && b.getConnections(a.peerId).some(c => c.streams.some(s => s.protocol === oneShot.protocol)); i++) await new Promise(resolve => setTimeout(resolve, 20))
  t.notOk(b.getConnections(a.peerId).some(c => c.streams.some(s => s.protocol === oneShot.protocol)), 'no stream of it left open at the handler')
})
