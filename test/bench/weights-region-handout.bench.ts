/**
 * What allocating a region's pages at hand-out costs the trainer's wait
 * (publisher.ts "Region lifecycle": the hand-out awaits MADV_POPULATE_WRITE
 * so a /dev/shm or memory limit fails there, not as a SIGBUS in the trainer).
 * Interleaved in every run: hand-out with the pages allocated, and with the
 * allocation skipped (what the trainer waited before; its first writes then
 * take the faults). Medians of 7 runs.
 * Usage: node test/bench/weights-region-handout.bench.ts [MiB]
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pino } from 'pino'
import { createStateManager } from '../../agent/state/state-manager.ts'
import { createPublisher } from '../../agent/weights/publisher.ts'
import { createVersionStore } from '../../agent/weights/version-store.ts'
import { median, MiB } from './bench-stats.ts'
const logger = pino({ level: 'silent' })
const dir = mkdtempSync(join(tmpdir(), 'agentd-wrh-'))
const sm = createStateManager({ hostPoolBytes: 8 * MiB, lockHostPool: false, nvmeDir: join(dir, 'nvme'), nvmeCapacityBytes: 64 * MiB, directIo: true, spillHighWatermark: 0.95, spillLowWatermark: 0.8, namespaceQuotaBytes: {}, prefetchHorizonMs: 1000 }, { logger })
await sm.start()
const versions = createVersionStore({ dir: join(dir, 'w'), retainVersions: 2 }, { stateManager: sm, logger })
await versions.load()
const mib = Number(process.argv[2] ?? 512)
const awaited = createPublisher({ chunkBytes: 4 * MiB, durable: false, owner: dir + 'a' }, { stateManager: sm, versions, logger })
const noPopulate = createPublisher({ chunkBytes: 4 * MiB, durable: false, owner: dir + 'b' }, { stateManager: sm, versions, logger, populate: async () => true })
const a: number[] = []; const b: number[] = []
for (let i = 0; i < 7; i++) {
  for (const [p, out] of [[awaited, a], [noPopulate, b]] as const) {
    const t0 = performance.now()
    const r = await p.createRegion('m', undefined, [{ name: 'w', dtype: 'u8', shape: [mib * MiB] }])
    out.push(performance.now() - t0)
    await p.discardRegion(r.region)
  }
}
console.log(`${mib} MiB hand-out: populate awaited median ${median(a).toFixed(1)} ms, without populate ${median(b).toFixed(1)} ms (7 runs)`)
await sm.stop()
rmSync(dir, { recursive: true, force: true })
