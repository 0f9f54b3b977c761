/**
 * Builds and publishes this agent's availability record: on change (changes
 * within publishDebounceMs become one record) and as a heartbeat, each
 * publication with the next `seq`, so a peer that missed a message is current
 * again one heartbeat later.
 *
 * The heartbeat period grows with the cluster: heartbeatIntervalMs up to
 * heartbeatMembersPerInterval live members, then proportionally more
 * (heartbeatPeriodMs), so every agent receives about that many heartbeat
 * records per heartbeatIntervalMs whatever the cluster's size — gossip cost
 * per agent stays flat instead of growing with N. Changes are not delayed by
 * it; only the repair of a lost message is (20 agents: 6.7 s at the defaults).
 *
 * The record's base comes from the node (name, addresses, CPU, memory, load,
 * GPUs from the inventory, preemptible flag); subsystems add their sections
 * through contributors (`addContributor`) and call `changed()` when those
 * change — the StateManager its host pool / NVMe free bytes and resident
 * namespaces, the weights agent its served versions and data address.
 */
import { availableParallelism, loadavg, totalmem, freemem } from 'node:os'
import { readFileSync } from 'node:fs'
import type { NodeInventory } from '../agent/inventory/inventory.ts'
import type { AvailabilityRecord, GpuAvailability } from './mesh-messages.ts'
import type { StateAvailability } from '../agent/state/state-manager.ts'
import type { GpuSample } from '../agent/inventory/gpu-sampler.ts'

/** Live members per heartbeatIntervalMs before the heartbeat period starts to grow. */
export const heartbeatMembersPerInterval = 6

/** The heartbeat period for `liveMembers` members (module comment). */
export function heartbeatPeriodMs (heartbeatIntervalMs: number, liveMembers: number): number {
  return Math.round(heartbeatIntervalMs * Math.max(1, liveMembers / heartbeatMembersPerInterval))
}

/** Record sections a subsystem may contribute. */
export type AvailabilitySections = Partial<Pick<AvailabilityRecord, 'gpus' | 'hostPool' | 'nvme' | 'resident' | 'weights' | 'election'>> & {
  /** Weight data plane address, host:port. */
  weightsAddress?: string
}

export interface AvailabilityContributor {
  /** Who contributes (for logs). */
  name: string
  /** Called at every publication; must be cheap and must not throw. */
  collect(): AvailabilitySections
}

export interface AvailabilityPublisherOptions {
  node: string
  preemptible: boolean
  heartbeatIntervalMs: number
  publishDebounceMs: number
}

export interface AvailabilityPublisherComponents {
  self: string
  /** Live members of the cluster, this agent included (scales the heartbeat). Default: 1. */
  liveMembers?(): number
  /** This agent's announced mesh multiaddrs. */
  addresses(): string[]
  incarnation(): number
  inventory(): NodeInventory | undefined
  /** Signs and publishes; rejections are logged by the caller. */
  publish(record: AvailabilityRecord): Promise<void>
  log: { warn(obj: object, msg: string): void }
}

export interface AvailabilityPublisher {
  start(options: { signal: AbortSignal }): void
  stop(): void
  /** Something in the record changed: publish within publishDebounceMs. */
  changed(): void
  /** Publish now (refutation, leave): resolves when handed to the mesh. */
  publishNow(): Promise<void>
  addContributor(contributor: AvailabilityContributor): void
  /** The last record published, if any. */
  current(): AvailabilityRecord | undefined
}

export function createAvailabilityPublisher (options: AvailabilityPublisherOptions, components: AvailabilityPublisherComponents): AvailabilityPublisher {
  const contributors: AvailabilityContributor[] = []
  let seq = 0
  let last: AvailabilityRecord | undefined
  let heartbeat: NodeJS.Timeout | undefined
  let debounce: NodeJS.Timeout | undefined
  let running = false

  const build = (): AvailabilityRecord => {
    const record: AvailabilityRecord = {
      kind: 'record',
      from: components.self,
      node: options.node,
      incarnation: components.incarnation(),
      seq: ++seq,
      publishedAtMs: Date.now(),
      addresses: { mesh: components.addresses() },
      preemptible: options.preemptible,
      cpu: { cores: availableParallelism(), loadAvg1: Math.round(loadavg()[0]! * 100) / 100 },
      memory: { totalBytes: totalmem(), availableBytes: memAvailableBytes() },
      gpus: gpusFromInventory(components.inventory()),
    }
    for (const c of contributors) {
      try {
        const { weightsAddress, ...sections } = c.collect()
        Object.assign(record, sections)
        if (weightsAddress !== undefined) record.addresses.weights = weightsAddress
      } catch (err) {
        components.log.warn({ contributor: c.name, err }, 'availability contributor failed; its section is left out')
      }
    }
    return record
  }

  const publish = async (): Promise<void> => {
    if (debounce !== undefined) { clearTimeout(debounce); debounce = undefined }
    last = build()
    armHeartbeat()
    await components.publish(last)
  }

  const armHeartbeat = (): void => {
    if (heartbeat !== undefined) clearTimeout(heartbeat)
    if (!running) return
    heartbeat = setTimeout(() => { void publish().catch(() => {}) }, heartbeatPeriodMs(options.heartbeatIntervalMs, components.liveMembers?.() ?? 1))
    heartbeat.unref()
  }

  return {
    start ({ signal }) {
      running = true
      signal.addEventListener('abort', () => this.stop(), { once: true })
      void publish().catch(() => {})
    },
    stop () {
      running = false
      if (heartbeat !== undefined) clearTimeout(heartbeat)
      if (debounce !== undefined) clearTimeout(debounce)
    },
    changed () {
      if (!running || debounce !== undefined) return
      debounce = setTimeout(() => { debounce = undefined; void publish().catch(() => {}) }, options.publishDebounceMs)
      debounce.unref()
    },
    publishNow: publish,
    addContributor (c) { contributors.push(c) },
    current: () => last,
  }
}

/** Most namespaces a record lists (the schema's bound); the rest are left out, sorted order decides. */
export const maxResidentNamespaces = 1024

/** The StateManager's record sections: host pool and NVMe tier free bytes, resident namespaces. */
export function stateSections (a: StateAvailability): AvailabilitySections {
  return { hostPool: a.hostPool, nvme: a.nvme, resident: a.namespaces.slice(0, maxResidentNamespaces) }
}

/**
 * The GPUs of the inventory with their latest sample (agent/inventory/gpu-sampler.ts,
 * in inventory order); without one, free memory, health and holder are unknown.
 */
export function gpusFromInventory (inventory: NodeInventory | undefined, samples: readonly GpuSample[] = []): GpuAvailability[] {
  return (inventory?.gpus.devices ?? []).map((g, i) => ({
    index: g.index,
    model: g.model,
    uuid: g.uuid,
    memoryTotalBytes: g.memoryBytes,
    memoryFreeBytes: samples[i]?.memoryFreeBytes ?? null,
    health: samples[i]?.health ?? 'unknown',
    inUse: samples[i]?.inUse ?? null,
  }))
}

function memAvailableBytes (): number {
  try {
    const kb = /^MemAvailable:\s+(\d+) kB/m.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1]
    if (kb !== undefined) return Number(kb) * 1024
  } catch { /* not Linux */ }
  return freemem()
}
