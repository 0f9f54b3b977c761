// Yamux window updates at half the window (mesh/membership/yamux-window-updates.ts): between two real mesh
// nodes, 2 MB sent as 10,000 small messages on one stream (eight initial receive windows' worth) all arrive,
// and the receiver sends a window update per half window (a handful) instead of one per data frame. The
// sender waits for an acknowledgement every 100 messages, as a protocol would: what is in flight stays far
// below the streams' read buffers whatever the machine's load (unbounded, the receiver's buffer, not yamux,
// decides when the sender stops).
import t from 'tap'
import { lpStream } from '@libp2p/utils'
import { YamuxStream } from '@chainsafe/libp2p-yamux/stream'
import { generateClusterKey, parseClusterKey } from '../../../mesh/membership/cluster-key.ts'
import '../../../mesh/membership/yamux-window-updates.ts'
import { startMeshNode } from '../../helpers/mesh-node.ts'

const protocol = '/agentd/test-window/1.0.0'

t.test('10,000 small messages on one stream: every byte arrives, with a window update per half window, not per frame', async t => {
  const key = parseClusterKey(generateClusterKey(), 'test key')
  const [a, b] = await Promise.all([startMeshNode(t, key), startMeshNode(t, key)])
  await a.dial(b.getMultiaddrs()[0]!)

  // Count the updates that go out: the patched method resets the receive window's capacity when it sends one.
  const proto = YamuxStream.prototype as unknown as { sendWindowUpdate(): void }
  const patched = proto.sendWindowUpdate
  let updates = 0
  let dataFrames = 0
  let window = 0
  proto.sendWindowUpdate = function (this: { recvWindow: number, recvWindowCapacity: number, protocol?: string }) {
    const before = this.recvWindowCapacity
    patched.call(this)
    if (this.protocol !== protocol) return
    dataFrames++
    window = this.recvWindow
    if (this.recvWindowCapacity !== before) updates++
  }
  t.teardown(() => { proto.sendWindowUpdate = patched })

  const messages = 10_000
  const batch = 100
  const size = 200
  const received = Promise.withResolvers<number>()
  await b.handle(protocol, async stream => {
    const lp = lpStream(stream, { maxDataLength: 1024 })
    let bytes = 0
    for (let i = 1; i <= messages; i++) {
      bytes += (await lp.read({ signal: AbortSignal.timeout(10_000) })).byteLength
      if (i % batch === 0) await lp.write(new Uint8Array([1]), { signal: AbortSignal.timeout(10_000) })
    }
    received.resolve(bytes)
  })
  const stream = await a.dialProtocol(b.peerId, protocol)
  const lp = lpStream(stream)
  const payload = new Uint8Array(size).fill(7)
  for (let i = 1; i <= messages; i++) {
    await lp.write(payload, { signal: AbortSignal.timeout(10_000) })
    if (i % batch === 0) await lp.read({ signal: AbortSignal.timeout(10_000) })
  }
  const bytes = await Promise.race([received.promise, new Promise<number>((_resolve, reject) => setTimeout(() => reject(new Error('the receiver stalled')), 30_000))])
  t.equal(bytes, messages * size, `all ${messages * size} bytes arrived`)
  t.ok(dataFrames >= 100, `the two ends handled ${dataFrames} data frames (messages and acknowledgements)`)
  t.ok(updates >= 1 && updates <= dataFrames / 100, `${updates} window updates for ${dataFrames} data frames (the window grew to ${window} bytes; unpatched: one update per data frame)`)
})
