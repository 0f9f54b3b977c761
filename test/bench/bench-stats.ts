/**
 * Shared helpers of the benchmarks: timing, medians, GB/s, a process's CPU
 * time and resident memory. GB/s means 10^9 bytes per second.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { processMemory } from '../helpers/process-memory.ts'

export function median (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/** The p-th percentile (0..100), nearest rank. */
export function percentile (values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p / 100 * sorted.length) - 1))]!
}

/** Seconds an async operation took (monotonic clock). */
export async function timeSeconds (operation: () => Promise<unknown>): Promise<number> {
  const start = process.hrtime.bigint()
  await operation()
  return Number(process.hrtime.bigint() - start) / 1e9
}

/**
 * A StateManager bench's scratch: a temporary directory under `parent` and a
 * shared-memory object of `shmBytes` (filled, so its pages are faulted in)
 * to offload from; both are removed when the process exits.
 */
export function stateBenchScratch (parent: string, tag: string, shmBytes: number): { dir: string, shm: string } {
  const dir = mkdtempSync(join(parent, `agentd-${tag}-bench-`))
  const shm = `agentd-bench-${tag}-${process.pid}`
  writeFileSync(`/dev/shm/${shm}`, Buffer.alloc(shmBytes, 0x5a))
  process.once('exit', () => {
    rmSync(`/dev/shm/${shm}`, { force: true })
    rmSync(dir, { recursive: true, force: true })
  })
  return { dir, shm }
}

export interface LoopLagTimed { ms: number, lagP99Ms: number, lagMaxMs: number }

/** Runs `operation` with the event loop's delay monitored (1 ms resolution): its time and the lag's p99 and max. */
export async function timedWithLoopLag (operation: () => Promise<unknown>): Promise<LoopLagTimed> {
  const lag = monitorEventLoopDelay({ resolution: 1 })
  lag.enable()
  const start = performance.now()
  await operation()
  const ms = performance.now() - start
  lag.disable()
  return { ms, lagP99Ms: lag.percentile(99) / 1e6, lagMaxMs: lag.max / 1e6 }
}

export function gbPerSecond (bytes: number, seconds: number): number {
  return bytes / seconds / 1e9
}

/** One result line: the samples' median, all samples, and a ratio to a baseline median. */
export function report (label: string, samples: number[], baseline?: number[]): void {
  const m = median(samples)
  const ratio = baseline === undefined ? '' : `  ratio ${(m / median(baseline)).toFixed(3)}`
  console.log(`${label.padEnd(44)} median ${m.toFixed(2)} GB/s  [${samples.map((s) => s.toFixed(2)).join(', ')}]${ratio}`)
}

export const MiB = 2 ** 20

/** Clock ticks per second of /proc/<pid>/stat's times (USER_HZ, 100 on Linux). */
const clockTicksPerSecond = 100

/** User + system CPU time of a running process, seconds (/proc/<pid>/stat). */
export function processCpuSeconds (pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
  return (Number(fields[11]) + Number(fields[12])) / clockTicksPerSecond
}

/** Resident set size of a running process, bytes (VmRSS of /proc/<pid>/status). */
export function processRssBytes (pid: number): number {
  return processMemory(pid).now
}
