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

export interface UcxServe {
  /** This agent's UCP worker address (hex), what a puller connects to (UCX_ADDRESS). */
  address(): string
  /** Pins and maps every tensor of `manifest` (a committed full version); ERR_UCX_UNAVAILABLE / ERR_TIER_FULL / ERR_BAD_REQUEST with the reason otherwise. */
  open(manifest: WeightsManifest): Promise<UcxOpened>
}

export function createUcxServe (components: { stateManager: StateManager, worker: () => UcxWorker }): UcxServe {
  const { stateManager: sm } = components
  /** Versions pinned for UCX now: their bytes and how many connections opened them. */
  const pinnedVersions = new Map<string, { bytes: number, connections: number }>()
  const pinnedBytes = (): number => [...pinnedVersions.values()].reduce((a, v) => a + v.bytes, 0)
  return {
    address: () => components.worker().address().toString('hex'),
    async open (manifest) {
      if (manifest.partial !== undefined) throw new AgentError('ERR_BAD_REQUEST', `this agent holds only some slices of ${manifest.model} v${manifest.version}: read them over TCP`)
      if (manifest.tensors.some(t => t.bytes === 0)) throw new AgentError('ERR_BAD_REQUEST', `${manifest.model} v${manifest.version} has empty tensors, which UCX cannot map: read it over TCP`)
      const id = `${manifest.model}\u0000${manifest.version}`
      const budget = Math.floor(sm.availability().hostPool.totalBytes / 2)
      const held = pinnedVersions.get(id)
      if (held === undefined && pinnedBytes() + manifest.totalBytes > budget) {
        throw new AgentError('ERR_TIER_FULL', `${manifest.model} v${manifest.version} (${manifest.totalBytes} bytes) would be pinned whole for UCX, and versions pinned for UCX take at most half the host pool (${budget} bytes, ${pinnedBytes()} in use): read it over TCP`)
      }
      const entry = held ?? { bytes: manifest.totalBytes, connections: 0 }
      entry.connections++
      pinnedVersions.set(id, entry)
      const worker = components.worker()
      const pins: PinnedBytes[] = []
      const mappings: UcxMapping[] = []
      let released = false
      const release = (): void => {
        if (released) return
        released = true
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
