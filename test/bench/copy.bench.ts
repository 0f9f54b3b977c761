/**
 * Pool <-> shared-memory copy throughput of the addon's multi-threaded
 * copyHost against one plain single-threaded memcpy of the same bytes (the
 * addon's memcpyBaseline), measured alternately in the same run.
 * Goal: copyHost >= 0.9 x memcpy.
 * Also the CRC-32C a weight pull computes per received piece (4 MiB, one
 * thread, three interleaved SSE4.2 chains) against the same memcpy baseline:
 * a checksum slower than copying the bytes would cap a pull on few cores.
 *
 *   node_modules/.bin/node test/bench/copy.bench.ts [--mib 256] [--runs 7] [--threads 0]
 */
import { rmSync, writeFileSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { capabilities, checksum, copyHost, createHostPool, memcpyBaseline, openSharedMemory, type HostRange } from '../../native/index.ts'
import { gbPerSecond, MiB, report, timeSeconds } from './bench-stats.ts'

const { values } = parseArgs({
  options: {
    mib: { type: 'string', default: '256' },
    runs: { type: 'string', default: '7' },
    threads: { type: 'string', default: '0' },
  },
})
const bytes = Number(values.mib) * MiB
const runs = Number(values.runs)
const threads = Number(values.threads)

const shmName = `agentd-copy-bench-${process.pid}`
writeFileSync(`/dev/shm/${shmName}`, Buffer.alloc(bytes, 1)) // pre-faults the object's pages
const shm = openSharedMemory(shmName)
const pool = await createHostPool({ sizeBytes: bytes })
const extent = pool.allocate(bytes)
const poolRange: HostRange = pool.range(extent, 0, bytes)
const shmRange: HostRange = shm.range(0, bytes)

console.log(`copy ${values.mib} MiB, ${runs} runs, copyHost threads=${threads === 0 ? capabilities.cpuThreads : threads}` +
  ` (cores: ${capabilities.cpuThreads}), pool huge pages: ${pool.info().hugePages}`)

const directions: Array<[string, HostRange, HostRange]> = [
  ['shm -> pool', poolRange, shmRange],
  ['pool -> shm', shmRange, poolRange],
]
try {
  for (const [label, dst, src] of directions) {
    await memcpyBaseline(dst, src) // warm-up: faults, caches, thread start
    await copyHost(dst, src, { threads })
    const baseline: number[] = []
    const ours: number[] = []
    for (let run = 0; run < runs; run++) {
      baseline.push(gbPerSecond(bytes, await timeSeconds(() => memcpyBaseline(dst, src))))
      ours.push(gbPerSecond(bytes, await timeSeconds(() => copyHost(dst, src, { threads }))))
    }
    report(`${label}: memcpy, 1 thread (baseline)`, baseline)
    report(`${label}: copyHost`, ours, baseline)
  }
  const piece = 4 * MiB
  const checksumPieces = async (): Promise<void> => {
    for (let at = 0; at + piece <= bytes; at += piece) await checksum(pool.range(extent, at, piece), { threads: 1 })
  }
  const checksummed = Math.floor(bytes / piece) * piece
  const copies: number[] = []
  const crcs: number[] = []
  for (let run = 0; run < runs; run++) {
    copies.push(gbPerSecond(bytes, await timeSeconds(() => memcpyBaseline(shmRange, poolRange))))
    crcs.push(gbPerSecond(checksummed, await timeSeconds(checksumPieces)))
  }
  report(`crc32c (${capabilities.crc32c}): memcpy pool -> shm, 1 thread (baseline)`, copies)
  report('crc32c of the pool in 4 MiB pieces, 1 thread', crcs, copies)
} finally {
  shm.close()
  pool.close()
  rmSync(`/dev/shm/${shmName}`, { force: true })
}
