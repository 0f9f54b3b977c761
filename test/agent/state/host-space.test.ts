// Pool allocation alone: a real (small) pool, a stub spill, no NVMe.
import t, { type Test } from 'tap'
import { createHostPool, type Extent, type HostPool } from '../../../native/index.ts'
import { createHostSpace } from '../../../agent/state/host-space.ts'

const KiB = 1024
const nvme = { usedBytes: () => 7, capacityBytes: 9 }

async function pool (t: Test, bytes = 64 * KiB): Promise<HostPool> {
  const p = await createHostPool({ sizeBytes: bytes, lock: false, hugePages: false, registerCuda: false })
  t.teardown(() => p.close())
  return p
}

t.test('allocates without spilling while the pool has room', async t => {
  const p = await pool(t)
  let spills = 0
  const space = createHostSpace({ pool: p, nvme, spill: async () => { spills++; return 0 }, pinnedPoolBytes: () => 0 })
  const extent = await space.allocate(16 * KiB, new Set())
  t.ok(extent.length >= 16 * KiB)
  t.equal(space.usedBytes(), extent.length)
  t.equal(spills, 0)
})

t.test('a full pool spills what is asked for, keeping the kept keys, then allocates', async t => {
  const p = await pool(t)
  const held = [p.allocate(32 * KiB), p.allocate(32 * KiB)]
  const asked: Array<[number, string[]]> = []
  const space = createHostSpace({
    pool: p,
    nvme,
    spill: async (want, keep) => { asked.push([want, [...keep]]); p.free(held.pop()!); return 32 * KiB },
    pinnedPoolBytes: () => 0,
  })
  const extent = await space.allocate(20 * KiB, new Set(['k1']))
  t.ok(extent.length >= 20 * KiB)
  t.same(asked, [[20 * KiB, ['k1']]], 'one spill of exactly the bytes wanted, with keep passed through')
})

t.test('nothing to spill and nothing in flight: ERR_TIER_FULL naming the NVMe figures', async t => {
  const p = await pool(t)
  p.allocate(64 * KiB)
  const space = createHostSpace({ pool: p, nvme, spill: async () => 0, pinnedPoolBytes: () => 0 })
  await t.rejects(space.allocate(KiB, new Set()), { code: 'ERR_TIER_FULL', message: /no room for 1024 bytes: .* \(NVMe 7 of 9 bytes used\)/ })
})

t.test('a full pool asks the caches to give memory back before it spills keys', async t => {
  const p = await pool(t)
  const cached = p.allocate(64 * KiB)
  const asked: string[] = []
  const space = createHostSpace({
    pool: p,
    nvme,
    spill: async () => { asked.push('spill'); return 0 },
    pinnedPoolBytes: () => 0,
    reclaim: want => { asked.push(`reclaim ${want}`); p.free(cached); return 64 * KiB },
  })
  const extent = await space.allocate(16 * KiB, new Set())
  t.ok(extent.length >= 16 * KiB)
  t.same(asked, [`reclaim ${16 * KiB}`], 'the cache gave way; no key was spilled')
})

t.test('more than the whole pool: ERR_TIER_FULL saying so, without spilling anything', async t => {
  const p = await pool(t)
  let spills = 0
  const space = createHostSpace({ pool: p, nvme, spill: async () => { spills++; return 0 }, pinnedPoolBytes: () => 0 })
  await t.rejects(space.allocate(64 * KiB + 1, new Set()), { code: 'ERR_TIER_FULL', message: 'no room for 65537 bytes: more than the whole host pool (65536 bytes); a key must fit the pool (state.hostPoolBytes), whatever NVMe holds' })
  t.equal(spills, 0, 'nothing spilled for an allocation that can never fit')
})

t.test('nothing to spill but a copy in flight: waits for it, then allocates', async t => {
  const p = await pool(t)
  const filling: Extent = p.allocate(64 * KiB)
  let pinned = 0
  const space = createHostSpace({ pool: p, nvme, spill: async () => 0, pinnedPoolBytes: () => pinned })
  const ended = space.filling(64 * KiB)
  let settled = false
  const waiting = space.allocate(8 * KiB, new Set()).finally(() => { settled = true })
  await new Promise(resolve => setImmediate(resolve))
  t.notOk(settled, 'waits while the fill holds the pool')
  // The fill fails: its extent is freed first, then the fill ends and wakes the waiter.
  p.free(filling)
  ended()
  ended()
  t.ok((await waiting).length >= 8 * KiB)

  // A pinned key is busy too (and the fill ended twice above counts once, or
  // this would fail at once); released() is the wake-up.
  const rest = p.allocate(p.fragmentation().freeBytes)
  pinned = 4 * KiB
  let secondSettled = false
  const second = space.allocate(8 * KiB, new Set()).finally(() => { secondSettled = true })
  await new Promise(resolve => setImmediate(resolve))
  t.notOk(secondSettled, 'waits while a key is pinned')
  p.free(rest)
  pinned = 0
  space.released()
  t.ok((await second).length >= 8 * KiB)
})
