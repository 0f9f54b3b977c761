/** agentctl peers: the other agents of the mesh with their state and what they have free. */
import type { PeerView } from '../../mesh/mesh-views.ts'
import type { Command } from '../command.ts'
import { formatBytes, formatTable } from '../table.ts'

export const peersCommand: Command = {
  summary: 'the other agents in the mesh: node, peer id, state, GPUs free/total, host pool free, preemptible, last heard',
  async run ({ client, signal }) {
    const result = await client.meshPeers({ signal })
    return { json: result, human: renderPeers(result.peers, Date.now()) }
  },
}

export function renderPeers (peers: PeerView[], nowMs: number): string {
  if (peers.length === 0) return 'no other agents known (is mesh.join set? see agentctl mesh)'
  return formatTable(['NODE', 'STATE', 'GPUS FREE', 'HOST POOL FREE', 'PREEMPTIBLE', 'LAST HEARD', 'INC', 'PEER ID'], peers.map(p => [
    p.node || '?',
    p.reason !== undefined ? `${p.state} (${p.reason})` : p.state,
    `${p.gpus.free ?? '?'}/${p.gpus.total}`,
    p.hostPoolFreeBytes !== null ? formatBytes(p.hostPoolFreeBytes) : '-',
    p.preemptible === null ? '?' : p.preemptible ? 'yes' : 'no',
    p.lastHeardMs === 0 ? 'never' : `${((nowMs - p.lastHeardMs) / 1000).toFixed(1)}s ago`,
    String(p.incarnation),
    p.peerId,
  ]))
}
