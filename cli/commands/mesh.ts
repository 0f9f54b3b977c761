/** agentctl mesh: this agent in the mesh — addresses, seeds, connections, members, message rates, dropped messages. */
import type { MeshInfo } from '../../mesh/membership/mesh-views.ts'
import type { Command } from './command.ts'

export const meshCommand: Command = {
  summary: 'this agent in the mesh: peer id, addresses, seeds, connections, message rates, invalid-record counters',
  examples: [
    { what: 'this agent\'s addresses, connections and message rates', run: 'agentctl mesh' },
  ],
  async run ({ client, signal }) {
    const info = await client.mesh({ signal })
    return { json: info, human: renderMesh(info) }
  },
}

export function renderMesh (m: MeshInfo): string {
  const ms = (x: number | null): string => x === null ? '-' : `${Math.round(x)} ms`
  const lines = [
    `peer id      ${m.peerId}`,
    `node         ${m.node} (incarnation ${m.incarnation})`,
    `announced    ${m.addresses.join(', ') || '-'} (${m.announce.source})`,
    `listening    ${m.listen.join(', ')}`,
    `cluster key  ${m.clusterKeyFile}`,
    `connections  ${m.connections} (${m.topicPeers} on the mesh topic, ${m.meshPeers} in the gossip mesh)`,
    `neighbors    ${m.neighbors.outbound} chosen + ${m.neighbors.inbound} choosing this agent, of at most ${m.neighbors.maxPeers} (${m.neighbors.idleClosed} idle connections closed, ${m.neighbors.rejected} asks rejected, ${m.neighbors.priorityRefused} priority asks refused)`,
    `members      ${m.members.alive} alive, ${m.members.suspect} suspect, ${m.members.dead} dead`,
    `messages     published ${m.messages.published.total} (${m.messages.published.perSecond}/s), received ${m.messages.received.total} (${m.messages.received.perSecond}/s), stale ${m.messages.stale}`,
    `invalid      oversized ${m.messages.invalid.oversized}, malformed ${m.messages.invalid.malformed}, schema ${m.messages.invalid.schema}, signature ${m.messages.invalid.signature}`,
    `records      dissemination p50 ${ms(m.dissemination.p50Ms)}, p99 ${ms(m.dissemination.p99Ms)} (${m.dissemination.samples} records in the last minute)`,
    `state sync   ${m.sync.syncs} done, ${m.sync.failed} failed, ${m.sync.recordsApplied} records were new`,
    `probes       ${m.probes.sent} sent, ${m.probes.failed} failed, ${m.probes.discarded} discarded while stalled; health ${m.health.healthy ? 'ok' : 'degraded'} (score ${m.health.score})`,
  ]
  for (const s of m.seeds) lines.push(`seed         ${s.address} ${s.connected ? 'connected' : `not connected (${s.failures} failed dials)`}`)
  return lines.join('\n')
}
