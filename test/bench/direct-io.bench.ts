/**
 * Direct-I/O throughput of the addon's DirectFile (pool extent <-> file,
 * queueDepth chunks in flight on native threads) against fio with the same
 * block size, queue depth (libaio iodepth), file size and filesystem, both
 * with O_DIRECT and without a final fsync, runs alternating in one process.
 * Goal: >= 0.85 x fio for sequential write and read.
 *
 *   node_modules/.bin/node test/bench/direct-io.bench.ts [--dir /var/tmp] [--mib 1024] [--block-kib 1024] [--qd 8] [--runs 5]
 */
// bench-requires: fio (fio is the baseline; npm run bench checks this line)
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { createHostPool, openDirectFile, probeDirectIo } from '../../native/index.ts'
import { gbPerSecond, MiB, report, timeSeconds } from './bench-stats.ts'

const { values } = parseArgs({
  options: {
    dir: { type: 'string', default: '/var/tmp' },
    mib: { type: 'string', default: '1024' },
    'block-kib': { type: 'string', default: '1024' },
    qd: { type: 'string', default: '8' },
    runs: { type: 'string', default: '5' },
  },
})
const bytes = Number(values.mib) * MiB
const blockBytes = Number(values['block-kib']) * 1024
const queueDepth = Number(values.qd)
const runs = Number(values.runs)

const dir = mkdtempSync(join(values.dir, 'agentd-dio-bench-'))
const probe = probeDirectIo(dir)
console.log(`direct I/O ${values.mib} MiB file in ${values.dir}, block ${values['block-kib']} KiB, queue depth ${queueDepth}, ` +
  `${runs} runs; O_DIRECT: ${probe.directIo}, alignment ${probe.alignment} (${probe.alignmentSource})`)

/** fio's bandwidth for one sequential pass, GB/s. */
function fio (rw: 'write' | 'read', file: string): number {
  const out = execFileSync('fio', [
    '--name=agentd', `--filename=${file}`, `--rw=${rw}`, `--bs=${blockBytes}`, `--iodepth=${queueDepth}`,
    '--ioengine=libaio', '--direct=1', `--size=${bytes}`, '--output-format=json',
  ], { encoding: 'utf8' })
  const job = (JSON.parse(out) as { jobs: Array<Record<'read' | 'write', { bw_bytes: number }>> }).jobs[0]!
  return job[rw].bw_bytes / 1e9
}

const pool = await createHostPool({ sizeBytes: bytes })
const extent = pool.allocate(bytes)
const range = pool.range(extent, 0, bytes)
pool.view(extent).fill(0xa5)
const ours = openDirectFile(join(dir, 'agentd.bin'), { create: true })
const fioFile = join(dir, 'fio.bin')
const options = { queueDepth, blockBytes }
try {
  await ours.write(range, 0, options) // warm-up, and lays the files out
  fio('write', fioFile)
  const results: Record<string, number[]> = { oursWrite: [], fioWrite: [], oursRead: [], fioRead: [] }
  for (let run = 0; run < runs; run++) {
    results.oursWrite!.push(gbPerSecond(bytes, await timeSeconds(() => ours.write(range, 0, options))))
    results.fioWrite!.push(fio('write', fioFile))
    results.oursRead!.push(gbPerSecond(bytes, await timeSeconds(() => ours.read(range, 0, options))))
    results.fioRead!.push(fio('read', fioFile))
  }
  report('write: fio libaio (baseline)', results.fioWrite!)
  report('write: DirectFile', results.oursWrite!, results.fioWrite)
  report('read: fio libaio (baseline)', results.fioRead!)
  report('read: DirectFile', results.oursRead!, results.fioRead)
} finally {
  ours.close()
  pool.close()
  rmSync(dir, { recursive: true, force: true })
}
