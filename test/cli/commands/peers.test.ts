// agentctl peers: a peer whose record was cut to fit the mesh's size bound is starred, with what was left out.
import t from 'tap'
import { renderPeers } from '../../../cli/commands/peers.ts'
import type { PeerView } from '../../../mesh/membership/mesh-views.ts'

const peer = (node: string, truncated?: { resident?: number, weights?: number }): PeerView => ({
  peerId: `12D3KooW${node}`, node, state: 'alive', incarnation: 1, stateSinceMs: 0, lastHeardMs: 1000, addresses: [],
  gpus: { total: 0, free: 0 }, hostPoolFreeBytes: null, nvmeFreeBytes: null, preemptible: false,
  record: {
    kind: 'record', from: `12D3KooW${node}`, node, incarnation: 1, seq: 1, publishedAtMs: 0, addresses: { mesh: [] }, preemptible: false,
    cpu: { cores: 1, loadAvg1: 0 }, memory: { totalBytes: 1, availableBytes: 1 }, gpus: [], ...(truncated !== undefined ? { truncated } : {}),
  },
})

t.test('complete records: no star, no note', async t => {
  const out = renderPeers([peer('a')], 2000)
  t.notMatch(out, /\*/)
})

t.test('a cut record is starred and its left-out counts are listed', async t => {
  const out = renderPeers([peer('a'), peer('big', { resident: 900, weights: 3 })], 2000)
  t.match(out, /^big\*\s/m)
  t.match(out, /\* big: partial record \(cut to fit mesh\.maxRecordBytes\), left out: 900 resident, 3 weights/)
  t.notMatch(out, /^a\*/m)
})
