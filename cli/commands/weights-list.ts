/**
 * agentctl weights list: versions on this agent (model, version, tensors, size, the model's owner), damaged
 * manifests, who is pulling from it, its own pulls, and the versions being distributed in the mesh (the swarm).
 */
import type { Command } from './command.ts'
import { formatBytes, formatTable } from './table.ts'

export const weightsListCommand: Command = {
  summary: 'weight versions on this agent, the data address, who is pulling from it, and pulls in progress',
  examples: [
    { what: 'versions held here and pulls in progress', run: 'agentctl weights list' },
  ],
  async run ({ client, signal }) {
    const body = await client.weights({ signal })
    // HOLDS: the whole version, or only one (layout, rank)'s slices (a sliced pull, served to pullers of that layout).
    // OWNER last, so scripts that read the earlier columns by position keep working: the model's owner here, a uid or "agent".
    const versions = body.versions.map(v => [v.model, String(v.version), String(v.tensors), formatBytes(v.bytes), v.partial !== undefined ? `tp ${v.partial.tp} rank ${v.partial.rank} (${v.partial.layout})` : 'all', v.durable ? 'yes' : 'no', new Date(v.committedAtMs).toISOString(), String(v.owner ?? '-')])
    const damaged = body.damaged.map(d => [d.model, String(d.version), d.reason, d.file])
    const pulls = body.pulls.map(p => [p.remote, p.model, String(p.version), formatBytes(p.bytesSent)])
    const pulling = body.pulling.map(p => [p.from, p.model, String(p.version), `${formatBytes(p.doneBytes)} / ${formatBytes(p.totalBytes)}`])
    // The swarm: versions being pulled in the mesh, whole or as one layout's slices, with how many agents hold them and pull them.
    const distributing = body.distributing.map(d => [d.model, String(d.version), d.layout ?? 'all', String(d.holders), String(d.pulling),
      d.here !== undefined ? `${d.here.heldTensors}/${d.here.tensors} tensors, ${formatBytes(d.here.heldBytes)} / ${formatBytes(d.here.totalBytes)}` : '-'])
    return {
      json: body,
      human: [
        `data server ${body.address}`,
        versions.length > 0 ? formatTable(['MODEL', 'VERSION', 'TENSORS', 'SIZE', 'HOLDS', 'DURABLE', 'COMMITTED', 'OWNER'], versions) : 'no versions',
        // Kept as found, not served: `agentctl weights retire` removes one.
        ...(damaged.length > 0 ? [formatTable(['DAMAGED MODEL', 'VERSION', 'WHY', 'MANIFEST'], damaged)] : []),
        pulls.length > 0 ? formatTable(['PULLER', 'MODEL', 'VERSION', 'SENT'], pulls) : 'nobody is pulling from this agent',
        ...(pulling.length > 0 ? [formatTable(['PULLING FROM', 'MODEL', 'VERSION', 'PROGRESS'], pulling)] : []),
        ...(distributing.length > 0 ? [formatTable(['DISTRIBUTING', 'VERSION', 'LAYOUT', 'HOLDERS', 'PULLING', 'SERVED HERE'], distributing)] : []),
        // Versions pinned and mapped for pullers' one-sided UCX reads (retiring one closes its connections).
        ...((body.ucx ?? []).length > 0 ? [formatTable(['PINNED FOR UCX', 'VERSION', 'SIZE', 'CONNECTIONS'], body.ucx!.map(u => [u.model, String(u.version), formatBytes(u.bytes), String(u.connections)]))] : []),
        // Peers a pull stopped using: failed, too slow, or sent a chunk that did not match the manifest.
        ...(body.droppedPeers.length > 0 ? [formatTable(['DROPPED PEER', 'MODEL', 'VERSION', 'WHEN', 'WHY'], body.droppedPeers.map(d => [d.address, d.model, String(d.version), new Date(d.atMs).toISOString(), d.reason]))] : []),
      ].join('\n\n'),
    }
  },
}
