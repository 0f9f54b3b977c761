/**
 * The weight swarm's seeding side (PROTOCOL.md "Swarm"): versions this agent
 * is pulling whole, served while they arrive. A tensor is served from the
 * moment its key is stored (every chunk verified against the publisher's
 * manifest), so pullers of the same version fetch from each other instead of
 * all from the publisher; the tensors being fetched are told too, so a
 * puller leaves to a peer what that peer is about to hold. A holding ends
 * when its pull does: a complete pull registers the version as a full copy
 * (version-store), a failed one stops being served. Unit: the tensor (its
 * key); pieces of a tensor still in flight are not served.
 */
import { hasBit as has, type Have } from './protocol.ts'
import type { WeightsManifest } from './version-store.ts'

export interface SwarmHolding {
  /** The publisher's manifest, each tensor's `key` this agent's key for it. */
  readonly manifest: WeightsManifest
  have(): Have
  held(index: number): boolean
}

export interface SwarmSeed {
  /** Tensor `index` is being fetched (true) or no longer (false: stored, or given up). */
  fetching(index: number, on: boolean): void
  /** Tensor `index` is stored under its key: served from now on. */
  stored(index: number): void
  /** The pull is over: no longer served as a holding in progress. Idempotent. */
  end(): void
}

export interface SwarmHoldings {
  /** Starts serving `manifest` (keys set) as it arrives; one holding per (model, version): a second pull of it is not a seed. */
  begin(manifest: WeightsManifest): SwarmSeed | undefined
  get(model: string, version: number): SwarmHolding | undefined
  list(): Array<{ model: string, version: number, tensors: number, heldTensors: number, heldBytes: number, totalBytes: number }>
}

/** `changed`: told when a holding begins or ends (the mesh advert lists them). */
export function createSwarmHoldings (changed: () => void = () => {}): SwarmHoldings {
  const holdings = new Map<string, { manifest: WeightsManifest, held: Uint8Array, fetching: Uint8Array, heldBytes: number }>()
  const id = (model: string, version: number): string => `${model}\u0000${version}`
  const set = (bits: Uint8Array, i: number, on: boolean): void => { if (on) bits[i >> 3]! |= 1 << (i & 7); else bits[i >> 3]! &= ~(1 << (i & 7)) }
  return {
    begin (manifest) {
      const key = id(manifest.model, manifest.version)
      if (holdings.has(key)) return undefined
      const n = Math.ceil(manifest.tensors.length / 8)
      const h = { manifest, held: new Uint8Array(n), fetching: new Uint8Array(n), heldBytes: 0 }
      holdings.set(key, h)
      changed()
      let ended = false
      return {
        fetching: (i, on) => { if (!ended) set(h.fetching, i, on) },
        stored: i => {
          if (ended || has(h.held, i)) return
          set(h.held, i, true)
          set(h.fetching, i, false)
          h.heldBytes += manifest.tensors[i]!.bytes
        },
        end: () => { if (!ended) { ended = true; holdings.delete(key); changed() } },
      }
    },
    get (model, version) {
      const h = holdings.get(id(model, version))
      if (h === undefined) return undefined
      return {
        manifest: h.manifest,
        have: () => ({ tensors: h.manifest.tensors.length, held: h.held.slice(), fetching: h.fetching.slice() }),
        held: i => i < h.manifest.tensors.length && has(h.held, i),
      }
    },
    list: () => [...holdings.values()].map(h => ({
      model: h.manifest.model, version: h.manifest.version, tensors: h.manifest.tensors.length,
      heldTensors: h.manifest.tensors.filter((_, i) => has(h.held, i)).length, heldBytes: h.heldBytes, totalBytes: h.manifest.totalBytes,
    })),
  }
}
