/**
 * StateManager through the API of a real agent, each against a baseline
 * measured in the same run:
 *   - offload / onload GB/s of 1 GiB in 16 MiB tensors vs the native
 *     pool<->shm copy alone (goal: API overhead < 10%, ratio >= 0.9);
 *   - durable offload (spill: copy + NVMe write + fsync) and restore after a
 *     restart (NVMe read + checksum + copy) vs fio on the same directory;
 *   - latency of a small (4 KiB) offload, p50/p99, vs a GET /healthz round trip.
 *
 *   npm run build && node_modules/.bin/node test/bench/state.bench.ts [--runs 5] [--dir /var/tmp]
 */
// bench-requires: fio (fio is the baseline of the spill and restore figures; npm run bench checks this line)
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'
import { builtAgentMain } from '../helpers/agent-process.ts'
import { createAgentClient, type AgentClient } from '../../agent/client/client.ts'
import { copyHost, createHostPool, openSharedMemory } from '../../native/index.ts'
import { gbPerSecond, median, MiB, report, timeSeconds } from './bench-stats.ts'
import { fioGbPerSecond } from './fio.ts'

const { values } = parseArgs({ options: { runs: { type: 'string', default: '5' }, dir: { type: 'string', default: '/var/tmp' } } })
const runs = Number(values.runs)
const totalBytes = 1024 * MiB
const chunkBytes = 16 * MiB
const chunks = totalBytes / chunkBytes
const dir = mkdtempSync(join(values.dir, 'agentd-state-bench-'))
const stateDir = mkdtempSync('/tmp/agentd-sb-')
const src = `agentd-bench-src-${process.pid}`
const dst = `agentd-bench-dst-${process.pid}`
writeFileSync(`/dev/shm/${src}`, Buffer.alloc(totalBytes, 0x5a))
writeFileSync(`/dev/shm/${dst}`, Buffer.alloc(totalBytes))
const small = `agentd-bench-small-${process.pid}`
// A gigabyte of shared memory per object and two directories: removed however the script ends.
process.once('exit', () => {
  for (const name of [src, dst, small]) rmSync(`/dev/shm/${name}`, { force: true })
  rmSync(dir, { recursive: true, force: true })
  rmSync(stateDir, { recursive: true, force: true })
})
const key = (run: number, i: number): string => `bench/model/layer${i}.w:param@[0]/[${chunkBytes / 2}]:bf16#v${run}`

async function startAgent (): Promise<{ proc: ChildProcess, client: AgentClient }> {
  const proc = spawn(process.execPath, [builtAgentMain, '--dev', '--state-dir', stateDir, '--log-level', 'warn',
    '--set', `state.hostPoolBytes=${totalBytes + 256 * MiB}`, '--set', `state.nvmeDir=${dir}/nvme`, '--set', `state.nvmeCapacityBytes=${8 * totalBytes}`,
    '--set', 'mesh.enabled=false'], { stdio: ['ignore', 'ignore', 'inherit'] })
  const client = createAgentClient({ socketPath: join(stateDir, 'agentd.sock'), timeoutMs: 600_000 })
  for (;;) { try { await client.health(); return { proc, client } } catch { await sleep(20) } }
}
const stopAgent = async (proc: ChildProcess): Promise<void> => { proc.kill('SIGTERM'); await new Promise(resolve => proc.once('exit', resolve)) }
const tensors = (run: number, name: string, field: 'source' | 'target'): unknown[] =>
  Array.from({ length: chunks }, (_, i) => ({ key: key(run, i), [field]: { kind: 'shm', name, offset: i * chunkBytes } }))
const percentile = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))]!

console.log(`StateManager bench: ${totalBytes / MiB} MiB in ${chunks} tensors of ${chunkBytes / MiB} MiB, ${runs} runs, NVMe dir ${dir}`)

