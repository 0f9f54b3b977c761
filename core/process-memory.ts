/**
 * This process's memory as the kernel splits its resident set
 * (/proc/self/status, Linux), so a report charges the agent with its own
 * memory and not with what it maps from its clients:
 *
 * - `ownBytes` (RssAnon): private memory: the V8 heap, native allocations,
 *   thread stacks, and the pinned host pool's pages once touched.
 * - `fileBytes` (RssFile): pages of mapped files: the Node.js binary, its
 *   libraries, the native addon (shared with every process that maps them).
 * - `sharedMemoryBytes` (RssShmem): shared memory mapped: the clients'
 *   /dev/shm objects the agent copies from or holds adopted (zero-copy
 *   weight regions), which the processes that created them count too.
 *
 * `rssBytes` is their sum (VmRSS). V8's `heapUsedBytes` counts every object
 * not yet collected, garbage included, out of `heapTotalBytes` reserved;
 * `externalBytes` is memory of Buffers and other objects outside the heap.
 * Where /proc/self/status has no such lines (not Linux) the split is
 * absent and `rssBytes` is Node's figure.
 */
import { readFileSync } from 'node:fs'

export interface ResidentSetSplit {
  ownBytes: number
  fileBytes: number
  sharedMemoryBytes: number
}

export interface ProcessMemory {
  rssBytes: number
  /** Absent where the kernel does not split the resident set. */
  split?: ResidentSetSplit
  heapUsedBytes: number
  heapTotalBytes: number
  externalBytes: number
}

/** The resident set of a /proc/<pid>/status text, or undefined when it lacks a field. */
export function parseResidentSet (status: string): (ResidentSetSplit & { rssBytes: number }) | undefined {
  const kib = (field: string): number | undefined => {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(status)
    return m === null ? undefined : Number(m[1]) * 1024
  }
  const [rssBytes, ownBytes, fileBytes, sharedMemoryBytes] = ['VmRSS', 'RssAnon', 'RssFile', 'RssShmem'].map(kib)
  if (rssBytes === undefined || ownBytes === undefined || fileBytes === undefined || sharedMemoryBytes === undefined) return undefined
  return { rssBytes, ownBytes, fileBytes, sharedMemoryBytes }
}

/** This process's memory now (reads /proc/self/status: a few microseconds). */
export function processMemory (): ProcessMemory {
  const node = process.memoryUsage()
  const heap = { heapUsedBytes: node.heapUsed, heapTotalBytes: node.heapTotal, externalBytes: node.external }
  let status = ''
  try {
    status = readFileSync('/proc/self/status', 'utf8')
  } catch {}
  const set = parseResidentSet(status)
  if (set === undefined) return { rssBytes: node.rss, ...heap }
  const { rssBytes, ...split } = set
  return { rssBytes, split, ...heap }
}
