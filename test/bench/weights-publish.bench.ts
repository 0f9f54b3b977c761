/**
 * What a zero-copy region publish would save: publishing a version from a
 * handed-out shared-memory region (one native copy into the pool) against
 * publishing the same bytes from StateManager keys already in the pool (no
 * copy: checksums, persistence and commit only — the lower bound a zero-copy
 * region could reach), alternately in the same run on one agent.
 * Usage: node test/bench/weights-publish.bench.ts [--mib 512] [--runs 3] [--durable]
 */
import { mkdtempSync, rmSync, writeFileSync, openSync, writeSync, closeSync } from 'node:fs'
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
const runs = Number(values.runs ?? 3)
const durable = values.durable === true
const teardowns: Array<() => unknown> = []
const t = { teardown: (fn: () => unknown) => { teardowns.push(fn) } }
const dir = mkdtempSync(join(tmpdir(), 'agentd-wpb-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))
const keysShm = `agentd-wpb-${process.pid}`
t.teardown(() => rmSync(`/dev/shm/${keysShm}`, { force: true }))
const tensors = Array.from({ length: count }, (_, i) => ({ name: `t${i}`, dtype: 'bf16' as const, shape: [tensorBytes / 2] }))

try {
  const state = join(dir, 'a')
  const a = await spawnAgent(t, {
    stateDir: state,
    waitReady: false,
    args: ['--dev', '--state-dir', state, '--log-level', 'warn', '--set', `state.hostPoolBytes=${4 * total}`, '--set', `state.nvmeCapacityBytes=${8 * total}`,
      '--set', `weights.durable=${durable}`, '--set', 'weights.retainVersions=1', '--set', 'mesh.enabled=false'],
  })
  await waitReady(a, 180_000)
  console.log(`${count} tensors, ${total / MiB} MiB, durable=${durable}, ${runs} runs`)
  const fromRegion: number[] = []; const fromKeys: number[] = []
  let version = 0
  for (let r = 0; r < runs; r++) {
    const region = await a.client.weightsRegion({ model: 'region', version: ++version, tensors })
    const fd = openSync(`/dev/shm/${region.region}`, 'r+') // the trainer's write (not timed)
    const block = Buffer.alloc(16 * MiB, r + 1)
    for (let at = 0; at < region.bytes; at += block.length) writeSync(fd, block, 0, Math.min(block.length, region.bytes - at), at)
    closeSync(fd)
    let began = performance.now()
    await a.client.weightsPublish({ model: 'region', version, source: { kind: 'region', region: region.region } })
    fromRegion.push((performance.now() - began) / 1000)

    writeFileSync(`/dev/shm/${keysShm}`, Buffer.alloc(total, r + 2)) // the same bytes as keys in the pool (not timed)
    await a.client.call('POST', '/v1/state/offload', { tensors: tensors.map((x, i) => ({ key: `bench/actor/${x.name}:param@[0]/[${x.shape[0]}]:bf16#v${r}`, source: { kind: 'shm', name: keysShm, offset: i * tensorBytes } })) })
    rmSync(`/dev/shm/${keysShm}`)
    began = performance.now()
    await a.client.weightsPublish({ model: 'keys', version: ++version, source: { kind: 'keys', prefix: 'bench/actor/' } })
    fromKeys.push((performance.now() - began) / 1000)
    await a.client.call('POST', '/v1/state/drop', { prefix: 'bench/' })
  }
  const fmt = (xs: number[]): string => `median ${median(xs).toFixed(3)} s [${xs.map(x => x.toFixed(3)).join(', ')}]`
  console.log(`publish from region (one copy): ${fmt(fromRegion)}`)
  console.log(`publish from keys (no copy):    ${fmt(fromKeys)}  keys/region time ratio ${(median(fromKeys) / median(fromRegion)).toFixed(3)}`)
} finally {
  for (const fn of teardowns.reverse()) await fn()
}
