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
 * it; only the repair of a lost message is (20 agents: 33 s at the defaults, about
 * the state sync's period, which repairs it too).
 *
 * Every publication fits the receivers' bound (fitRecord): a record larger
 * than maxRecordBytes would be dropped by every peer as oversized and the
 * agent would vanish from their views, so the least important entries are
 * cut (resident namespaces, then weight versions, then rollout instances, then GPUs; within a
 * section, the last ones) and the record says how many in `truncated`.
 *
 * The record's base comes from the node (name, addresses, CPU, memory, load,
 * GPUs from the inventory, preemptible flag); subsystems add their sections
 * through contributors (`addContributor`) and call `changed()` when those
 * change — the StateManager its host pool / NVMe free bytes and resident
 * namespaces, the weights agent its served versions and data address.
 */
import { availableParallelism, loadavg, totalmem, freemem } from 'node:os'
import { readFileSync } from 'node:fs'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { AvailabilityRecordSchema, type AvailabilityRecord, type GpuAvailability } from './mesh-messages.ts'
import { envelopeHeaderBytes, meshMessageSchemaError } from './signed-envelope.ts'
import { heartbeatPeriodMs } from './heartbeat-period.ts'

/**
 * What the record reads of the node inventory: its GPUs, in inventory order.
 * Declared here so mesh/ does not import the daemon; agent/inventory's
 * NodeInventory satisfies it.
 */
export interface InventoryGpus {
  gpus: { devices: ReadonlyArray<{ index: number, model: string, uuid: string, memoryBytes: number }> }
}

/** The latest sample of one GPU (agent/inventory/gpu-sampler.ts's GpuSample satisfies it). */
export interface GpuReading {
  /** Bytes; null when unknown. */
  memoryFreeBytes: number | null
  health: GpuAvailability['health']
  /** A compute process holds the GPU; null when unknown. */
  inUse: boolean | null
}

/** The StateManager's tiers and namespaces (agent/state's StateAvailability satisfies it). */
export interface StateTiersAvailability {
  hostPool: { totalBytes: number, freeBytes: number }
  nvme: { totalBytes: number, freeBytes: number }
  /** Namespaces with at least one stored key, sorted. */
  namespaces: string[]
}


/** Record sections a subsystem may contribute. */
export type AvailabilitySections = Partial<Pick<AvailabilityRecord, 'gpus' | 'hostPool' | 'nvme' | 'resident' | 'weights' | 'rollout' | 'election'>> & {
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
  /** Largest signed message receivers accept, bytes (mesh.maxRecordBytes); records are cut to fit. */
  maxRecordBytes: number
}

