/** Resident memory of a process from /proc/<pid>/status, for tests and benchmarks that bound it. */
import { readFileSync } from 'node:fs'

/** Bytes: `peak` (VmHWM), `now` (VmRSS) and its anonymous, file-backed and shared parts. */
export interface ProcessMemory { peak: number, now: number, anon: number, file: number, shmem: number }

/**
 * The memory of process `pid` ('self': this one). The kernel updates VmHWM
 * lazily, so a later read may show a lower peak than an earlier one: keep the
 * highest read where the peak matters over time.
 */
export function processMemory (pid: number | 'self'): ProcessMemory {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kib = (field: string): number => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)![1]) * 1024
  return { peak: kib('VmHWM'), now: kib('VmRSS'), anon: kib('RssAnon'), file: kib('RssFile'), shmem: kib('RssShmem') }
}
