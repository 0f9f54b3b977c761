// Weight versions in the mesh record and the choice of a holder from a peer view (pure functions).
import t from 'tap'
import { findHolders, maxAdvertisedVersions, pickHolder, reachableAddress, weightsAdvert } from '../../../agent/weights/holders.ts'
import { Value } from '@sinclair/typebox/value'
import { AvailabilityRecordSchema, type AvailabilityRecord } from '../../../mesh/membership/mesh-messages.ts'
import type { PeerView } from '../../../mesh/membership/mesh-views.ts'

const peerId = (n: number): string => `12D3KooW${String(n).padStart(44, 'A')}`

function peer (n: number, state: PeerView['state'], weightsAddress: string | undefined, weights: Array<{ model: string, version: number, layout?: string }>): PeerView {
  const record: AvailabilityRecord = {
    kind: 'record', from: peerId(n), node: `n${n}`, incarnation: 1, seq: 1, publishedAtMs: 0,
    addresses: { mesh: [`/ip4/10.0.0.${n}/tcp/7460/p2p/${peerId(n)}`], ...(weightsAddress !== undefined ? { weights: weightsAddress } : {}) },
    preemptible: false, cpu: { cores: 1, loadAvg1: 0 }, memory: { totalBytes: 1, availableBytes: 1 }, gpus: [], weights,
  }
  return {
    peerId: peerId(n), node: `n${n}`, state, incarnation: 1, stateSinceMs: 0, lastHeardMs: 0, addresses: record.addresses.mesh,
    gpus: { total: 0, free: 0 }, hostPoolFreeBytes: null, nvmeFreeBytes: null, preemptible: false, record,
  }
}

t.test('the advert: data address, newest version of every model first, bounded to the record schema', async t => {
  t.same(weightsAdvert('127.0.0.1:7461', [{ model: 'b', version: 1 }, { model: 'a', version: 3 }, { model: 'a', version: 4 }, { model: 'b', version: 2 }]), {
    weightsAddress: '127.0.0.1:7461',
    weights: [{ model: 'a', version: 4 }, { model: 'b', version: 2 }, { model: 'a', version: 3 }, { model: 'b', version: 1 }],
  })
  t.same(weightsAdvert('', []), { weights: [] }, 'a server not listening yet advertises no address')
  const many = Array.from({ length: 3000 }, (_, i) => ({ model: `m${i % 1500}`, version: i }))
  const advert = weightsAdvert('127.0.0.1:1', many)
  t.equal(advert.weights!.length, maxAdvertisedVersions)
  t.equal(new Set(advert.weights!.map(w => w.model)).size, 1024, 'newest versions of distinct models go first')
  const record = { ...peer(1, 'alive', advert.weightsAddress, advert.weights!).record! }
  t.ok(Value.Check(AvailabilityRecordSchema, record), 'a full advert passes the record schema')
})

t.test('an unspecified bind address is reached at the host of the holder\'s mesh address', async t => {
  t.equal(reachableAddress('127.0.0.1:7461', ['/ip4/10.0.0.1/tcp/1']), '127.0.0.1:7461')
  t.equal(reachableAddress('0.0.0.0:7461', ['/ip6/fd00::1/tcp/1', '/ip4/10.0.0.1/tcp/1/p2p/x']), '10.0.0.1:7461')
  t.equal(reachableAddress('[::]:7461', ['/ip4/10.0.0.1/tcp/1', '/ip6/fd00::1/tcp/1']), '[fd00::1]:7461')
  t.equal(reachableAddress('[::]:7461', ['/ip4/10.0.0.1/tcp/1']), '10.0.0.1:7461', 'the other family when it is all there is')
  t.equal(reachableAddress('0.0.0.0:7461', ['/dns4/x/tcp/1']), '0.0.0.0:7461', 'unchanged without an IP mesh address')
})

