/**
 * Durable keys at the counts users reach, in process (no API): drop and
 * restart recovery, each against a baseline measured in the same run, with
 * the event loop's lag while they run (what the API's answers wait for).
 *
 * For `--keys` (default 10000,50000) durable 4 KiB keys, offloaded with
 * durability "nvme" in 1,000-key batches:
 *
 * 1. Restart recovery: start() of a new StateManager on the NVMe directory
 *    (journal replay, segment files checked, journal rewritten, key index
 *    built), per 10k keys. Baseline: the I/O floor of the same directory,
 *    reading the journal whole and a readdir + stat of every segment file.
 * 2. Durable drop: drop({ prefix }) of every key, per 10k keys (one journal
 *    write for the batch). Baseline: the previous behaviour, keys dropped one
 *    by one (each waits for its own journal write), over 10k more keys of the
 *    same store.
 *
 * Event-loop lag: p99 and max of perf_hooks' event-loop delay (1 ms
 * resolution) while each runs. Each figure is the median of `--runs` runs;
 * the bracket lists the runs. The small host pool of the restarted manager
 * keeps its allocation out of the recovery figure.
 *
 *   node_modules/.bin/node test/bench/state-durable.bench.ts [--runs 3] [--keys 10000,50000] [--dir /var/tmp]
 */
import { rmSync } from 'node:fs'
import { readdir, readFile, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { pino } from 'pino'
import { createStateManager, type StateManager } from '../../agent/state/state-manager.ts'
import { median, MiB, timedWithLoopLag, type LoopLagTimed, stateBenchScratch } from './bench-stats.ts'

const { values } = parseArgs({ options: { runs: { type: 'string', default: '3' }, keys: { type: 'string', default: '10000,50000' }, dir: { type: 'string', default: '/var/tmp' } } })
const runs = Number(values.runs)
const counts = values.keys.split(',').map(Number)
const keyBytes = 4096
const batch = 1000
const baselineKeys = 10_000
const { dir, shm: src } = stateBenchScratch(values.dir, 'state-durable', batch * keyBytes)
const logger = pino({ level: 'silent' })

const manager = (nvmeDir: string, hostPoolBytes: number): StateManager => createStateManager({
  hostPoolBytes, lockHostPool: false, nvmeDir, nvmeCapacityBytes: 2 * (Math.max(...counts) + baselineKeys) * keyBytes, directIo: true,
  spillHighWatermark: 0.9, spillLowWatermark: 0.75, namespaceQuotaBytes: {}, prefetchHorizonMs: 0,
}, { logger })

const keyOf = (tag: string, i: number): string => `bench/durable/${tag}.k${i}:param@[0]/[${keyBytes}]:u8#v1`

async function offloadDurable (sm: StateManager, tag: string, count: number): Promise<void> {
  for (let first = 0; first < count; first += batch) {
    await sm.offload(Array.from({ length: Math.min(batch, count - first) }, (_, i) =>
      ({ key: keyOf(tag, first + i), source: { kind: 'shm' as const, name: src, offset: i * keyBytes } })), 'nvme')
  }
}

/** The I/O a recovery cannot avoid: the journal read whole, a readdir and a stat of each segment file. */
async function ioFloor (nvmeDir: string): Promise<void> {
  await readFile(join(nvmeDir, 'journal.log'))
  for (const name of await readdir(join(nvmeDir, 'objects'))) await stat(join(nvmeDir, 'objects', name))
}

type Series = Record<'recovery' | 'floor' | 'drop' | 'perKey', LoopLagTimed[]>
const results = new Map<number, Series>(counts.map(n => [n, { recovery: [], floor: [], drop: [], perKey: [] }]))

// Warm-up (JIT), not measured.
{
  const nvmeDir = join(dir, 'warm')
  const sm = manager(nvmeDir, 64 * MiB)
  await sm.start()
  await offloadDurable(sm, 'warm', 4 * batch)
  await sm.drop({ prefix: 'bench/durable/warm' })
  await sm.stop()
  rmSync(nvmeDir, { recursive: true, force: true })
}

for (let r = 0; r < runs; r++) {
  for (const n of counts) {
    const series = results.get(n)!
    const nvmeDir = join(dir, `n${n}-r${r}`)
    const first = manager(nvmeDir, Math.ceil((n + baselineKeys) * keyBytes / 0.85 / MiB) * MiB)
    await first.start()
    await offloadDurable(first, 'all', n)
    await offloadDurable(first, 'base', baselineKeys)
    await first.stop()

    series.floor.push(await timedWithLoopLag(() => ioFloor(nvmeDir)))
    const sm = manager(nvmeDir, 16 * MiB)
    series.recovery.push(await timedWithLoopLag(() => sm.start()))
    if (sm.recovery()!.recovered !== n + baselineKeys) throw new Error(`recovered ${sm.recovery()!.recovered} of ${n + baselineKeys} keys`)
    series.drop.push(await timedWithLoopLag(() => sm.drop({ prefix: 'bench/durable/all.' })))
    series.perKey.push(await timedWithLoopLag(async () => {
      for (let i = 0; i < baselineKeys; i++) await sm.drop({ keys: [keyOf('base', i)] })
    }))
    await sm.stop()
    rmSync(nvmeDir, { recursive: true, force: true })
  }
}

const per10k = (xs: LoopLagTimed[], keys: number): number[] => xs.map(x => x.ms * 10_000 / keys)
const runsOf = (xs: number[]): string => `[${xs.map(x => x.toFixed(1)).join(', ')}]`
const lagOf = (xs: LoopLagTimed[]): string => `event-loop lag p99 median ${median(xs.map(x => x.lagP99Ms)).toFixed(1)} ms, max median ${median(xs.map(x => x.lagMaxMs)).toFixed(1)} ms`
console.log(`Durable keys: ${counts.join(' and ')} keys of ${keyBytes / 1024} KiB (+${baselineKeys} for the per-key baseline), ${runs} runs, NVMe dir ${dir}`)
for (const n of counts) {
  const s = results.get(n)!
  const keys = n + baselineKeys
  const recovery = per10k(s.recovery, keys)
  const floor = per10k(s.floor, keys)
  const drop = per10k(s.drop, n)
  const perKey = per10k(s.perKey, baselineKeys)
  console.log(`${n} keys: restart recovery of ${keys} keys per 10k keys: median ${median(recovery).toFixed(1)} ms ${runsOf(recovery)}; ${lagOf(s.recovery)}`)
  console.log(`${n} keys: journal read + readdir + stat of the same files (I/O floor, baseline) per 10k keys: median ${median(floor).toFixed(1)} ms ${runsOf(floor)}`)
  console.log(`${n} keys: recovery / I/O floor: median ${(median(recovery) / median(floor)).toFixed(2)} x`)
  console.log(`${n} keys: durable drop per 10k keys: median ${median(drop).toFixed(1)} ms ${runsOf(drop)}; ${lagOf(s.drop)}`)
  console.log(`${n} keys: durable drop one key at a time (previous behaviour, baseline) per 10k keys: median ${median(perKey).toFixed(1)} ms ${runsOf(perKey)}; ${lagOf(s.perKey)}`)
  console.log(`${n} keys: batch / one at a time: median ${(median(drop) / median(perKey)).toFixed(3)} x`)
}