export interface AvailabilityPublisherComponents {
  self: string
  /** Live members of the cluster, this agent included (scales the heartbeat). Default: 1. */
  liveMembers?(): number
  /** This agent's announced mesh multiaddrs. */
  addresses(): string[]
  incarnation(): number
  inventory(): InventoryGpus | undefined
  /** Signs and publishes; rejections are logged by the caller. */
  publish(record: AvailabilityRecord): Promise<void>
  log: { warn(obj: object, msg: string): void, error(obj: object, msg: string): void }
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
  /** What the last publication left out, to log a change once instead of at every heartbeat. */
  let lastCut = ''

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
    const fitted = fitRecord(build(), options.maxRecordBytes)
    armHeartbeat()
    if (!fitted.ok) {
      components.log.error({ bytes: fitted.bytes, maxRecordBytes: options.maxRecordBytes, reason: fitted.reason }, 'availability record not published: peers would reject it')
      return
    }
    const cut = JSON.stringify(fitted.record.truncated ?? {})
    if (cut !== lastCut) {
      lastCut = cut
      if (fitted.record.truncated !== undefined) components.log.warn({ leftOut: fitted.record.truncated, bytes: fitted.bytes, maxRecordBytes: options.maxRecordBytes }, 'availability record cut to fit mesh.maxRecordBytes')
    }
    last = fitted.record
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

/** The StateManager's record sections: host pool and NVMe tier free bytes, resident namespaces (bounded by fitRecord). */
export function stateSections (a: StateTiersAvailability): AvailabilitySections {
  return { hostPool: a.hostPool, nvme: a.nvme, resident: a.namespaces }
}

/** The sections fitRecord may cut, least important first. */
export const cutOrder = ['resident', 'weights', 'rollout', 'gpus'] as const
type CutSection = typeof cutOrder[number]

interface SectionRule { maxItems: number, entry: { Check(value: unknown): boolean } }
const sectionRule = (schema: { maxItems?: number, items: Parameters<typeof TypeCompiler.Compile>[0] }): SectionRule =>
  ({ maxItems: schema.maxItems ?? Infinity, entry: TypeCompiler.Compile(schema.items) })
/** Per section: the schema's entry bound and a check of one entry (the schema receivers apply). */
const sectionRules: Record<CutSection, SectionRule> = {
  resident: sectionRule(AvailabilityRecordSchema.properties.resident),
  weights: sectionRule(AvailabilityRecordSchema.properties.weights),
  rollout: sectionRule(AvailabilityRecordSchema.properties.rollout),
  gpus: sectionRule(AvailabilityRecordSchema.properties.gpus),
}

export type FitResult =
  | { ok: true, record: AvailabilityRecord, /** signed message size */ bytes: number }
  | { ok: false, bytes: number, reason: string }

/**
 * `record` as receivers with a `maxBytes` bound (mesh.maxRecordBytes, which
 * covers the envelope) accept it: entries the schema would reject (too many,
 * too long a name) are left out, then, while the signed message would be too
 * large, entries from the end of the sections in cutOrder; `truncated` counts
 * what was left out per section. Not ok when even the record without those
 * sections' entries is too large, or breaks the schema elsewhere: such a
 * record must not be published. Pure; `record` is not modified.
 */
export function fitRecord (record: AvailabilityRecord, maxBytes: number): FitResult {
  const out: AvailabilityRecord = { ...record }
  delete out.truncated
  const leftOut: Partial<Record<CutSection, number>> = {}
  const sections = out as unknown as Partial<Record<CutSection, unknown[]>>
  for (const section of cutOrder) {
    const entries = sections[section]
    if (entries === undefined) continue
    const rule = sectionRules[section]
    const kept = entries.filter(e => rule.entry.Check(e)).slice(0, rule.maxItems)
    sections[section] = kept
    if (kept.length < entries.length) leftOut[section] = entries.length - kept.length
  }
  const budget = maxBytes - envelopeHeaderBytes
  const size = (): number => {
    if (Object.keys(leftOut).length > 0) out.truncated = { ...leftOut }
    return Buffer.byteLength(JSON.stringify(out))
  }
  let bytes = size()
  for (const section of cutOrder) {
    const entries = sections[section]
    while (bytes > budget && entries !== undefined && entries.length > 0) {
      // Cut enough from the end to cover the excess, then measure again (the counts themselves take a few bytes).
      let excess = bytes - budget
      let n = 0
      while (excess > 0 && n < entries.length) {
        excess -= Buffer.byteLength(JSON.stringify(entries[entries.length - 1 - n])) + 1
        n++
      }
      entries.length -= n
      leftOut[section] = (leftOut[section] ?? 0) + n
      bytes = size()
    }
  }
  bytes += envelopeHeaderBytes
  if (bytes > maxBytes) return { ok: false, bytes, reason: `${bytes} bytes even with ${cutOrder.join(', ')} emptied` }
  const schemaError = meshMessageSchemaError(out)
  if (schemaError !== undefined) return { ok: false, bytes, reason: `schema: ${schemaError}` }
  return { ok: true, record: out, bytes }
}

/**
 * The GPUs of the inventory with their latest sample (agent/inventory/gpu-sampler.ts,
 * in inventory order); without one, free memory, health and holder are unknown.
 */
export function gpusFromInventory (inventory: InventoryGpus | undefined, samples: readonly GpuReading[] = []): GpuAvailability[] {
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
