/**
 * The weight swarm's seeding side (PROTOCOL.md "Swarm"): versions this agent
 * is pulling, served while they arrive. A pull into keys is a *seed*: whole
 * (every tensor) or sliced (one (layout, rank)'s slices, a partial holding
 * in progress). A tensor — or a slice of it — is served from the moment its
 * key is stored (every chunk verified against its source's checksums), so
 * pullers of the same version, and of the same layout, fetch from each other
 * instead of all from the publisher; the tensors being fetched are told too,
 * so a puller leaves to a peer what that peer is about to hold. A holding
 * ends when its pull does: a complete pull registers the version (a full
 * copy or a partial holding, version-store), a failed one stops being
 * served. Unit: the tensor (its key); pieces still in flight are not served.
 */
import { hasBit as has, type Have } from './protocol.ts'
import { sameSlice } from './reshard.ts'
import type { HeldSlice, PartialHolding, WeightsManifest } from './version-store.ts'

export interface SwarmHolding {
  /**
   * The publisher's manifest, each tensor's `key` this agent's key for it;
   * a sliced holding carries `partial` with `key` '' and no checksums on the
   * slices not stored yet.
   */
  readonly manifest: WeightsManifest
  have(): Have
  /** Tensor `index` (a sliced holding: its slice) is stored and served. */
  held(index: number): boolean
}

export interface SwarmSeed {
  /** Tensor `index` is being fetched (true) or no longer (false: stored, or given up). */
  fetching(index: number, on: boolean): void
  /** Tensor `index` is stored under its key: served from now on. A sliced seed passes the slice's chunk checksums (on the manifest's chunkBytes windows). */
  stored(index: number, chunkChecksums?: number[]): void
  /** The pull is over: no longer served as a holding in progress. Idempotent. */
  end(): void
}

/** A sliced pull's seed: its (layout, rank) and the slices it stores, one per tensor in table order (`key` '' for a slice of 0 bytes). */
export interface SlicedSeed {
  layout: string
  tp: number
  rank: number
  slices: Array<Omit<HeldSlice, 'chunkChecksums'>>
}

export interface SwarmHoldings {
  /**
   * Starts serving `manifest` (keys set) as it arrives, whole or, with
   * `sliced`, as that layout's slices. One holding per (model, version,
   * layout): a second pull of the same is not a seed (undefined).
   */
  begin(manifest: WeightsManifest, sliced?: SlicedSeed): SwarmSeed | undefined
  /** The holding of (model, version) whole, or of exactly `layout`. */
  get(model: string, version: number, layout?: string): SwarmHolding | undefined
  /** A sliced holding of (model, version) that holds exactly this slice now (tensor index, dim, ranges), with the slice. */
  slice(model: string, version: number, wanted: Pick<HeldSlice, 'index' | 'dim' | 'ranges'>): { manifest: WeightsManifest, holding: PartialHolding, held: HeldSlice } | undefined
  list(): Array<{ model: string, version: number, layout?: string, tensors: number, heldTensors: number, heldBytes: number, totalBytes: number }>
}

interface Holding {
  manifest: WeightsManifest
  held: Uint8Array
  fetching: Uint8Array
  heldBytes: number
  /** This pull's bytes: the version's, or its slices'. */
  totalBytes: number
}

/** `changed`: told when a holding begins or ends (the mesh advert lists them). */
export function createSwarmHoldings (changed: () => void = () => {}): SwarmHoldings {
  const holdings = new Map<string, Holding>()
  const id = (model: string, version: number, layout?: string): string => `${model}\u0000${version}\u0000${layout ?? ''}`
  const set = (bits: Uint8Array, i: number, on: boolean): void => { if (on) bits[i >> 3]! |= 1 << (i & 7); else bits[i >> 3]! &= ~(1 << (i & 7)) }
  const view = (h: Holding): SwarmHolding => ({
    manifest: h.manifest,
    have: () => ({ tensors: h.manifest.tensors.length, held: h.held.slice(), fetching: h.fetching.slice() }),
    held: i => i < h.manifest.tensors.length && has(h.held, i),
  })
  return {
    begin (manifest, sliced) {
      const key = id(manifest.model, manifest.version, sliced?.layout)
      if (holdings.has(key)) return undefined
      const n = Math.ceil(manifest.tensors.length / 8)
      const partial: PartialHolding | undefined = sliced !== undefined
        ? { layout: sliced.layout, tp: sliced.tp, rank: sliced.rank, slices: sliced.slices.map(s => ({ ...s, ranges: s.ranges.map(r => ({ ...r })), chunkChecksums: [] })) }
        : undefined
      const h: Holding = {
        manifest: partial !== undefined ? { ...manifest, tensors: manifest.tensors.map(t => ({ ...t, key: '' })), partial } : manifest,
        held: new Uint8Array(n),
        fetching: new Uint8Array(n),
        heldBytes: 0,
        totalBytes: partial !== undefined ? partial.slices.reduce((a, s) => a + s.bytes, 0) : manifest.totalBytes,
      }
      holdings.set(key, h)
      changed()
      let ended = false
      return {
        fetching: (i, on) => { if (!ended) set(h.fetching, i, on) },
        stored: (i, sums) => {
          if (ended || has(h.held, i)) return
          const slice = partial?.slices.find(s => s.index === i)
          if (slice !== undefined) slice.chunkChecksums = sums ?? []
          set(h.held, i, true)
          set(h.fetching, i, false)
          h.heldBytes += slice?.bytes ?? manifest.tensors[i]!.bytes
        },
        end: () => { if (!ended) { ended = true; holdings.delete(key); changed() } },
      }
    },
    get (model, version, layout) {
      const h = holdings.get(id(model, version, layout))
      return h === undefined ? undefined : view(h)
    },
    slice (model, version, wanted) {
      for (const h of holdings.values()) {
        const holding = h.manifest.partial
        if (holding === undefined || h.manifest.model !== model || h.manifest.version !== version || !has(h.held, wanted.index)) continue
        const held = holding.slices.find(s => s.index === wanted.index)
        if (held !== undefined && sameSlice(held, wanted)) return { manifest: h.manifest, holding, held }
      }
      return undefined
    },
    list: () => [...holdings.values()].map(h => ({
      model: h.manifest.model, version: h.manifest.version,
      ...(h.manifest.partial !== undefined ? { layout: h.manifest.partial.layout } : {}),
      tensors: h.manifest.tensors.length,
      heldTensors: h.manifest.tensors.filter((_, i) => has(h.held, i)).length, heldBytes: h.heldBytes, totalBytes: h.totalBytes,
    })),
  }
}
