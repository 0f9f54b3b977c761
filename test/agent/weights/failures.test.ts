// Failure cases of the data plane over real TCP: cut connections, corrupted chunks, wrong keys, garbage, retirement mid-pull, publishing while pulling.
import t from 'tap'
import { connect } from 'node:net'
import { join } from 'node:path'
import { keyBytes, MiB, sharedKey, tcpProxy, tensor, weightsNode, writeSafetensors, type FixtureTensor, type NodeFixture } from './weights-fixtures.ts'

async function publishModel (node: NodeFixture, version: number, tensors: FixtureTensor[]): Promise<void> {
  const file = join(node.dir, `v${version}.safetensors`)
  writeSafetensors(file, tensors)
  await node.weights.publish({ model: 'm', version, source: { kind: 'safetensors', path: file } })
}
const model = (seed: number): FixtureTensor[] => [tensor('a.weight', 'f32', [512, 1024], seed), tensor('b.weight', 'bf16', [1024, 700], seed + 1)]
const total = (ts: FixtureTensor[]): number => ts.reduce((s, x) => s + x.data.length, 0)
/** Two nodes sharing a cluster key; `a` serves version 1 of model(seed). */
async function servedModel (t: Parameters<typeof weightsNode>[0], seed: number) {
  const key = sharedKey()
  const a = await weightsNode(t, key)
  const b = await weightsNode(t, key)
  const tensors = model(seed)
  await publishModel(a, 1, tensors)
  return { a, b, tensors }
}

t.test('a connection cut mid-transfer: the pull resumes on a new connection without refetching what landed', async t => {
  const { a, b, tensors } = await servedModel(t, 1)
  let cuts = 0
  const proxy = await tcpProxy(t, a.weights.address(), (chunk, seen, connection) => {
    if (connection === 0 && seen + chunk.length > 1.5 * MiB && cuts === 0) { cuts++; return 'cut' }
    return chunk
  })
  const r = await b.weights.pull({ from: proxy.address, model: 'm', version: 1, streams: 1 })
  t.equal(cuts, 1)
  t.ok(r.reconnects >= 1, 'reconnected')
  t.ok(r.bytesReceived < total(tensors) + 2 * 256 * 1024, `received ${r.bytesReceived} of ${total(tensors)}: at most the pieces in flight were fetched twice`)
  for (let i = 0; i < tensors.length; i++) t.ok((await keyBytes(b.sm, r.keys[i]!)).equals(tensors[i]!.data))
})

t.test('a corrupted chunk is detected by its checksum and refetched', async t => {
  const { a, b, tensors } = await servedModel(t, 3)
  let flipped = false
  const proxy = await tcpProxy(t, a.weights.address(), (chunk, seen) => {
    if (!flipped && seen + chunk.length > MiB && seen < MiB) {
      flipped = true
      const copy = Buffer.from(chunk)
      copy[MiB - seen] = copy[MiB - seen]! ^ 0x40
      return copy
    }
    return chunk
  })
  const r = await b.weights.pull({ from: proxy.address, model: 'm', version: 1, streams: 2 })
  t.ok(flipped)
  t.equal(r.refetchedPieces, 1, 'one piece refetched')
  for (let i = 0; i < tensors.length; i++) t.ok((await keyBytes(b.sm, r.keys[i]!)).equals(tensors[i]!.data), 'bytes correct after the refetch')
})

t.test('a puller with another cluster key is refused and stores nothing', async t => {
  const a = await weightsNode(t, sharedKey())
  const stranger = await weightsNode(t, sharedKey())
  await publishModel(a, 1, model(5))
  await t.rejects(stranger.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 2 }), { code: 'ERR_WEIGHTS_AUTH' })
  t.same(stranger.sm.storedKeys('weights/'), [], 'nothing stored by the refused pull')
  t.same(a.weights.list().pulls, [], 'no pull registered on the server')
})