t.test('holders: alive peers advertising the model, the highest version for latest, exactly the version otherwise', async t => {
  const peers = [
    peer(1, 'alive', '10.0.0.1:7461', [{ model: 'llama', version: 6 }, { model: 'llama', version: 7 }]),
    peer(2, 'alive', '0.0.0.0:7461', [{ model: 'llama', version: 7 }]),
    peer(3, 'alive', '10.0.0.3:7461', [{ model: 'llama', version: 6 }, { model: 'qwen', version: 9 }]),
    peer(4, 'suspect', '10.0.0.4:7461', [{ model: 'llama', version: 8 }]),
    peer(5, 'dead', '10.0.0.5:7461', [{ model: 'llama', version: 9 }]),
    peer(6, 'alive', undefined, [{ model: 'llama', version: 10 }]),
    { ...peer(7, 'alive', undefined, []), record: null },
  ]
  t.same(findHolders(peers, 'llama', -1).map(h => [h.node, h.version, h.address]),
    [['n1', 7, '10.0.0.1:7461'], ['n2', 7, '10.0.0.2:7461'], ['n3', 6, '10.0.0.3:7461']], 'not suspect, dead, address-less or record-less peers')
  t.same(findHolders(peers, 'llama', 6).map(h => h.node), ['n1', 'n3'])
  t.equal(pickHolder(peers, 'llama', -1, () => 0).node, 'n1')
  t.equal(pickHolder(peers, 'llama', -1, () => 0.99).node, 'n2', 'random among the holders of the highest version')
  t.equal(pickHolder(peers, 'llama', 6, () => 0.99).node, 'n3')
  t.equal(pickHolder(peers, 'qwen', -1).address, '10.0.0.3:7461')
  t.throws(() => pickHolder(peers, 'llama', 8), { code: 'ERR_WEIGHTS_NOT_FOUND', message: /no alive agent in the mesh advertises version 8 of model llama \(7 peers known\).*--from/ })
  t.throws(() => pickHolder([], 'llama', -1), { code: 'ERR_WEIGHTS_NOT_FOUND', message: /advertises model llama \(0 peers/ })
})

t.test('a pull of a layout prefers holders of exactly its slices, with the full holders of that version as fallbacks', async t => {
  const peers = [
    peer(1, 'alive', '10.0.0.1:7461', [{ model: 'm', version: 3 }]),
    peer(2, 'alive', '10.0.0.2:7461', [{ model: 'm', version: 3, layout: 'tp2-r0-aaaa' }]),
    peer(3, 'alive', '10.0.0.3:7461', [{ model: 'm', version: 3, layout: 'tp2-r1-bbbb' }]),
    peer(4, 'alive', '10.0.0.4:7461', [{ model: 'm', version: 3 }]),
    peer(5, 'alive', '10.0.0.5:7461', [{ model: 'm', version: 2, layout: 'tp2-r0-aaaa' }, { model: 'm', version: 3, layout: 'tp2-r0-aaaa' }]),
  ]
  t.same(findHolders(peers, 'm', 3).map(h => h.node), ['n1', 'n4'], 'a whole pull: full holders only')
  t.same(findHolders(peers, 'm', 3, 'tp2-r0-aaaa').map(h => [h.node, h.layout ?? null]), [['n1', null], ['n2', 'tp2-r0-aaaa'], ['n4', null], ['n5', 'tp2-r0-aaaa']])
  const picked = pickHolder(peers, 'm', -1, () => 0.99, 'tp2-r0-aaaa')
  t.equal(picked.node, 'n5', 'a holder of exactly the layout first')
  t.same(picked.fallbacks, ['10.0.0.1:7461', '10.0.0.4:7461'], 'full holders of the version to resume from')
  t.equal(pickHolder(peers, 'm', 3, () => 0, 'tp4-r0-cccc').node, 'n1', 'another layout: a full holder')
  t.same(pickHolder(peers, 'm', 3, () => 0).fallbacks, ['10.0.0.4:7461'])
  t.throws(() => pickHolder([peers[2]!], 'm', 3, () => 0, 'tp2-r0-aaaa'), { code: 'ERR_WEIGHTS_NOT_FOUND', message: /whole or as layout tp2-r0-aaaa/ })
  const advert = weightsAdvert('10.0.0.9:7461', [{ model: 'm', version: 3, layout: 'tp2-r0-aaaa' }, { model: 'm', version: 2 }])
  t.same(advert.weights, [{ model: 'm', version: 3, layout: 'tp2-r0-aaaa' }, { model: 'm', version: 2 }])
  t.ok(Value.Check(AvailabilityRecordSchema, { ...peer(9, 'alive', advert.weightsAddress, advert.weights!).record! }), 'the layout passes the record schema')
})
