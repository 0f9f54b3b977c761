/**
 * Publish paths for the same bytes on one agent, interleaved in every run:
 * - region (zero copy): the trainer writes into a handed-out region; publish
 *   adopts its mapping (checksums, persistence when durable, commit);
 * - file: a safetensors file read by native threads into the pool;
 * - copy path: what region publish did before it was zero copy — copy the
 *   bytes from shm into the pool (POST /v1/state/offload), then publish
 *   them from keys;
 * - keys: publish from keys already in the pool, not yet on NVMe (the copy
 *   path without its copy: checksums, persistence, commit — the floor).
 * The trainer's writes into the region / shm and the file's creation are
 * not timed. Medians of --runs; ratios against the region median.
 * Usage: node test/bench/weights-publish.bench.ts [--mib 512] [--runs 5] [--durable]
 */
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { spawnAgent, waitReady } from '../helpers/agent-process.ts'
import { median } from './bench-stats.ts'

const { values } = parseArgs({ options: { mib: { type: 'string' }, runs: { type: 'string' }, durable: { type: 'boolean' } } })
const MiB = 2 ** 20
const tensorBytes = 32 * MiB
const count = Math.max(1, Math.round(Number(values.mib ?? 512) * MiB / tensorBytes))
const total = count * tensorBytes
const runs = Number(values.runs ?? 5)
const durable = values.durable === true
const teardowns: Array<() => unknown> = []
const t = { teardown: (fn: () => unknown) => { teardowns.push(fn) } }
const dir = mkdtempSync(join(tmpdir(), 'agentd-wpb-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))
const keysShm = `agentd-wpb-${process.pid}`
t.teardown(() => rmSync(`/dev/shm/${keysShm}`, { force: true }))
const tensors = Array.from({ length: count }, (_, i) => ({ name: `t${i}`, dtype: 'bf16' as const, shape: [tensorBytes / 2] }))

/** Writes `bytes` bytes of `fill` at `offset` of an open file, 16 MiB at a time. */
function fill (fd: number, offset: number, bytes: number, value: number): void {
  const block = Buffer.alloc(16 * MiB, value)
  for (let at = 0; at < bytes; at += block.length) writeSync(fd, block, 0, Math.min(block.length, bytes - at), offset + at)
}

/** A safetensors file of the bench's tensors (header padded to 8 bytes). */
function writeSafetensors (path: string): void {
  const header: Record<string, unknown> = {}
  tensors.forEach((x, i) => { header[x.name] = { dtype: 'BF16', shape: x.shape, data_offsets: [i * tensorBytes, (i + 1) * tensorBytes] } })
  let json = Buffer.from(JSON.stringify(header))
  json = Buffer.concat([json, Buffer.alloc((8 - json.length % 8) % 8, 0x20)])
  const fd = openSync(path, 'w')
  const length = Buffer.alloc(8)
  length.writeBigUInt64LE(BigInt(json.length))
  writeSync(fd, Buffer.concat([length, json]), 0, 8 + json.length, 0)
  fill(fd, 8 + json.length, total, 3)
  closeSync(fd)
}

try {
  const state = join(dir, 'a')
  const a = await spawnAgent(t, {
    stateDir: state,
    waitReady: false,
    args: ['--dev', '--state-dir', state, '--log-level', 'warn', '--set', `state.hostPoolBytes=${3 * total + 64 * MiB}`, '--set', `state.nvmeCapacityBytes=${8 * total}`,
      '--set', `weights.durable=${durable}`, '--set', 'weights.retainVersions=1', '--set', 'mesh.enabled=false'],
  })
  await waitReady(a, 180_000)
  const file = join(dir, 'model.safetensors')
  writeSafetensors(file)
  console.log(`${count} tensors of ${tensorBytes / MiB} MiB, ${total / MiB} MiB, durable=${durable}, ${runs} runs`)
  const samples = { region: [] as number[], file: [] as number[], copy: [] as number[], keys: [] as number[] }
  const timed = async (into: number[], operation: () => Promise<unknown>): Promise<void> => {
    const began = performance.now()
    await operation()
    into.push((performance.now() - began) / 1000)
  }
  let version = 0
  for (let r = 0; r < runs; r++) {
    const region = await a.client.weightsRegion({ model: 'region', version: ++version, tensors })
    const fd = openSync(`/dev/shm/${region.region}`, 'r+') // the trainer's write (not timed)
    fill(fd, 0, region.bytes, r + 1)
    closeSync(fd)
    await timed(samples.region, () => a.client.weightsPublish({ model: 'region', version, source: { kind: 'region', region: region.region } }))

    await timed(samples.file, () => a.client.weightsPublish({ model: 'file', version: ++version, source: { kind: 'safetensors', path: file } }))

    const shm = openSync(`/dev/shm/${keysShm}`, 'w') // the trainer's bytes in shm (not timed)
    fill(shm, 0, total, r + 2)
    closeSync(shm)
    const offload = (prefix: string): Promise<unknown> => a.client.call('POST', '/v1/state/offload', {
      tensors: tensors.map((x, i) => ({ key: `${prefix}${x.name}:param@[0]/[${x.shape[0]}]:bf16#v${r}`, source: { kind: 'shm', name: keysShm, offset: i * tensorBytes } })),
    })
    await timed(samples.copy, async () => {
      await offload('bench/copy/')
      await a.client.weightsPublish({ model: 'copy', version: ++version, source: { kind: 'keys', prefix: 'bench/copy/' } })
    })
    await a.client.weightsRetire({ model: 'copy', version })
    await a.client.call('POST', '/v1/state/drop', { prefix: 'bench/copy/' })
    await offload('bench/keys/') // fresh keys, not yet on NVMe (not timed)
    rmSync(`/dev/shm/${keysShm}`)
    await timed(samples.keys, () => a.client.weightsPublish({ model: 'keys', version: ++version, source: { kind: 'keys', prefix: 'bench/keys/' } }))
    await a.client.weightsRetire({ model: 'keys', version })
    await a.client.call('POST', '/v1/state/drop', { prefix: 'bench/keys/' })
  }
  const base = median(samples.region)
  const line = (label: string, xs: number[]): string =>
    `${label.padEnd(40)} median ${median(xs).toFixed(3)} s  ${(total / median(xs) / 1e9).toFixed(2).padStart(6)} GB/s  ` +
    `[${xs.map(x => x.toFixed(3)).join(', ')}]  ×${(median(xs) / base).toFixed(2)} region`
  console.log(line('publish from region (zero copy)', samples.region))
  console.log(line('publish from safetensors file', samples.file))
  console.log(line('copy path (offload shm → pool, publish)', samples.copy))
  console.log(line('publish from keys (floor: no copy)', samples.keys))
} finally {
  for (const fn of teardowns.reverse()) await fn()
}
