// The swarm's pure parts (PROTOCOL.md "Swarm"): the HAVE request with a layout on the wire, which mesh
// peers a whole or a sliced pull takes as swarm peers, and what a sliced seed serves while it arrives.
import t from 'tap'
import { swarmPeers } from '../../../agent/weights/holders.ts'
import { decodeHaveRequest, encodeHaveRequest, encodeManifestRequest } from '../../../agent/weights/protocol.ts'
import { createSwarmHoldings } from '../../../agent/weights/swarm-holdings.ts'
import type { WeightsManifest } from '../../../agent/weights/version-store.ts'
import type { PeerView } from '../../../mesh/membership/mesh-views.ts'

t.test('HAVE names the whole version or one layout; a malformed body is a protocol error', async t => {
  t.same(decodeHaveRequest(encodeHaveRequest('m', 3)), { model: 'm', version: 3 }, 'without a layout: the MANIFEST body as before')
  t.same(decodeHaveRequest(encodeManifestRequest('m', 3)), { model: 'm', version: 3 }, 'which an older puller sends')
  const layout = 'tp2-r0-0123456789abcdef'
  t.same(decodeHaveRequest(encodeHaveRequest('m', 3, layout)), { model: 'm', version: 3, layout })
  const good = encodeHaveRequest('m', 3, layout)
  t.throws(() => decodeHaveRequest(good.subarray(0, good.length - 1)), { code: 'ERR_WEIGHTS_PROTOCOL', message: /HAVE layout length mismatch/ }, 'a truncated layout')
  t.throws(() => decodeHaveRequest(Buffer.concat([good, Buffer.from('x')])), { code: 'ERR_WEIGHTS_PROTOCOL', message: /HAVE layout length mismatch/ }, 'trailing bytes')
  t.throws(() => decodeHaveRequest(good.subarray(0, 12)), { code: 'ERR_WEIGHTS_PROTOCOL' }, 'a layout length without the layout')
  t.throws(() => decodeHaveRequest(encodeHaveRequest('m', 3, '../x y')), { code: 'ERR_WEIGHTS_PROTOCOL', message: /is not a layout id/ })
  t.throws(() => decodeHaveRequest(encodeHaveRequest('m', 3, 'x'.repeat(129))), { code: 'ERR_WEIGHTS_PROTOCOL', message: /is not a layout id/ })
  t.throws(() => decodeHaveRequest(Buffer.alloc(5)), { code: 'ERR_WEIGHTS_PROTOCOL', message: /too short/ })
  t.throws(() => decodeHaveRequest(encodeHaveRequest('../etc', 3)), { code: 'ERR_WEIGHTS_PROTOCOL' }, 'the model name is checked as in MANIFEST')
})

const peerId = (n: number): string => `12D3KooW${String(n).padStart(44, 'A')}`
function peer (n: number, weights: Array<{ model: string, version: number, layout?: string, pulling?: true }>, state: PeerView['state'] = 'alive'): PeerView {
  const addresses = { mesh: [`/ip4/10.0.0.${n}/tcp/7460/p2p/${peerId(n)}`], weights: `10.0.0.${n}:7461` }
  return {
    peerId: peerId(n), node: `n${n}`, state, incarnation: 1, stateSinceMs: 0, lastHeardMs: 0, addresses: addresses.mesh,
    gpus: { total: 0, free: 0 }, hostPoolFreeBytes: null, nvmeFreeBytes: null, preemptible: false,
    record: {
      kind: 'record', from: peerId(n), node: `n${n}`, incarnation: 1, seq: 1, publishedAtMs: 0, addresses,
      preemptible: false, cpu: { cores: 1, loadAvg1: 0 }, memory: { totalBytes: 1, availableBytes: 1 }, gpus: [], weights,
    },
  }
}

