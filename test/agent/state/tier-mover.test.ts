// Spilling and promotion alone: a real pool and a real NVMe tier, entries built by hand, no StateManager.
import t, { type Test } from 'tap'
import { pino } from 'pino'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { createHostPool, type Extent } from '../../../native/index.ts'
import { parseKey } from '../../../agent/state/keys.ts'
import { createNvmeTier, type NvmeTier } from '../../../agent/state/nvme-tier.ts'
import { createHostSpace } from '../../../agent/state/host-space.ts'
import { createTierMover, type TierMover } from '../../../agent/state/tier-mover.ts'
import { newStoredEntry, pinEntry, type StoredEntry } from '../../../agent/state/stored-entry.ts'
import type { UseHint } from '../../../agent/state/spill-order.ts'
import { createSpillQueue } from '../../../agent/state/spill-queue.ts'
import { diskDir } from '../../native/helpers.ts'

const KiB = 1024
const logger = pino({ level: 'silent' })

/**
 * `paced`: wired as the StateManager wires it (allocation starts background spilling above the high
 * watermark and, when the pool is full, waits for it: makeRoom); otherwise allocation spills exactly
 * what it needs. `onFree` sees every pool extent freed; `puts` counts the NVMe puts issued in each tick.
 */
async function setup (t: Test, poolBytes = 1024 * KiB, options: { paced?: boolean, onFree?: (e: Extent) => void } = {}) {
  const realPool = await createHostPool({ sizeBytes: poolBytes, lock: false, hugePages: false, registerCuda: false })
  const pool = new Proxy(realPool, {
    get (target, prop) {
      if (prop === 'free') return (e: Extent) => { options.onFree?.(e); target.free(e) }
      const value = Reflect.get(target, prop, target) as unknown
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
  const dir = diskDir(t)
  const realNvme = createNvmeTier({ dir, capacityBytes: 16 * 1024 * KiB })
  await realNvme.open()
  const puts: number[] = []
  let sameTick = false
  const issued = (n: number): void => {
    if (!sameTick) { puts.push(0); sameTick = true; queueMicrotask(() => { sameTick = false }) }
    puts[puts.length - 1]! += n
  }
  const nvme: NvmeTier = {
    ...realNvme,
    put (key, src, checksum) { issued(1); return realNvme.put(key, src, checksum) },
    putAll (items) { issued(items.length); return realNvme.putAll(items) },
  }
  const background: Array<Promise<unknown>> = []
  t.teardown(async () => { await Promise.allSettled(background); await nvme.close(); pool.close() })
  const journal = join(dir, 'journal.log')
  const index = new Map<string, StoredEntry>()
  const counters = { spilled: 0, promoted: 0 }
  const queue = createSpillQueue({ index })
  const space = options.paced === true
    ? createHostSpace({ pool, nvme, spill: (bytes, keep) => mover.makeRoom(bytes, keep), pinnedPoolBytes: () => 0, allocated: () => mover.spillIfAboveWatermark() })
    : createHostSpace({ pool, nvme, spill: (bytes, keep) => mover.spill(bytes, keep), pinnedPoolBytes: () => 0 })
  const mover: TierMover = createTierMover({ spillHighWatermark: 0.9, spillLowWatermark: 0.5 },
    { logger, pool, nvme, space, index, queue, counters, track: work => { background.push(work) } })
  /** A pool key of `bytes` filled with `fill`, last used at `lastUseMs`. */
  const store = (name: string, bytes: number, fill: number, lastUseMs: number): StoredEntry => {
    const k = parseKey(`job/a/${name}:param@[0]/[${bytes}]:u8#v1`)
    const extent = pool.allocate(bytes)
    pool.view(extent).fill(fill, 0, bytes)
    const entry = newStoredEntry(k, extent, lastUseMs)
    index.set(k.text, entry)
    queue.update(entry)
    return entry
  }
  return { pool, nvme, index, queue, counters, mover, space, store, background, puts, journal, setHints: (h: UseHint[]) => { queue.setHints(h) } }
}

t.test('spill frees what is wanted in hint order, skipping pinned and kept keys; promote brings the bytes back', async t => {
  const { pool, nvme, counters, mover, store, setHints } = await setup(t)
  const old = store('old', 64 * KiB, 1, 1)
  const recent = store('recent', 64 * KiB, 2, 5)
  const soon = store('soon', 64 * KiB, 3, 0)
  const late = store('late', 64 * KiB, 4, 0)
  const pinned = store('pinned', 64 * KiB, 5, 0)
  const kept = store('kept', 64 * KiB, 6, 0)
  setHints([{ prefix: 'job/a/soon', atMs: 100 }, { prefix: 'job/a/late', atMs: 900 }])
  const unpin = pinEntry(pinned, () => {})
  const freed = await mover.spill(3 * 64 * KiB, new Set([kept.key.text]))
  unpin()
  t.equal(freed, 3 * 64 * KiB)
  t.same([old, recent, late].map(e => [e.host, e.onNvme]), [[undefined, true], [undefined, true], [undefined, true]],
    'unhinted keys first (oldest first), then the hint furthest away')
  t.ok(soon.host !== undefined && pinned.host !== undefined && kept.host !== undefined, 'the key needed soonest, the pinned and the kept key stay')
  t.equal(counters.spilled, 3)
  t.equal(nvme.get(old.key.text)?.bytes, 64 * KiB)

  await mover.promote(recent, new Set())
  t.ok(recent.host !== undefined)
  t.ok(pool.view(recent.host!).subarray(0, 64 * KiB).every(b => b === 2), 'bytes read back from NVMe')
  t.equal(counters.promoted, 1)
  t.equal(recent.onNvme, true, 'the NVMe copy stays: the key can be dropped from the pool for free')
})

t.test('a promoted copy that fails its checksum is refused and its extent freed', async t => {
  const { pool, mover, store, space } = await setup(t)
  const e = store('k', 64 * KiB, 7, 0)
  await mover.persist(e)
  t.equal(e.onNvme, true)
  pool.free(e.host!)
  e.host = undefined
  const used = space.usedBytes()
  e.checksum = (e.checksum! ^ 1) >>> 0
  await t.rejects(mover.promote(e, new Set()), { code: 'ERR_DATA_CORRUPT', message: /read back from NVMe with crc32c/ })
  t.equal(e.host, undefined)
  t.equal(space.usedBytes(), used, 'the extent read into was freed')
})

t.test('background spilling starts above the high watermark, once, and stops under the low one', async t => {
  const { pool, mover, store, background, space } = await setup(t, 640 * KiB)
  for (let i = 0; i < 9; i++) store(`k${i}`, 64 * KiB, i + 1, i)
  mover.spillIfAboveWatermark()
  t.equal(background.length, 0, '90% is not above the high watermark')
  store('k9', 64 * KiB, 10, 9)
  mover.spillIfAboveWatermark()
  mover.spillIfAboveWatermark()
  t.equal(background.length, 1, 'one background spill at a time')
  await background[0]
  t.equal(space.usedBytes(), 5 * 64 * KiB, 'down to the low watermark (50%)')
  t.ok(space.usedBytes() <= 0.5 * pool.sizeBytes)
})

t.test('a spill writes its victims to NVMe together and frees each pool copy only once its record is on disk', async t => {
  const byOffset = new Map<number, StoredEntry>()
  const freedBeforeDurable: string[] = []
  let journal = ''
  const { store, mover, nvme, puts, counters, ...rest } = await setup(t, 1024 * KiB, {
    onFree: e => {
      const entry = byOffset.get(e.offset)
      if (entry !== undefined && (nvme.get(entry.key.text) === undefined || !readFileSync(journal, 'utf8').includes(entry.key.text))) freedBeforeDurable.push(entry.key.text)
    },
  })
  journal = rest.journal
  const keys = Array.from({ length: 200 }, (_, i) => store(`k${i}`, 4 * KiB, i % 251, i))
  for (const e of keys) byOffset.set(e.host!.offset, e)
  t.equal(await mover.spill(150 * 4 * KiB), 150 * 4 * KiB)
  t.equal(counters.spilled, 150)
  t.same(keys.map(e => e.host === undefined), keys.map((_, i) => i < 150), 'the 150 least recently used')
  t.same(freedBeforeDurable, [], 'no pool copy freed before its NVMe copy and record were durable')
  t.same(puts, [150], 'one group: all 150 puts issued at once (one segment, one journal commit)')
})

t.test('allocation above the high watermark spills in the background, ahead of it, in groups (no key-at-a-time spills)', async t => {
  const { space, pool, index, queue, counters, puts, background } = await setup(t, 1024 * KiB, { paced: true })
  const keys = 4000 // 16x the pool
  for (let i = 0; i < keys; i++) {
    const extent = await space.allocate(4 * KiB, new Set())
    pool.view(extent).fill(i % 251, 0, 4 * KiB)
    const entry = newStoredEntry(parseKey(`job/a/p${i}:param@[0]/[${4 * KiB}]:u8#v1`), extent, i)
    index.set(entry.key.text, entry)
    queue.update(entry)
  }
  await Promise.allSettled(background)
  t.ok(counters.spilled >= keys - 256, `all but what fits spilled (${counters.spilled})`)
  t.ok(space.usedBytes() <= pool.sizeBytes)
  const small = puts.filter(n => n < 16).length
  t.comment(`${puts.length} groups, median ${[...puts].sort((a, b) => a - b)[puts.length >> 1]} keys, ${small} under 16 keys`)
  t.ok(puts.length <= keys / 32, `few groups (${puts.length}) for ${counters.spilled} keys`)
  t.ok(small <= puts.length / 10, 'hardly any small group')
})
