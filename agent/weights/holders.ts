/**
 * Weight versions in the mesh (RLBoost §4.3: any agent holding a version can
 * serve it, late joiners pull at once). Each agent advertises its data
 * address and the versions it serves in its availability record
 * (`addresses.weights`, `weights`); a pull without an address picks a holder
 * from the local agent's view of its peers. Pure functions: no I/O.
 */
import { AgentError } from '../errors.ts'
import type { AvailabilitySections } from '../../mesh/availability-publisher.ts'
import type { PeerView } from '../../mesh/mesh-views.ts'
import { latestVersion } from './protocol.ts'
import { splitHostPort } from './tcp-server.ts'

/** Most versions one record advertises (the record schema's bound). */
export const maxAdvertisedVersions = 1024

export interface WeightsHolder {
  node: string
  peerId: string
  /** host:port of its data server, reachable from here. */
  address: string
  /** The version it advertises (the highest it holds when `latest` was asked for). */
  version: number
}

/**
 * The record section of an agent serving `versions` on `address`. Bounded:
 * the newest version of every model first, then the second newest, … up to
 * maxAdvertisedVersions entries.
 */
export function weightsAdvert (address: string, versions: ReadonlyArray<{ model: string, version: number }>): AvailabilitySections {
  const byModel = new Map<string, number[]>()
  for (const v of versions) byModel.set(v.model, [...(byModel.get(v.model) ?? []), v.version])
  const ranked: Array<{ model: string, version: number, rank: number }> = []
  for (const [model, list] of byModel) list.sort((a, b) => b - a).forEach((version, rank) => ranked.push({ model, version, rank }))
  ranked.sort((a, b) => a.rank - b.rank || (a.model < b.model ? -1 : a.model > b.model ? 1 : 0))
  return {
    ...(address !== '' ? { weightsAddress: address } : {}),
    weights: ranked.slice(0, maxAdvertisedVersions).map(({ model, version }) => ({ model, version })),
  }
}

/**
 * A data address as a peer can dial it: a server bound to the unspecified
 * address (0.0.0.0, [::]) is reached at the host of the holder's first mesh
 * multiaddr of the same family (or any, when none).
 */
export function reachableAddress (weightsAddress: string, meshAddresses: readonly string[]): string {
  const { host, port } = splitHostPort(weightsAddress)
  if (host !== '0.0.0.0' && host !== '::') return weightsAddress
  const hosts = meshAddresses.map(a => /^\/(ip4|ip6)\/([^/]+)\//.exec(a)).filter(m => m !== null).map(m => ({ v6: m[1] === 'ip6', host: m[2]! }))
  const pick = hosts.find(h => h.v6 === (host === '::')) ?? hosts[0]
  if (pick === undefined) return weightsAddress
  return pick.v6 ? `[${pick.host}]:${port}` : `${pick.host}:${port}`
}

/**
 * Alive peers that advertise `version` of `model` (`-1`: any version), the
 * highest version first.
 */
export function findHolders (peers: readonly PeerView[], model: string, version: number): WeightsHolder[] {
  const holders: WeightsHolder[] = []
  for (const p of peers) {
    const address = p.record?.addresses.weights
    if (p.state !== 'alive' || address === undefined) continue
    const versions = (p.record?.weights ?? []).filter(w => w.model === model && (version === latestVersion || w.version === version)).map(w => w.version)
    if (versions.length === 0) continue
    holders.push({ node: p.node, peerId: p.peerId, address: reachableAddress(address, p.addresses), version: Math.max(...versions) })
  }
  return holders.sort((a, b) => b.version - a.version)
}

/**
 * One holder to pull from: among those with the highest matching version, a
 * random one (`random` in [0, 1)), so that pullers spread over the holders.
 * ERR_WEIGHTS_NOT_FOUND when no alive peer advertises it.
 */
export function pickHolder (peers: readonly PeerView[], model: string, version: number, random: () => number = Math.random): WeightsHolder {
  const holders = findHolders(peers, model, version)
  const wanted = version === latestVersion ? `model ${model}` : `version ${version} of model ${model}`
  if (holders.length === 0) throw new AgentError('ERR_WEIGHTS_NOT_FOUND', `no alive agent in the mesh advertises ${wanted} (${peers.length} peers known); pass the serving agent's data address (--from HOST:PORT)`)
  const best = holders.filter(h => h.version === holders[0]!.version)
  return best[Math.min(best.length - 1, Math.floor(random() * best.length))]!
}
