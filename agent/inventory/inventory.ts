/**
 * Node inventory (Nomad-style fingerprinting) through `systeminformation`:
 * CPUs, memory, disks and filesystems (with NVMe flag) and GPUs; network
 * interfaces from /sys (network-interfaces.ts). Missing hardware is a state,
 * not an error: on a node without GPUs the probe returns `gpus.detected =
 * false` with the reason. A GPU list from the config replaces detection.
 */
import { execFile } from 'node:child_process'
import { existsSync } from 'node:fs'
import { promisify } from 'node:util'
import si from 'systeminformation'
import type { GpuOverrideConfig } from './inventory-config.ts'
import type { GpuInventory, NodeInventory } from './schema.ts'
import { probeNetworkInterfaces } from './network-interfaces.ts'

export type { NodeInventory } from './schema.ts'

export interface InventoryOptions {
  hostname: string
  /** GPUs from the config; replaces detection when set. */
  gpuOverride?: GpuOverrideConfig[]
}

export async function probeInventory (options: InventoryOptions): Promise<NodeInventory> {
  const [cpu, mem, blocks, fs, network, gpus] = await Promise.all([
    si.cpu(), si.mem(), si.blockDevices(), si.fsSize(), probeNetworkInterfaces(), probeGpus(options.gpuOverride),
  ])
  return {
    hostname: options.hostname,
    cpu: { model: `${cpu.manufacturer} ${cpu.brand}`.trim(), cores: cpu.cores, physicalCores: cpu.physicalCores, sockets: cpu.processors },
    memory: { totalBytes: mem.total, availableBytes: mem.available },
    disks: blocks.filter(b => b.type === 'disk' && b.size > 0).map(d => ({
      name: d.name,
      device: d.device ?? `/dev/${d.name}`,
      model: d.model,
      sizeBytes: d.size,
      nvme: isNvme(d.name, d.protocol),
      rotational: d.physical === 'HDD' && !isNvme(d.name, d.protocol),
      mountPoints: blocks.filter(p => p.name.startsWith(d.name) && p.mount !== '').map(p => p.mount),
    })),
    filesystems: fs.map(f => ({ mountPoint: f.mount, fsType: f.type, device: f.fs, sizeBytes: f.size, availableBytes: f.available })),
    network,
    gpus,
    probedAtMs: Date.now(),
  }
}

export function isNvme (name: string, protocol: string | undefined): boolean {
  return name.startsWith('nvme') || (protocol ?? '').toLowerCase() === 'nvme'
}

async function probeGpus (override: GpuOverrideConfig[] | undefined): Promise<GpuInventory> {
  if (override !== undefined) {
    return { detected: override.length > 0, source: 'config', devices: override.map((g, index) => ({ index, ...g })) }
  }
  const graphics = await si.graphics()
  const nvidia = graphics.controllers.filter(c => /nvidia/i.test(c.vendor) || /nvidia/i.test(c.model))
  if (nvidia.length === 0) return { detected: false, source: 'detected', reason: noGpuReason(), devices: [] }
  const uuids = await nvidiaUuids()
  return {
    detected: true,
    source: 'detected',
    devices: nvidia.map((c, index) => ({
      index,
      model: c.model,
      memoryBytes: (c.memoryTotal ?? c.vram ?? 0) * 1024 * 1024,
      uuid: uuids.get(normalizePciBus(c.pciBus ?? '')) ?? '',
      pciBus: c.pciBus ?? c.busAddress ?? '',
    })),
  }
}

function noGpuReason (): string {
  if (!existsSync('/dev/nvidiactl')) return 'no NVIDIA GPU found: /dev/nvidiactl is absent (no driver loaded or no GPU on this node)'
  return 'no NVIDIA GPU reported by the driver (nvidia-smi lists none)'
}

/** PCI bus id → GPU UUID, from `nvidia-smi`; empty when it cannot run. */
async function nvidiaUuids (): Promise<Map<string, string>> {
  try {
    const { stdout } = await promisify(execFile)('nvidia-smi', ['--query-gpu=pci.bus_id,uuid', '--format=csv,noheader'], { timeout: 5000 })
    return parseNvidiaUuids(stdout)
  } catch {
    return new Map()
  }
}

export function parseNvidiaUuids (csv: string): Map<string, string> {
  const out = new Map<string, string>()
  for (const line of csv.split('\n')) {
    const [bus, uuid] = line.split(',').map(s => s.trim())
    if (bus && uuid) out.set(normalizePciBus(bus), uuid)
  }
  return out
}

/** "00000000:17:00.0" and "17:00.0" name the same device. */
export function normalizePciBus (bus: string): string {
  const m = /([0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])$/i.exec(bus.trim())
  return m !== null ? m[1]!.toLowerCase() : bus.trim().toLowerCase()
}
