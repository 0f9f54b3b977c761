/**
 * Node inventory (Nomad-style fingerprinting) through `systeminformation`:
 * CPUs, memory, disks and filesystems (with NVMe flag); network interfaces
 * from /sys (network-interfaces.ts); GPUs from the driver (nvidia-smi: index,
 * model, memory, UUID and PCI bus id as CUDA and the GPU sampler name them),
 * else, where nvidia-smi is missing or fails, from the PCI bus
 * (systeminformation), without UUIDs. Missing hardware is a state, not an
 * error: on a node without GPUs the probe returns `gpus.detected = false`
 * with the reason. A GPU list from the config replaces detection.
 */
import { execFile } from 'node:child_process'
import { existsSync } from 'node:fs'
import { promisify } from 'node:util'
import si from 'systeminformation'
import type { GpuOverrideConfig } from './inventory-config.ts'
import type { GpuDevice, GpuInventory, NodeInventory } from './schema.ts'
import { probeNetworkInterfaces } from './network-interfaces.ts'

export type { NodeInventory } from './schema.ts'

export interface InventoryOptions {
  hostname: string
  /** GPUs from the config; replaces detection when set. */
  gpuOverride?: GpuOverrideConfig[]
  /** The nvidia-smi executable GPUs are detected with (default: nvidia-smi on PATH). */
  nvidiaSmiCommand?: string
}

export async function probeInventory (options: InventoryOptions): Promise<NodeInventory> {
  const [cpu, mem, blocks, fs, network, gpus] = await Promise.all([
    si.cpu(), si.mem(), si.blockDevices(), si.fsSize(), probeNetworkInterfaces(), probeGpus(options.gpuOverride, options.nvidiaSmiCommand ?? 'nvidia-smi'),
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

async function probeGpus (override: GpuOverrideConfig[] | undefined, nvidiaSmi: string): Promise<GpuInventory> {
  if (override !== undefined) {
    return { detected: override.length > 0, source: 'config', devices: override.map((g, index) => ({ index, ...g })) }
  }
  const listed = await nvidiaSmiGpus(nvidiaSmi)
  if ('devices' in listed && listed.devices.length > 0) return { detected: true, source: 'detected', devices: listed.devices }
  // No answer from the driver: what the PCI bus shows (lspci), without UUIDs.
  const graphics = await si.graphics()
  const nvidia = graphics.controllers.filter(c => /nvidia/i.test(c.vendor) || /nvidia/i.test(c.model))
  if (nvidia.length === 0) return { detected: false, source: 'detected', reason: noGpuReason('error' in listed ? listed.error : undefined), devices: [] }
  return {
    detected: true,
    source: 'detected',
    devices: nvidia.map((c, index) => ({
      index,
      model: c.model,
      memoryBytes: (c.memoryTotal ?? c.vram ?? 0) * 1024 * 1024,
      uuid: '',
      pciBus: c.pciBus ?? c.busAddress ?? '',
    })),
  }
}

function noGpuReason (nvidiaSmiError: string | undefined): string {
  if (!existsSync('/dev/nvidiactl')) return 'no NVIDIA GPU found: /dev/nvidiactl is absent (no driver loaded or no GPU on this node)'
  return nvidiaSmiError !== undefined
    ? `no NVIDIA GPU listed: /dev/nvidiactl exists but nvidia-smi failed (${nvidiaSmiError})`
    : 'no NVIDIA GPU reported by the driver (nvidia-smi lists none)'
}

const nvidiaSmiInventoryQuery = ['--query-gpu=index,name,memory.total,uuid,pci.bus_id', '--format=csv,noheader,nounits']

/** The driver's GPUs, in index order; `error` when nvidia-smi is missing or fails. */
async function nvidiaSmiGpus (command: string): Promise<{ devices: GpuDevice[] } | { error: string }> {
  try {
    const { stdout } = await promisify(execFile)(command, nvidiaSmiInventoryQuery, { timeout: 10_000 })
    return { devices: parseNvidiaSmiGpus(stdout) }
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string }
    return { error: e.code === 'ENOENT' ? `${command} not found` : (e.stderr?.trim().split('\n')[0] || e.message) }
  }
}

/**
 * Rows of `nvidia-smi --query-gpu=index,name,memory.total,uuid,pci.bus_id
 * --format=csv,noheader,nounits` ("0, NVIDIA H200, 143771, GPU-…,
 * 00000000:00:06.0"; memory in MiB, "[N/A]" read as 0), sorted by index. A
 * row that does not parse is left out.
 */
export function parseNvidiaSmiGpus (csv: string): GpuDevice[] {
  const out: GpuDevice[] = []
  for (const line of csv.split('\n')) {
    const fields = line.split(',').map(f => f.trim())
    if (fields.length < 5) continue
    const index = Number(fields[0])
    const [memoryMiB, uuid, pciBus] = fields.slice(-3) as [string, string, string]
    if (!Number.isInteger(index) || index < 0 || pciBus === '') continue
    const memory = Number(memoryMiB)
    out.push({ index, model: fields.slice(1, -3).join(', '), memoryBytes: Number.isFinite(memory) && memory > 0 ? memory * 2 ** 20 : 0, uuid: uuid.startsWith('GPU-') ? uuid : '', pciBus })
  }
  return out.sort((a, b) => a.index - b.index)
}
