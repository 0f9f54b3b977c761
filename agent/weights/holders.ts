/**
 * Weight versions in the mesh (RLBoost §4.3: any agent holding a version can
 * serve it, late joiners pull at once). Each agent advertises its data
 * address and the versions it serves in its availability record
 * (`addresses.weights`, `weights`); a pull without an address picks a holder
 * from the local agent's view of its peers. Pure functions: no I/O.
 */
import { AgentError } from '../../core/errors.ts'
import type { AvailabilitySections } from '../../mesh/membership/availability-publisher.ts'
import type { PeerView } from '../../mesh/membership/mesh-views.ts'
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
  /** Set when it holds only one (layout, rank)'s slices of that version: their layout id. */
  layout?: string
}

/**
 * The record section of an agent serving `versions` on `address`. Bounded:
 * the newest version of every model first, then the second newest, … up to
 * maxAdvertisedVersions entries.
 */
export function weightsAdvert (address: string, versions: ReadonlyArray<{ model: string, version: number, layout?: string, pulling?: true }>): AvailabilitySections {
  const byModel = new Map<string, Array<{ version: number, layout?: string, pulling?: true }>>()
  for (const v of versions) byModel.set(v.model, [...(byModel.get(v.model) ?? []), { version: v.version, ...(v.layout !== undefined ? { layout: v.layout } : {}), ...(v.pulling === true ? { pulling: true as const } : {}) }])
  const ranked: Array<{ model: string, version: number, layout?: string, pulling?: true, rank: number }> = []
  for (const [model, list] of byModel) {
    for (const [rank, v] of list.sort((a, b) => b.version - a.version).entries()) ranked.push({ model, ...v, rank })
  }
  ranked.sort((a, b) => a.rank - b.rank || (a.model < b.model ? -1 : a.model > b.model ? 1 : 0))
  return {
    ...(address !== '' ? { weightsAddress: address } : {}),
    weights: ranked.slice(0, maxAdvertisedVersions).map(({ rank: _, ...entry }) => entry),
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
 * Alive peers that can serve `version` of `model` (`-1`: any version) to a
 * pull of `layout` (a layoutId; undefined: the whole version), the highest
 * version first. A full holder serves every layout; a partial holder only the
 * (layout, rank) it advertises. A peer's best entry: its highest version, and
 * at that version its full copy before its slices.
 */
export function findHolders (peers: readonly PeerView[], model: string, version: number, layout?: string): WeightsHolder[] {
  const holders: WeightsHolder[] = []
  for (const p of peers) {
    const address = p.record?.addresses.weights
    if (p.state !== 'alive' || address === undefined) continue
    const entries = (p.record?.weights ?? []).filter(w => w.model === model && w.pulling !== true && (version === latestVersion || w.version === version) && (w.layout === undefined || w.layout === layout))
    if (entries.length === 0) continue
    const top = Math.max(...entries.map(w => w.version))
    const full = entries.some(w => w.version === top && w.layout === undefined)
    holders.push({ node: p.node, peerId: p.peerId, address: reachableAddress(address, p.addresses), version: top, ...(full ? {} : { layout: layout! }) })
  }
  return holders.sort((a, b) => b.version - a.version)
}

/**
 * One holder to pull from: among those with the highest matching version, a
 * random one (`random` in [0, 1)), so that pullers spread over the holders;
 * for a pull of `layout`, a holder of exactly that layout's slices before a
 * full holder (RLBoost §4.3: rollout instances of the same layout serve each
 * other's late joiners and leave the full holders, the publisher first, to
 * others). `fallbacks`: the full holders of the same version, where a pull
 * resumes if the chosen one drops the version. ERR_WEIGHTS_NOT_FOUND when no
 * alive peer advertises it.
 */
export function pickHolder (peers: readonly PeerView[], model: string, version: number, random: () => number = Math.random, layout?: string): WeightsHolder & { fallbacks: string[] } {
  const holders = findHolders(peers, model, version, layout)
  const wanted = version === latestVersion ? `model ${model}` : `version ${version} of model ${model}`
  if (holders.length === 0) throw new AgentError('ERR_WEIGHTS_NOT_FOUND', `no alive agent in the mesh advertises ${wanted}${layout !== undefined ? ` whole or as layout ${layout}` : ''} (${peers.length} peers known); pass the serving agent's data address (--from HOST:PORT)`)
  const best = holders.filter(h => h.version === holders[0]!.version)
  const partial = best.filter(h => h.layout !== undefined)
  const pool = partial.length > 0 ? partial : best
  const chosen = pool[Math.min(pool.length - 1, Math.floor(random() * pool.length))]!
  return { ...chosen, fallbacks: best.filter(h => h.layout === undefined && h !== chosen).map(h => h.address) }
}

/**
 * Swarm peers of a pull of `version` (PROTOCOL.md "Swarm"): data addresses
 * of alive peers that hold it whole or are pulling it whole — for a sliced
 * pull (`layout`, a layout id), also those holding or pulling exactly that
 * layout's slices — but not `except` (the pull's own source), in random
 * order (`random` in [0, 1)).
 */
export function swarmPeers (peers: readonly PeerView[], model: string, version: number, except: string, random: () => number = Math.random, layout?: string): string[] {
  const found: string[] = []
  for (const p of peers) {
    const address = p.record?.addresses.weights
    if (p.state !== 'alive' || address === undefined) continue
    if (!(p.record?.weights ?? []).some(w => w.model === model && w.version === version && (w.layout === undefined || w.layout === layout))) continue
    const reachable = reachableAddress(address, p.addresses)
    if (reachable !== except) found.push(reachable)
  }
  for (let i = found.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [found[i], found[j]] = [found[j]!, found[i]!]
  }
  return found
}
