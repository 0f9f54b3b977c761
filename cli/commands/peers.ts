/**
 * agentctl peers: the other agents of the mesh with their state and what they
 * have free; a node whose record was cut to fit the mesh's size bound is
 * starred, with what its record left out.
 */
import type { PeerView } from '../../mesh/membership/mesh-views.ts'
import type { Command } from './command.ts'
import { formatBytes, formatTable } from './table.ts'

export const peersCommand: Command = {
  summary: 'the other agents in the mesh: node, peer id, state, GPUs free/total, host pool free, preemptible, last heard',
  examples: [
    { what: 'the other agents and what they have free', run: 'agentctl peers' },
  ],
  async run ({ client, signal }) {
    const result = await client.meshPeers({ signal })
    return { json: result, human: renderPeers(result.peers, Date.now()) }
  },
}

export function renderPeers (peers: PeerView[], nowMs: number): string {
  if (peers.length === 0) return 'no other agents known (is mesh.join set? see agentctl mesh)'
  const cut = peers.filter(p => p.record?.truncated !== undefined)
  const table = formatTable(['NODE', 'STATE', 'GPUS FREE', 'HOST POOL FREE', 'PREEMPTIBLE', 'LAST HEARD', 'INC', 'PEER ID'], peers.map(p => [
    `${p.node || '?'}${p.record?.truncated !== undefined ? '*' : ''}`,
    p.reason !== undefined ? `${p.state} (${p.reason})` : p.state,
    `${p.gpus.free ?? '?'}/${p.gpus.total}`,
    p.hostPoolFreeBytes !== null ? formatBytes(p.hostPoolFreeBytes) : '-',
    p.preemptible === null ? '?' : p.preemptible ? 'yes' : 'no',
    p.lastHeardMs === 0 ? 'never' : `${((nowMs - p.lastHeardMs) / 1000).toFixed(1)}s ago`,
    String(p.incarnation),
    p.peerId,
  ]))
  if (cut.length === 0) return table
  const leftOut = (t: Record<string, number | undefined>): string => Object.entries(t).map(([section, n]) => `${n} ${section}`).join(', ')
  return [table, ...cut.map(p => `* ${p.node || p.peerId}: partial record (cut to fit mesh.maxRecordBytes), left out: ${leftOut(p.record!.truncated!)}`)].join('\n')
}
