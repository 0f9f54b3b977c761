/**
 * Fixtures for the native tests: shared-memory objects, a directory on a
 * real disk, and a child-process runner.
 */
import { execFileSync, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, statfsSync, unlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Test } from 'tap'
import { openSharedMemory, populateHostRange } from '../../native/index.ts'

const TMPFS_MAGIC = 0x01021994
const RAMFS_MAGIC = 0x858458f6

/** Creates /dev/shm/<unique name> with `bytes` of content and removes it after the test. */
export function makeShm (t: Test, bytes: Uint8Array | number): string {
  const name = `agentd-test-${process.pid}-${Math.random().toString(36).slice(2)}`
  const data = typeof bytes === 'number' ? new Uint8Array(bytes) : bytes
  writeFileSync(`/dev/shm/${name}`, data)
  t.teardown(() => rmSync(`/dev/shm/${name}`, { force: true }))
  return name
}

/** A fresh directory on a disk filesystem (not tmpfs/ramfs), removed after the test. */
export function diskDir (t: Test): string {
  for (const base of ['/var/tmp', tmpdir()]) {
    const type = statfsSync(base).type
    if (type === TMPFS_MAGIC || type === RAMFS_MAGIC) continue
    const dir = mkdtempSync(join(base, 'agentd-native-test-'))
    t.teardown(() => rmSync(dir, { recursive: true, force: true }))
    return dir
  }
  throw new Error('no disk-backed temporary directory (/var/tmp and the tmpdir are memory filesystems)')
}

/**
 * A directory whose filesystem rejects O_DIRECT: a ramfs mounted for the test
 * (needs root). Returns null with the reason when none can be had.
 */
export function noDirectIoDir (t: Test): { dir: string | null, reason: string } {
  if (process.getuid?.() !== 0) return { dir: null, reason: 'mounting a ramfs needs root' }
  const dir = mkdtempSync(join(tmpdir(), 'agentd-ramfs-'))
  const mount = spawnSync('mount', ['-t', 'ramfs', 'ramfs', dir], { encoding: 'utf8' })
  if (mount.status !== 0) {
    rmSync(dir, { recursive: true, force: true })
    return { dir: null, reason: `mount -t ramfs failed: ${mount.stderr.trim()}` }
  }
  t.teardown(() => {
    execFileSync('umount', [dir])
    rmSync(dir, { recursive: true, force: true })
  })
  return { dir, reason: '' }
}

/** Deterministic pseudo-random bytes (xorshift32), so failures reproduce. */
export function patternBytes (length: number, seed: number): Buffer {
  const out = Buffer.allocUnsafe(length)
  let x = seed >>> 0 || 1
  for (let i = 0; i < length; i++) {
    x ^= x << 13
    x >>>= 0
    x ^= x >>> 17
    x ^= x << 5
    x >>>= 0
    out[i] = x & 0xff
  }
  return out
}

export function removeQuietly (path: string): void {
  try {
    unlinkSync(path)
  } catch {}
}

/** Whether this kernel has MADV_POPULATE_WRITE (Linux >= 5.14): populateHostRange resolves false, allocating nothing, without it. */
export async function kernelHasPopulateWrite (): Promise<boolean> {
  const name = `agentd_populate_probe_${process.pid}`
  writeFileSync(`/dev/shm/${name}`, new Uint8Array(4096))
  try {
    const shm = openSharedMemory(name)
    try { return await populateHostRange(shm.range(0, 4096)) } finally { shm.close() }
  } finally { rmSync(`/dev/shm/${name}`, { force: true }) }
}
