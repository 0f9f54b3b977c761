// The data server's read window over a real StateManager whose keys are only on NVMe (written
// durably, then the StateManager restarted): READs of one key's chunks share reads, nothing is
// promoted, the window stays within its bytes, kept chunks pin nothing, and host copies are read in place.
import t, { type Test } from 'tap'
import { join } from 'node:path'
import { viewHostRange } from '../../../native/index.ts'
import { createStateManager, type StateManager } from '../../../agent/state/state-manager.ts'
import { createServeReadWindow } from '../../../agent/weights/serve-read-window.ts'
import { weightsKey } from '../../../agent/weights/version-store.ts'
import { diskDir } from '../../native/helpers.ts'
import { logger, MiB, tensor } from './weights-fixtures.ts'

const chunk = 256 * 1024
const pool = 4 * MiB

async function stateManager (dir: string): Promise<StateManager> {
  const sm = createStateManager({
    hostPoolBytes: pool, lockHostPool: false, nvmeDir: join(dir, 'nvme'), nvmeCapacityBytes: 64 * MiB, directIo: true,
    spillHighWatermark: 0.95, spillLowWatermark: 0.8, namespaceQuotaBytes: {}, prefetchHorizonMs: 1000,
  }, { logger })
  await sm.start()
  return sm
}

/** A StateManager holding `keys` (each `bytes` long, seeded bytes) only on NVMe: stored durably by one StateManager, recovered by the next. */
async function nvmeOnly (t: Test, keys: string[], bytes: number): Promise<{ sm: StateManager, data: Buffer[] }> {
  const dir = diskDir(t)
  const data = keys.map((_, i) => tensor('x', 'u8', [bytes], i + 1).data)
  const writer = await stateManager(dir)
  for (const [i, key] of keys.entries()) {
    const scratch = await writer.scratch(bytes)
    scratch.view.set(data[i]!)
    await writer.adopt(key, scratch)
    await writer.persist([key])
  }
  await writer.stop()
  const sm = await stateManager(dir)
  t.teardown(() => sm.stop())
  return { sm, data }
}

const keyOf = (i: number, bytes: number): string => weightsKey('m', `t${i}`, 'u8', [bytes], 1)

t.test('READs of NVMe-only chunks: one read shared by concurrent READs, nothing promoted, read-ahead, bounded', async t => {
  const bytes = 3 * MiB // 12 chunks; the key alone is 3/4 of the pool
  const { sm, data } = await nvmeOnly(t, [keyOf(0, 3 * MiB)], bytes)
  const key = keyOf(0, bytes)
  t.same(sm.residency('weights/').keys.map(k => k.tier), ['nvme'], 'recovered keys are on NVMe only')
  const window = createServeReadWindow({ windowBytes: MiB, readAheadChunks: 2 }, { stateManager: sm })

  // Four pullers ask for chunk 3 at once: one read.
  const reads = await Promise.all(Array.from({ length: 4 }, () => window.read(key, bytes, 3 * chunk, 4 * chunk, chunk)))
  for (const r of reads) {
    t.equal(r.at, 3 * chunk)
    t.ok(Buffer.from(viewHostRange(r.range)).equals(data[0]!.subarray(3 * chunk, 4 * chunk)), 'the chunk\'s bytes')
  }
  for (const r of reads) r.release()
  t.equal(window.stats().shared, 3, 'three READs used the first one\'s read')
  t.equal(window.stats().readAheads, 2, 'chunks 4 and 5 read ahead')

  // The next chunks were read ahead: served from the window.
  const next = await window.read(key, bytes, 4 * chunk + 100, 4 * chunk + 200, chunk)
  t.equal(next.at, 4 * chunk)
  t.ok(Buffer.from(viewHostRange(next.range)).subarray(100, 200).equals(data[0]!.subarray(4 * chunk + 100, 4 * chunk + 200)), 'an unaligned READ inside a kept chunk')
  next.release()
  ;(await window.read(key, bytes, 5 * chunk, 6 * chunk, chunk)).release()
  t.equal(window.stats().shared, 5, 'chunks 4 and 5 came from the read-ahead')
  const counters = sm.residency().counters
  t.equal(counters.promoted, 0, 'nothing promoted into the pool')
  t.equal(counters.rangeReadBytes, 3 * chunk, 'three chunks read from NVMe: the demand one and two ahead')

  // Walking the whole key keeps at most the window's bytes (1 MiB: 4 chunks) once each READ is released.
  for (let c = 0; c < bytes / chunk; c++) {
    const r = await window.read(key, bytes, c * chunk, (c + 1) * chunk, chunk)
    t.ok(Buffer.from(viewHostRange(r.range)).equals(data[0]!.subarray(c * chunk, (c + 1) * chunk)), `chunk ${c}`)
    r.release()
    t.ok(window.stats().heldBytes <= MiB, `window holds ${window.stats().heldBytes} bytes after chunk ${c} (bound ${MiB})`)
  }
  t.equal(sm.residency().counters.promoted, 0, 'still nothing promoted')
  t.same(sm.residency('weights/').keys.map(k => k.tier), ['nvme'], 'the key is still on NVMe only')

  // A READ spanning several chunks (a sliced READ's covering range) reads exactly those.
  const span = await window.read(key, bytes, chunk + 5, 3 * chunk - 5, chunk)
  t.equal(span.at, chunk)
  t.equal(span.range.length, 2 * chunk)
  t.ok(Buffer.from(viewHostRange(span.range)).equals(data[0]!.subarray(chunk, 3 * chunk)))

  // Kept chunks pin nothing: the key drops at once (a READ in use still holds its own copy).
  t.equal(await sm.drop({ keys: [key] }), 1, 'dropped while the window keeps chunks and a READ holds one')
  t.ok(Buffer.from(viewHostRange(span.range)).equals(data[0]!.subarray(chunk, 3 * chunk)), 'the READ in use keeps its bytes')
  span.release()
  window.clear()
  t.equal(window.stats().heldBytes, 0, 'clear() frees every kept chunk')
  await t.rejects(window.read(key, bytes, 0, chunk, chunk), { code: 'ERR_KEY_NOT_FOUND' }, 'a dropped key is not found, not served from a kept chunk')
})