// Baseline: the native copy alone, same chunks.
const pool = await createHostPool({ sizeBytes: totalBytes, lock: false })
const extent = pool.allocate(totalBytes)
const shmSrc = openSharedMemory(src)
const shmDst = openSharedMemory(dst)
const native = { in: [] as number[], out: [] as number[] }
for (let r = 0; r < runs; r++) {
  native.in.push(gbPerSecond(totalBytes, await timeSeconds(async () => { for (let i = 0; i < chunks; i++) await copyHost(pool.range(extent, i * chunkBytes, chunkBytes), shmSrc.range(i * chunkBytes, chunkBytes)) })))
  native.out.push(gbPerSecond(totalBytes, await timeSeconds(async () => { for (let i = 0; i < chunks; i++) await copyHost(shmDst.range(i * chunkBytes, chunkBytes), pool.range(extent, i * chunkBytes, chunkBytes)) })))
}
shmSrc.close(); shmDst.close(); pool.close()

let { proc, client } = await startAgent()
const api = { offload: [] as number[], onload: [] as number[], durable: [] as number[], restore: [] as number[] }
for (let r = 0; r < runs; r++) {
  api.offload.push(gbPerSecond(totalBytes, await timeSeconds(() => client.call('POST', '/v1/state/offload', { tensors: tensors(r, src, 'source') }))))
  api.onload.push(gbPerSecond(totalBytes, await timeSeconds(() => client.call('POST', '/v1/state/onload', { tensors: tensors(r, dst, 'target') }))))
  await client.call('POST', '/v1/state/drop', { prefix: 'bench/' })
}

// Small requests: 4 KiB offloads of fresh keys vs /healthz.
writeFileSync(`/dev/shm/${small}`, Buffer.alloc(4096, 1))
const health: number[] = []
const offload4k: number[] = []
for (let i = 0; i < 1000; i++) {
  health.push(await timeSeconds(() => client.health()) * 1e6)
  offload4k.push(await timeSeconds(() => client.call('POST', '/v1/state/offload', { tensors: [{ key: `bench/small/k${i}:param@[0]/[1024]:f32#v0`, source: { kind: 'shm', name: small, offset: 0 } }] })) * 1e6)
}
await client.call('POST', '/v1/state/drop', { prefix: 'bench/' })

// Spill and restore: durable offload, restart, onload from NVMe; fio on the same directory.
const fio = { write: [] as number[], read: [] as number[] }
for (let r = 0; r < runs; r++) {
  const v = 100 + r
  api.durable.push(gbPerSecond(totalBytes, await timeSeconds(() => client.call('POST', '/v1/state/offload', { tensors: tensors(v, src, 'source'), durability: 'nvme' }))))
  await stopAgent(proc);
  ({ proc, client } = await startAgent())
  api.restore.push(gbPerSecond(totalBytes, await timeSeconds(() => client.call('POST', '/v1/state/onload', { tensors: tensors(v, dst, 'target') }))))
  await client.call('POST', '/v1/state/drop', { prefix: 'bench/' })
  const file = join(dir, 'fio.bin')
  fio.write.push(fioGbPerSecond({ rw: 'write', file, sizeBytes: totalBytes, blockBytes: 4 * MiB, queueDepth: 8, endFsync: true }))
  fio.read.push(fioGbPerSecond({ rw: 'read', file, sizeBytes: totalBytes, blockBytes: 4 * MiB, queueDepth: 8 }))
  rmSync(file, { force: true })
}
await stopAgent(proc)

report('offload: native shm->pool copy (baseline)', native.in)
report('offload: POST /v1/state/offload', api.offload, native.in)
report('onload: native pool->shm copy (baseline)', native.out)
report('onload: POST /v1/state/onload', api.onload, native.out)
report('spill: fio write + fsync (baseline)', fio.write)
report('spill: durable offload (copy+write+fsync)', api.durable, fio.write)
report('restore: fio read (baseline)', fio.read)
report('restore: onload from NVMe after restart', api.restore, fio.read)
console.log(`latency GET /healthz (baseline)            p50 ${median(health).toFixed(0)} us  p99 ${percentile(health, 0.99).toFixed(0)} us`)
console.log(`latency 4 KiB offload                      p50 ${median(offload4k).toFixed(0)} us  p99 ${percentile(offload4k, 0.99).toFixed(0)} us  ratio p50 ${(median(offload4k) / median(health)).toFixed(2)}`)
