/**
 * The StateManager at the key counts users reach, in process (no API), each
 * figure against a baseline measured in the same run:
 *
 * 1. Spill: offload `--keys` 4 KiB keys in 1,000-key batches into a pool
 *    that holds a tenth of them (so nine in ten spill to NVMe) vs into a pool
 *    that fits them all. Batch latency p50 / p99 / max of each. Goal: the
 *    spilling run's max within 4x of the fitting run's (spilling costs about
 *    the same per key however many keys are resident: no per-allocation sort
 *    of every key, no fsync per key).
 * 2. Fragmentation: a pool holding `--keys` keys, every other one dropped
 *    (`--keys`/2 holes of 4 KiB), then 1,000-key batches into the holes, vs
 *    the same count of keys offloaded into a pool without holes. Goal: within
 *    2x (allocation does not scan the free list).
 *
 * 3. Onload back: after each run of 1, `--keys`/100 keys (the first ones,
 *    which the spilling run moved to NVMe) onloaded in 1,000-key batches,
 *    from NVMe vs from the fitting run's host pool: the cost per key of
 *    reading a spilled key back (what a job's context switch-in pays per
 *    spilled tensor).
 *
 * The event loop's lag p99 while each run offloads (what API answers wait for).
 *
 * Default watermarks (0.9 / 0.75). Each figure is the median of `--runs`
 * runs; the bracket lists the runs.
 *
 *   node_modules/.bin/node test/bench/state-scale.bench.ts [--runs 3] [--keys 100000] [--dir /var/tmp]
 */
import { rmSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { setImmediate as yieldLoop } from 'node:timers/promises'
import { pino } from 'pino'
import { createStateManager, type StateManager } from '../../agent/state/state-manager.ts'
import { median, MiB, percentile, timedWithLoopLag, stateBenchScratch } from './bench-stats.ts'

const { values } = parseArgs({ options: { runs: { type: 'string', default: '3' }, keys: { type: 'string', default: '100000' }, dir: { type: 'string', default: '/var/tmp' } } })
const runs = Number(values.runs)
const keyCount = Number(values.keys)
const keyBytes = 4096
const batch = 1000
const batches = Math.ceil(keyCount / batch)
const measuredBatches = 10
const { dir, shm: src } = stateBenchScratch(values.dir, 'state-scale', batch * keyBytes)
const logger = pino({ level: 'silent' })
let managers = 0

async function startManager (hostPoolBytes: number): Promise<{ sm: StateManager, stop: () => Promise<void> }> {
  const nvmeDir = join(dir, `nvme-${managers++}`)
  const sm = createStateManager({
    hostPoolBytes, lockHostPool: false, nvmeDir, nvmeCapacityBytes: 4 * keyCount * keyBytes, directIo: true,
    spillHighWatermark: 0.9, spillLowWatermark: 0.75, namespaceQuotaBytes: {}, prefetchHorizonMs: 5000,
  }, { logger })
  await sm.start()
  return { sm, stop: async () => { await sm.stop(); rmSync(nvmeDir, { recursive: true, force: true }) } }
}

const keyOf = (tag: string, i: number): string => `bench/scale/${tag}.k${i}:param@[0]/[${keyBytes}]:u8#v1`
const items = (tag: string, first: number) =>
  Array.from({ length: batch }, (_, i) => ({ key: keyOf(tag, first + i), source: { kind: 'shm' as const, name: src, offset: i * keyBytes } }))

/** Offloads keys `first`.. in 1,000-key batches, `count` batches; each batch's latency, ms. */
async function offloadBatches (sm: StateManager, tag: string, first: number, count: number): Promise<number[]> {
  const ms: number[] = []
  for (let b = 0; b < count; b++) {
    const batchItems = items(tag, first + b * batch)
    const start = process.hrtime.bigint()
    await sm.offload(batchItems)
    ms.push(Number(process.hrtime.bigint() - start) / 1e6)
    await yieldLoop() // one API request each: the event loop turns between them
  }
  return ms
}

/** Onloads keys `first`.. in 1,000-key batches, `count` batches, into the scratch memory; each batch's latency, ms, and the keys read from NVMe. */
async function onloadBatches (sm: StateManager, tag: string, first: number, count: number): Promise<{ ms: number[], fromNvme: number }> {
  const ms: number[] = []
  let fromNvme = 0
  for (let b = 0; b < count; b++) {
    const batchItems = Array.from({ length: batch }, (_, i) => ({ key: keyOf(tag, first + b * batch + i), target: { kind: 'shm' as const, name: src, offset: i * keyBytes } }))
    const start = process.hrtime.bigint()
    const results = await sm.onload(batchItems)
    ms.push(Number(process.hrtime.bigint() - start) / 1e6)
    fromNvme += results.filter(r => r.fromTier === 'nvme').length
    await yieldLoop()
  }
  return { ms, fromNvme }
}
const onloadBatchCount = Math.max(1, Math.floor(keyCount / 100 / batch))

const fitsAllBytes = Math.ceil(keyCount * keyBytes / 0.85 / MiB) * MiB
const tenthBytes = Math.max(MiB, Math.ceil(keyCount * keyBytes / 10 / MiB) * MiB)

// Warm-up (JIT), not measured.
{
  const { sm, stop } = await startManager(16 * MiB)
  await offloadBatches(sm, 'warm', 0, 8)
  await stop()
}

const spill = { p50: [] as number[], p99: [] as number[], max: [] as number[], spilled: [] as number[], lagP99: [] as number[], onload: [] as number[], fromNvme: [] as number[] }
const fit = { p50: [] as number[], p99: [] as number[], max: [] as number[], lagP99: [] as number[], onload: [] as number[], fromNvme: [] as number[] }
const frag = { holes: [] as number[], fresh: [] as number[], fragmentation: [] as number[], freeExtents: [] as number[] }
for (let r = 0; r < runs; r++) {
  {
    const { sm, stop } = await startManager(fitsAllBytes)
    let ms: number[] = []
    fit.lagP99.push((await timedWithLoopLag(async () => { ms = await offloadBatches(sm, `fit${r}`, 0, batches) })).lagP99Ms)
    fit.p50.push(median(ms)); fit.p99.push(percentile(ms, 99)); fit.max.push(Math.max(...ms))
    const back = await onloadBatches(sm, `fit${r}`, 0, onloadBatchCount)
    fit.onload.push(median(back.ms)); fit.fromNvme.push(back.fromNvme)
    await stop()
  }
  {
    const { sm, stop } = await startManager(tenthBytes)
    let ms: number[] = []
    spill.lagP99.push((await timedWithLoopLag(async () => { ms = await offloadBatches(sm, `spill${r}`, 0, batches) })).lagP99Ms)
    spill.p50.push(median(ms)); spill.p99.push(percentile(ms, 99)); spill.max.push(Math.max(...ms))
    spill.spilled.push(sm.residency('bench/none').counters.spilled)
    const back = await onloadBatches(sm, `spill${r}`, 0, onloadBatchCount)
    spill.onload.push(median(back.ms)); spill.fromNvme.push(back.fromNvme)
    await stop()
  }
  {
    // Same resident count, same pool: only the shape of the free space differs.
    const { sm, stop } = await startManager(fitsAllBytes)
    await offloadBatches(sm, `fresh${r}`, 0, batches / 2)
    frag.fresh.push(median(await offloadBatches(sm, `fresh${r}`, keyCount, measuredBatches)))
    await stop()
  }
  {
    const { sm, stop } = await startManager(fitsAllBytes)
    await offloadBatches(sm, `holes${r}`, 0, batches)
    await sm.drop({ keys: Array.from({ length: keyCount / 2 }, (_, i) => keyOf(`holes${r}`, 2 * i)) })
    const pool = sm.residency('bench/none').hostPool
    frag.fragmentation.push(pool.fragmentation)
    frag.holes.push(median(await offloadBatches(sm, `holes${r}`, keyCount, measuredBatches)))
    await stop()
  }
}

const fmt = (xs: number[], digits = 1): string => `median ${median(xs).toFixed(digits)} ms`
const runsOf = (xs: number[], digits = 1): string => `[${xs.map(x => x.toFixed(digits)).join(', ')}]`
console.log(`StateManager at scale: ${keyCount} keys of ${keyBytes / 1024} KiB in ${batch}-key batches, ${runs} runs, NVMe dir ${dir}`)
console.log(`offload into a pool that fits them all (${fitsAllBytes / MiB} MiB, baseline): batch p50 ${fmt(fit.p50)} ${runsOf(fit.p50)}  p99 ${fmt(fit.p99)}  max ${fmt(fit.max)} ${runsOf(fit.max)}`)
console.log(`offload into a pool holding a tenth (${tenthBytes / MiB} MiB, ~${Math.round(median(spill.spilled))} keys spilled): batch p50 ${fmt(spill.p50)} ${runsOf(spill.p50)}  p99 ${fmt(spill.p99)}  max ${fmt(spill.max)} ${runsOf(spill.max)}`)
console.log(`event-loop lag p99 while offloading: fitting median ${median(fit.lagP99).toFixed(1)} ms ${runsOf(fit.lagP99)}, spilling median ${median(spill.lagP99).toFixed(1)} ms ${runsOf(spill.lagP99)}`)
console.log(`spilling / fitting batch latency: p50 median ${(median(spill.p50) / median(fit.p50)).toFixed(2)} x  max median ${(median(spill.max) / median(fit.max)).toFixed(2)} x (goal max <= 4)`)
const perKeyUs = (xs: number[]): string => `${(median(xs) * 1000 / batch).toFixed(1)} µs per key`
console.log(`onload ${onloadBatchCount * batch} keys back in ${batch}-key batches: from the host pool (baseline; ${median(fit.fromNvme)} from NVMe) batch ${fmt(fit.onload)} ${runsOf(fit.onload)} = ${perKeyUs(fit.onload)}; from NVMe (${median(spill.fromNvme)} of them) batch ${fmt(spill.onload)} ${runsOf(spill.onload)} = ${perKeyUs(spill.onload)}; NVMe / host ${(median(spill.onload) / median(fit.onload)).toFixed(2)} x`)
console.log(`offload ${batch} keys into a pool of ${keyCount / 2} resident keys, no holes (baseline): ${fmt(frag.fresh)} ${runsOf(frag.fresh)}`)
console.log(`offload ${batch} keys into ${keyCount / 2} 4 KiB holes (every other key dropped; reported fragmentation ${median(frag.fragmentation).toFixed(3)}): ${fmt(frag.holes)} ${runsOf(frag.holes)}`)
console.log(`holes / no holes: median ${(median(frag.holes) / median(frag.fresh)).toFixed(2)} x (goal <= 2)`)
