// The StateManager at the key counts users reach, in process: what a batch costs must not grow with the
// number of keys resident (spilling) or with the number of holes in the pool (allocation). Complexity, not
// absolute times: batches are compared with batches of the same run (the first ones; or, for holes, the
// same batch in a pool without holes, measured in turn), and a spilling batch's figure is the lowest of
// three runs, so a hiccup of a shared machine (a stalled fsync, a GC) in one run does not decide.
import t, { type Test } from 'tap'
import { join } from 'node:path'
import { pino } from 'pino'
import { createStateManager, type StateManager } from '../../../agent/state/state-manager.ts'
import { diskDir, makeShm } from '../../native/helpers.ts'
import { median } from '../../bench/bench-stats.ts'

const MiB = 2 ** 20
const keyBytes = 4096
const batch = 1000
const logger = pino({ level: 'silent' })

async function manager (t: Test, hostPoolBytes: number): Promise<StateManager> {
  const dir = diskDir(t)
  const sm = createStateManager({
    hostPoolBytes, lockHostPool: false, nvmeDir: join(dir, 'nvme'), nvmeCapacityBytes: 1024 * MiB, directIo: true,
    spillHighWatermark: 0.9, spillLowWatermark: 0.75, namespaceQuotaBytes: {}, prefetchHorizonMs: 5000,
  }, { logger })
  await sm.start()
  t.teardown(() => sm.stop())
  return sm
}

const keyOf = (tag: string, i: number): string => `scale/${tag}.k${i}:param@[0]/[${keyBytes}]:u8#v1`

/** Offloads the 1,000 keys `tag`.k`first`..; ms. */
async function offloadBatch (sm: StateManager, shm: string, tag: string, first: number): Promise<number> {
  const items = Array.from({ length: batch }, (_, i) => ({ key: keyOf(tag, first + i), source: { kind: 'shm' as const, name: shm, offset: i * keyBytes } }))
  const start = process.hrtime.bigint()
  await sm.offload(items)
  return Number(process.hrtime.bigint() - start) / 1e6
}

/** Offloads `count` batches of fresh keys from key `first` on, untimed. */
async function fill (sm: StateManager, shm: string, tag: string, first: number, count: number): Promise<void> {
  for (let b = 0; b < count; b++) await offloadBatch(sm, shm, tag, first + b * batch)
}

const fmt = (xs: number[]): string => xs.map(x => x.toFixed(x < 10 ? 1 : 0)).join(' ')

t.test('20k keys of 4 KiB into a pool holding a tenth: batches cost the same as resident keys grow fivefold, a small factor of batches that spill nothing', async t => {
  const keys = 20_000
  const batches = keys / batch
  const shm = makeShm(t, batch * keyBytes)
  const runs: number[][] = []
  for (let run = 0; run < 3; run++) {
    const sm = await manager(t, keys * keyBytes / 10)
    const ms: number[] = []
    for (let b = 0; b < batches; b++) ms.push(await offloadBatch(sm, shm, `spill${run}`, b * batch))
    runs.push(ms)
    const r = sm.residency('scale/none')
    t.equal(sm.storedKeys().length, keys, `run ${run}: every key stored`)
    t.ok(r.counters.spilled >= 0.85 * keys, `run ${run}: nine in ten keys spilled to NVMe (${r.counters.spilled})`)
    t.ok(r.tiers.host.usedBytes <= keys * keyBytes / 10)
    await sm.stop()
  }
  // Each batch at its best of the runs. The pool fills during the fourth batch: the first three spill
  // nothing, every later one spills about as many keys as it stores.
  const best = runs[0]!.map((_, b) => Math.min(...runs.map(ms => ms[b]!)))
  const first = median(runs.flatMap(ms => ms.slice(0, 3)))
  const firstSpilling = median(best.slice(4, 8))
  t.comment(`first batches ${first.toFixed(1)} ms, first spilling ones ${firstSpilling.toFixed(1)} ms; each batch, lowest of ${runs.length} runs: ${fmt(best)}`)
  const slowest = Math.max(...best.slice(4))
  const spilling = median(best.slice(4))
  const early = median(best.slice(5, 9))
  const late = median(best.slice(-4))
  t.ok(slowest <= 4 * firstSpilling, `the slowest batch (${slowest.toFixed(0)} ms) within 4x of the first spilling ones as resident keys grow from 5k to 20k`)
  t.ok(late <= 2 * early, `spilling batches at 17k-20k resident keys (${late.toFixed(0)} ms) cost what they cost at 5k-9k (${early.toFixed(0)} ms)`)
  // Spilling a key costs about what storing it does (a checksum and a share of a group's write), not an fsync of its own.
  t.ok(spilling <= 4 * first, `a spilling batch (median ${spilling.toFixed(0)} ms) within 4x of one that spills nothing`)
})

t.test('allocation into 15k holes (every other key of 30k dropped) costs what it costs in a pool without holes', async t => {
  const keys = 30_000
  const shm = makeShm(t, batch * keyBytes)
  const poolBytes = 144 * MiB // holds them all under the high watermark: nothing spills
  const measured = 8
  const runs: number[][] = []
  for (let run = 0; run < 1; run++) {
    const holes = await manager(t, poolBytes)
    await fill(holes, shm, `holes${run}`, 0, keys / batch)
    t.equal(await holes.drop({ keys: Array.from({ length: keys / 2 }, (_, i) => keyOf(`holes${run}`, 2 * i)) }), keys / 2)
    t.equal(holes.residency('scale/none').hostPool.fragmentation, 0, `run ${run}: reported fragmentation 0: every hole fits the 4 KiB keys being stored`)
    // The same resident count in the same pool, without holes.
    const fresh = await manager(t, poolBytes)
    await fill(fresh, shm, `fresh${run}`, 0, keys / 2 / batch)
    const ratios: number[] = []
    for (let b = 0; b < measured; b++) {
      const intoHoles = await offloadBatch(holes, shm, `holes${run}`, keys + b * batch)
      ratios.push(intoHoles / await offloadBatch(fresh, shm, `fresh${run}`, keys + b * batch))
    }
    runs.push(ratios)
    const after = holes.residency('scale/none')
    t.equal(after.counters.spilled, 0)
    t.equal(after.tiers.host.usedBytes, (keys / 2 + measured * batch) * keyBytes)
    t.ok(after.hostPool.largestFreeBytes >= poolBytes - keys * keyBytes, 'the new keys went into holes, not the free tail')
    await holes.stop()
    await fresh.stop()
  }
  const ratios = runs[0]!
  t.comment(`1,000-key batch into holes / without holes: ${fmt(ratios)}`)
  // A bound on complexity, not the goal: test/bench/state-scale.bench.ts holds allocation into holes to
  // 2x on a quiet machine; under a parallel test run (another file's agents thrashing the caches) the
  // scattered holes measured up to 2.04x; an allocator that scans the holes costs more with each of the 15k.
  t.ok(median(ratios) <= 3, `within 3x (${median(ratios).toFixed(2)}x)`)
})
