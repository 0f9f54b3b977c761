/**
 * Samples what the inventory cannot know once at start: each GPU's free
 * memory, health and whether a compute process holds it, from `nvidia-smi`
 * every intervalMs (the mesh record carries the latest sample).
 *
 * Contract:
 * - A GPU is matched to the inventory by UUID, else by index.
 * - health "ok": nvidia-smi reported it with readable values; "failed": it is
 *   missing from the output, reports an error value ("[GPU is lost]",
 *   "ERR!", "[Unknown Error]"), or nvidia-smi itself failed (non-zero exit,
 *   timeout) although it exists; "unknown": never sampled, or nvidia-smi is
 *   not installed (GPUs from the config on a machine without the driver) —
 *   said once in the log, never guessed.
 * - `onChange` fires when a GPU's health or holder changes, or its free
 *   memory moves by more than changeThresholdBytes, so the record is
 *   re-published at once rather than at the next heartbeat.
 */
import { execFile } from 'node:child_process'
import type { Logger } from 'pino'
import type { GpuDevice } from './schema.ts'

export type GpuHealth = 'ok' | 'unknown' | 'failed'

export interface GpuSample {
  memoryFreeBytes: number | null
  health: GpuHealth
  /** A compute process holds the GPU; null when unknown. */
  inUse: boolean | null
}

export interface GpuSamplerOptions {
  /** The nvidia-smi executable (PATH lookup for a bare name). */
  command: string
  intervalMs: number
  /** Timeout of one nvidia-smi run, ms. */
  timeoutMs: number
}

export interface GpuSampler {
  start(options: { signal: AbortSignal }): void
  stop(): void
  /** The latest sample for each inventory GPU, in inventory order. */
  samples(): GpuSample[]
}

export const changeThresholdBytes = 1024 ** 3
const mib = 1024 * 1024
const errorValue = /\[GPU is lost\]|ERR!|\[Unknown Error\]/

/** One row of `--query-gpu=index,uuid,memory.free --format=csv,noheader,nounits`. */
export interface GpuRow { index: number, uuid: string, memoryFreeBytes: number | null, failed: boolean }

export function parseGpuRows (csv: string): GpuRow[] {
  const rows: GpuRow[] = []
  for (const line of csv.split('\n')) {
    if (line.trim() === '') continue
    const [index, uuid, free] = line.split(',').map(s => s.trim())
    if (index === undefined || !/^\d+$/.test(index)) continue
    const failed = errorValue.test(line)
    const freeMiB = free !== undefined && /^\d+(\.\d+)?$/.test(free) ? Number(free) : null
    // "[N/A]" / "[Not Supported]" free memory (unified-memory parts) is unknown, not a failure.
    rows.push({ index: Number(index), uuid: uuid ?? '', memoryFreeBytes: freeMiB === null ? null : Math.round(freeMiB * mib), failed })
  }
  return rows
}

/** UUIDs of GPUs with a compute process, from `--query-compute-apps=gpu_uuid,pid --format=csv,noheader`. */
export function parseBusyUuids (csv: string): Set<string> {
  const busy = new Set<string>()
  for (const line of csv.split('\n')) {
    const uuid = line.split(',')[0]?.trim()
    if (uuid?.startsWith('GPU-')) busy.add(uuid)
  }
  return busy
}

/** Matches a sample to each inventory GPU (contract above). */
export function samplesFor (devices: readonly GpuDevice[], rows: readonly GpuRow[], busy: ReadonlySet<string> | null): GpuSample[] {
  return devices.map(d => {
    const row = rows.find(r => d.uuid !== '' && r.uuid === d.uuid) ?? (d.uuid === '' ? rows.find(r => r.index === d.index) : undefined)
    if (row === undefined || row.failed) return { memoryFreeBytes: row?.memoryFreeBytes ?? null, health: 'failed', inUse: null }
    return { memoryFreeBytes: row.memoryFreeBytes, health: 'ok', inUse: busy === null ? null : busy.has(row.uuid) }
  })
}

export function createGpuSampler (options: GpuSamplerOptions, components: { devices: readonly GpuDevice[], logger: Logger, onChange(): void }): GpuSampler {
  const { devices, logger } = components
  let current: GpuSample[] = devices.map(() => ({ memoryFreeBytes: null, health: 'unknown', inUse: null }))
  let timer: NodeJS.Timeout | undefined
  let running = false
  let missingSaid = false

  const run = (args: string[]): Promise<string> => new Promise((resolve, reject) => {
    execFile(options.command, args, { timeout: options.timeoutMs }, (err, stdout) => err !== null ? reject(err) : resolve(stdout))
  })

  const sample = async (): Promise<GpuSample[]> => {
    try {
      const [gpus, apps] = await Promise.all([
        run(['--query-gpu=index,uuid,memory.free', '--format=csv,noheader,nounits']),
        run(['--query-compute-apps=gpu_uuid,pid', '--format=csv,noheader']).catch(() => null),
      ])
      return samplesFor(devices, parseGpuRows(gpus), apps === null ? null : parseBusyUuids(apps))
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
        if (!missingSaid) logger.warn({ command: options.command }, 'GPU sampling: nvidia-smi not found; free memory and health stay unknown')
        missingSaid = true
        return devices.map(() => ({ memoryFreeBytes: null, health: 'unknown', inUse: null }))
      }
      logger.warn({ err: (err as Error).message }, 'GPU sampling: nvidia-smi failed; GPUs reported failed')
      return devices.map(() => ({ memoryFreeBytes: null, health: 'failed', inUse: null }))
    }
  }

  const changed = (a: GpuSample, b: GpuSample): boolean => a.health !== b.health || a.inUse !== b.inUse ||
    (a.memoryFreeBytes === null) !== (b.memoryFreeBytes === null) ||
    Math.abs((a.memoryFreeBytes ?? 0) - (b.memoryFreeBytes ?? 0)) > changeThresholdBytes

  const tick = async (): Promise<void> => {
    const next = await sample()
    if (!running) return
    const different = next.some((s, i) => changed(s, current[i]!))
    current = next
    if (different) components.onChange()
    timer = setTimeout(() => { void tick() }, options.intervalMs)
    timer.unref()
  }

  return {
    start ({ signal }) {
      if (devices.length === 0 || running) return
      running = true
      signal.addEventListener('abort', () => this.stop(), { once: true })
      void tick()
    },
    stop () {
      running = false
      clearTimeout(timer)
    },
    samples: () => current,
  }
}
