/**
 * The data server's UCX side (PROTOCOL.md "RDMA (UCX)"): UCX_OPEN on an
 * authenticated connection pins every tensor of a committed full version in
 * the host pool (promoting from NVMe as needed), maps each for remote reads
 * and answers the worker address and, per tensor, the mapping's address and
 * remote key. The pins and mappings belong to the connection: they end when
 * it closes (or the version is opened again on it), so a remote key is good
 * for as long as its puller is connected and authenticated. Versions pinned
 * for UCX take at most half the host pool together (a version would
 * otherwise wait for room that its own pins hold): one that does not fit, a
 * partial holding or a swarm seed is refused with a reason, and the puller
 * reads it over TCP. The UCX worker is created at the first UCX_OPEN.
 * Retiring a version ends it for UCX at once (`revoke`): every connection
 * that opened it is closed, which unmaps it (on verbs the NIC refuses its
 * keys from then on) and releases the pins. A puller sees its connection
 * close, closes its UCX endpoint (failing any get still waiting: UCX 1.13's
 * software transports leave a get of an unmapped range unanswered), and its
 * reconnection hears ERR_WEIGHTS_RETIRED.
 */
import { AgentError } from '../../core/errors.ts'
import type { UcxMapping, UcxWorker } from '../../native/index.ts'
import type { PinnedBytes, StateManager } from '../state/state-manager.ts'
import type { UcxOpenReply } from './protocol.ts'
import type { WeightsManifest } from './version-store.ts'

/** What one connection has opened: released when it closes. */
export interface UcxOpened {
  reply: UcxOpenReply
  release(): void
}

/** A version pinned for UCX readers: its bytes and the connections that opened it. */
export interface UcxServedVersion { model: string, version: number, bytes: number, connections: number }

export interface UcxServe {
  /** This agent's UCP worker address (hex), what a puller connects to (UCX_ADDRESS). */
  address(): string
  /**
   * Pins and maps every tensor of `manifest` (a committed full version) for the connection that asked;
   * `revoked` closes that connection (its close releases the opening). ERR_UCX_UNAVAILABLE / ERR_TIER_FULL /
   * ERR_BAD_REQUEST with the reason otherwise.
   */
  open(manifest: WeightsManifest, revoked: () => void): Promise<UcxOpened>
  /** Revokes every opening of the versions `committed` says are not committed any more (retired). */
  revoke(committed: (model: string, version: number) => boolean): void
  /** The versions pinned for UCX now. */
  served(): UcxServedVersion[]
}

export function createUcxServe (components: { stateManager: StateManager, worker: () => UcxWorker }): UcxServe {
  const { stateManager: sm } = components
  /** Versions pinned for UCX now: their bytes and the connections' openings (each revoked by closing its connection). */
  const pinnedVersions = new Map<string, { model: string, version: number, bytes: number, connections: number, openings: Set<{ revoked: () => void }> }>()
  const pinnedBytes = (): number => [...pinnedVersions.values()].reduce((a, v) => a + v.bytes, 0)
  return {
    address: () => components.worker().address().toString('hex'),
    revoke (committed) {
      for (const entry of pinnedVersions.values()) {
        if (!committed(entry.model, entry.version)) for (const o of entry.openings) o.revoked()
      }
    },
    served: () => [...pinnedVersions.values()].map(e => ({ model: e.model, version: e.version, bytes: e.bytes, connections: e.connections })),
    async open (manifest, revoked) {
      if (manifest.partial !== undefined) throw new AgentError('ERR_BAD_REQUEST', `this agent holds only some slices of ${manifest.model} v${manifest.version}: read them over TCP`)
      if (manifest.tensors.some(t => t.bytes === 0)) throw new AgentError('ERR_BAD_REQUEST', `${manifest.model} v${manifest.version} has empty tensors, which UCX cannot map: read it over TCP`)
      const id = `${manifest.model}\u0000${manifest.version}`
      const budget = Math.floor(sm.availability().hostPool.totalBytes / 2)
      const held = pinnedVersions.get(id)
      if (held === undefined && pinnedBytes() + manifest.totalBytes > budget) {
        throw new AgentError('ERR_TIER_FULL', `${manifest.model} v${manifest.version} (${manifest.totalBytes} bytes) would be pinned whole for UCX, and versions pinned for UCX take at most half the host pool (${budget} bytes, ${pinnedBytes()} in use): read it over TCP`)
      }
      const entry = held ?? { model: manifest.model, version: manifest.version, bytes: manifest.totalBytes, connections: 0, openings: new Set() }
      entry.connections++
      pinnedVersions.set(id, entry)
      const worker = components.worker()
      const pins: PinnedBytes[] = []
      const mappings: UcxMapping[] = []
      const opening = { revoked }
      entry.openings.add(opening)
      let released = false
      const release = (): void => {
        if (released) return
        released = true
        entry.openings.delete(opening)
        for (const m of mappings) worker.unmap(m)
        for (const p of pins) p.release()
        if (--entry.connections === 0) pinnedVersions.delete(id)
      }
      try {
        const tensors: UcxOpenReply['tensors'] = []
        for (const t of manifest.tensors) {
          const pinned = await sm.readHost(t.key)
          pins.push(pinned)
          if (pinned.range.length !== t.bytes) throw new AgentError('ERR_INTERNAL', `${t.key} holds ${pinned.range.length} bytes, the manifest says ${t.bytes}`)
          const mapping = worker.map(pinned.range)
          mappings.push(mapping)
          tensors.push({ address: mapping.address.toString(), rkey: mapping.rkey.toString('hex') })
        }
        return { reply: { worker: worker.address().toString('hex'), tensors }, release }
      } catch (err) {
        release()
        throw err
      }
    },
  }
}