t.test('swarm peers: a whole pull takes whole holders and seeds; a sliced pull also those of exactly its layout', async t => {
  const l0 = 'tp2-r0-0123456789abcdef'
  const l1 = 'tp2-r1-0123456789abcdef'
  const peers = [
    peer(1, [{ model: 'm', version: 2 }]), // full holder
    peer(2, [{ model: 'm', version: 2, pulling: true }]), // whole seed
    peer(3, [{ model: 'm', version: 2, layout: l0, pulling: true }]), // seed of rank 0
    peer(4, [{ model: 'm', version: 2, layout: l0 }]), // partial holder of rank 0
    peer(5, [{ model: 'm', version: 2, layout: l1, pulling: true }]), // another rank
    peer(6, [{ model: 'm', version: 1 }]), // another version
    peer(7, [{ model: 'm', version: 2 }], 'suspect'),
  ]
  const sorted = (xs: string[]): string[] => [...xs].sort()
  t.same(sorted(swarmPeers(peers, 'm', 2, '10.0.0.1:7461')), ['10.0.0.2:7461'], 'whole: the seed, not the pull\'s own source, no slices')
  t.same(sorted(swarmPeers(peers, 'm', 2, 'x', Math.random, l0)), ['10.0.0.1:7461', '10.0.0.2:7461', '10.0.0.3:7461', '10.0.0.4:7461'], 'rank 0: whole copies and rank-0 slices')
  t.same(sorted(swarmPeers(peers, 'm', 2, 'x', Math.random, l1)), ['10.0.0.1:7461', '10.0.0.2:7461', '10.0.0.5:7461'], 'rank 1: its own layout only')
})

t.test('a sliced seed serves a slice once stored, with the checksums it was given; holdings are per (model, version, layout)', async t => {
  const manifest: WeightsManifest = {
    model: 'm', version: 1, chunkBytes: 4096, totalBytes: 3 * 8192, metadata: {},
    tensors: [0, 1, 2].map(i => ({ name: `t${i}`, dtype: 'bf16', shape: [4, 1024], bytes: 8192, key: '', chunkChecksums: [1, 2] })),
  } as unknown as WeightsManifest
  let changes = 0
  const holdings = createSwarmHoldings(() => { changes++ })
  const slices = [0, 1, 2].map(i => ({ index: i, dim: 1, ranges: [{ start: 0, count: 512 }], shape: [4, 512], bytes: 4096, key: `k${i}` }))
  const seed = holdings.begin(manifest, { layout: 'tp2-r0-x', tp: 2, rank: 0, slices })!
  t.equal(holdings.begin(manifest, { layout: 'tp2-r0-x', tp: 2, rank: 0, slices }), undefined, 'a second pull of the same layout is not a seed')
  const whole = holdings.begin(manifest)
  t.ok(whole !== undefined, 'the whole version is another holding')
  seed.fetching(1, true)
  seed.stored(0, [0xabc])
  const wanted = { index: 0, dim: 1, ranges: [{ start: 0, count: 512 }] }
  t.match(holdings.slice('m', 1, wanted), { held: { key: 'k0', chunkChecksums: [0xabc] }, holding: { layout: 'tp2-r0-x' } }, 'a stored slice is served with its checksums')
  t.equal(holdings.slice('m', 1, { ...wanted, ranges: [{ start: 512, count: 512 }] }), undefined, 'another slice of the tensor is not')
  t.equal(holdings.slice('m', 1, { ...wanted, index: 1 }), undefined, 'a slice being fetched is not')
  t.equal(holdings.slice('m', 2, wanted), undefined, 'nor another version')
  const have = holdings.get('m', 1, 'tp2-r0-x')!.have()
  t.same([have.held[0], have.fetching[0]], [0b001, 0b010], 'HAVE of the layout: slice 0 held, slice 1 fetching')
  t.equal(holdings.get('m', 1)!.held(0), false, 'the whole holding is apart')
  t.match(holdings.list(), [{ layout: 'tp2-r0-x', heldTensors: 1, heldBytes: 4096, totalBytes: 3 * 4096 }, { heldTensors: 0, totalBytes: 3 * 8192 }])
  seed.end()
  seed.end()
  t.equal(holdings.slice('m', 1, wanted), undefined, 'an ended seed serves nothing')
  whole!.end()
  t.equal(changes, 4, 'the advert is told of each begin and end once')
})