t.test('kept chunks leave once idle; a READ past the key fails and keeps nothing', async t => {
  const bytes = MiB
  const { sm } = await nvmeOnly(t, [keyOf(1, MiB)], bytes)
  const key = keyOf(1, bytes)
  const window = createServeReadWindow({ windowBytes: MiB, readAheadChunks: 0, idleMs: 50 }, { stateManager: sm })
  ;(await window.read(key, bytes, 0, chunk, chunk)).release()
  t.equal(window.stats().heldBytes, chunk)
  await new Promise(resolve => setTimeout(resolve, 200))
  t.equal(window.stats().heldBytes, 0, 'an idle window frees its chunks')
  await t.rejects(window.read(key, bytes + chunk, bytes, bytes + chunk, chunk), { code: 'ERR_OUT_OF_RANGE' }, 'a covering range past the key')
  t.equal(window.stats().heldBytes, 0, 'the failed read keeps nothing')
  window.clear()
})

t.test('a key with a host copy is read in place: no copy, nothing kept, pinned while in use', async t => {
  const dir = diskDir(t)
  const sm = await stateManager(dir)
  t.teardown(() => sm.stop())
  const bytes = MiB
  const data = tensor('x', 'u8', [bytes], 9).data
  const scratch = await sm.scratch(bytes)
  scratch.view.set(data)
  await sm.adopt(keyOf(2, bytes), scratch)
  const window = createServeReadWindow({ windowBytes: MiB }, { stateManager: sm })
  const r = await window.read(keyOf(2, bytes), bytes, chunk, 2 * chunk, chunk)
  t.ok(Buffer.from(viewHostRange(r.range)).equals(data.subarray(chunk, 2 * chunk)))
  t.equal(window.stats().heldBytes, 0, 'nothing kept for a host copy')
  t.equal(window.stats().readAheads, 0, 'nothing read ahead for a host copy')
  t.equal(sm.residency().counters.rangeReadBytes, 0, 'nothing read from NVMe')
  let dropped = false
  const drop = sm.drop({ keys: [keyOf(2, bytes)] }).then(n => { dropped = true; return n })
  await new Promise(resolve => setTimeout(resolve, 50))
  t.notOk(dropped, 'a drop waits for the READ in use')
  r.release()
  t.equal(await drop, 1)
  window.clear()
})

t.test('kept chunks give way when the pool is full: an allocation takes them before it would fail', async t => {
  const bytes = 3 * MiB
  const { sm } = await nvmeOnly(t, [keyOf(3, bytes)], bytes)
  const key = keyOf(3, bytes)
  const window = createServeReadWindow({ windowBytes: 2 * MiB, readAheadChunks: 0 }, { stateManager: sm })
  for (let c = 0; c < 8; c++) (await window.read(key, bytes, c * chunk, (c + 1) * chunk, chunk)).release()
  t.equal(window.stats().heldBytes, 2 * MiB, 'the window keeps 2 MiB of the 4 MiB pool')
  // Nothing else in the pool can spill: 3 MiB fit only if the window lets go of what it keeps.
  const scratch = await sm.scratch(3 * MiB)
  t.ok(window.stats().heldBytes <= MiB, `the window gave back what the allocation needed (${window.stats().heldBytes} bytes kept)`)
  scratch.release()
  window.clear()
  // Unregistered: a full pool with nothing to spill fails as before, and the cleared window is not asked.
  const held = await sm.scratch(3 * MiB)
  await t.rejects(sm.scratch(2 * MiB), { code: 'ERR_TIER_FULL' })
  held.release()
})