t.test('garbage on the data port is refused without affecting a concurrent pull', async t => {
  const { a, b, tensors } = await servedModel(t, 7)
  const [host, port] = a.weights.address().split(':') as [string, string]
  const garbage = async (bytes: Buffer): Promise<boolean> => await new Promise(resolve => {
    const s = connect({ host, port: Number(port) }, () => s.write(bytes))
    s.on('error', () => {})
    s.on('close', () => resolve(true))
    s.resume()
  })
  const pulling = b.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 2 })
  const closed = await Promise.all([
    garbage(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(4))),
    garbage(Buffer.alloc(200, 0xff)),
    garbage(Buffer.concat([Buffer.from('AGWA'), Buffer.alloc(64, 1)])), // well-formed AUTH, wrong proof
  ])
  t.same(closed, [true, true, true], 'each garbage connection was closed by the server')
  const r = await pulling
  t.ok((await keyBytes(b.sm, r.keys[0]!)).equals(tensors[0]!.data), 'the concurrent pull completed intact')
  const after = await b.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 1 })
  t.equal(after.version, 1, 'the server still answers')
})

t.test('concurrent pullers of v1 while v2 is published; retention retires v1 only after; a pull of a retired version fails clearly', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key, { retainVersions: 2 }, undefined, 96 * MiB)
  const pullers = [await weightsNode(t, key), await weightsNode(t, key), await weightsNode(t, key)]
  const v1 = model(11)
  const v2 = model(21)
  await publishModel(a, 1, v1)
  const pulls = pullers.map(p => p.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 2 }))
  await publishModel(a, 2, v2)
  const results = await Promise.all(pulls)
  for (const [i, r] of results.entries()) t.ok((await keyBytes(pullers[i]!.sm, r.keys[1]!)).equals(v1[1]!.data), `puller ${i} got v1 intact`)
  const latest = await pullers[0]!.weights.pull({ from: a.weights.address(), model: 'm', version: -1, streams: 2 })
  t.equal(latest.version, 2)
  t.ok((await keyBytes(pullers[0]!.sm, latest.keys[0]!)).equals(v2[0]!.data))
  await publishModel(a, 3, model(31))
  t.same(a.weights.list().versions.map(v => v.version), [2, 3], 'keep-last-2 retired v1')
  await t.rejects(pullers[1]!.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 1 }), { code: 'ERR_WEIGHTS_RETIRED' })
  await t.rejects(a.weights.publish({ model: 'm', version: 2, source: { kind: 'keys', prefix: 'x/' } }), { code: 'ERR_WEIGHTS_VERSION_EXISTS' }, 'versions are monotonic')
})

t.test('the version retired mid-pull: a pull of that version fails, a pull of latest starts over on the new one', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key, { retainVersions: 1 })
  const b = await weightsNode(t, key)
  const c = await weightsNode(t, key)
  await publishModel(a, 1, model(41))
  const v2 = model(51)
  // The first connection is cut after 1 MiB; before the puller reconnects (>= 100 ms backoff) the version is retired.
  let retiring: Promise<unknown> | undefined
  const proxyB = await tcpProxy(t, a.weights.address(), (chunk, seen, connection) => {
    if (connection === 0 && seen + chunk.length > MiB) { retiring ??= a.weights.retire('m', 1); return 'cut' }
    return chunk
  })
  await t.rejects(b.weights.pull({ from: proxyB.address, model: 'm', version: 1, streams: 1 }), { code: 'ERR_WEIGHTS_RETIRED' })
  await retiring
  t.same(b.sm.storedKeys('weights/'), [], 'a failed pull leaves no keys')
  await publishModel(a, 2, model(45))
  let publishing: Promise<unknown> | undefined
  // Cut after 1 MiB; the reconnect reaches the server only once v3 is committed (which retires v2).
  const proxyC = await tcpProxy(t, a.weights.address(), (chunk, seen, connection) => {
    if (connection === 0 && seen + chunk.length > MiB) { publishing ??= publishModel(a, 3, v2); return 'cut' }
    return chunk
  }, connection => connection > 0 ? publishing : undefined)
  const r = await c.weights.pull({ from: proxyC.address, model: 'm', version: -1, streams: 1 })
  await publishing
  t.equal(r.version, 3, 'latest restarted on the version that replaced the retired one')
  t.ok((await keyBytes(c.sm, r.keys[0]!)).equals(v2[0]!.data))
})
