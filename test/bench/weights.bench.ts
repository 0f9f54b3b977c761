/**
 * Weight transfer between two local agentd processes (RLBoost §4.3), with
 * baselines measured in the same run:
 * 1. full pull of a MODEL_MIB model (default 2048) with S = 1 and 4 streams
 *    vs `iperf3 -P S` on loopback (ratio = pull GB/s / iperf3 GB/s);
 * 2. resharded pulls (llama preset) for TP = 2, 4, 8: bytes received / bytes
 *    needed and time vs the full pull;
 * 3. publish from a handed-out shared-memory region vs from a safetensors file;
 *    resharded pulls of the region-published version vs the file-published one.
 * Usage: node test/bench/weights.bench.ts [--model-mib N] [--runs R] [--no-region]
 * Medians of R runs (default 3). The agents run with durable publishes (NVMe) as in production.
 */
// bench-requires: iperf3 (iperf3 is the baseline of the full pulls; npm run bench checks this line)
import { mkdtempSync, rmSync, writeFileSync, openSync, writeSync, closeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { spawnAgent, waitReady } from '../helpers/agent-process.ts'
import { generateClusterKey } from '../../mesh/membership/cluster-key.ts'
import { median, MiB } from './bench-stats.ts'
import { iperfGbPerSecond, llamaLike, llamaLikeTensors, writeSafetensors } from './weights-bench-model.ts'

const { values } = parseArgs({ options: { 'model-mib': { type: 'string' }, runs: { type: 'string' }, 'no-region': { type: 'boolean' } } })
/** --no-region skips the region publish (it needs a second copy of the model in /dev/shm: memory-tight machines). */
const withRegion = values['no-region'] !== true
const modelMiB = Number(values['model-mib'] ?? 2048)
const runs = Number(values.runs ?? 3)

const teardowns: Array<() => unknown> = []
const t = { teardown: (fn: () => unknown) => { teardowns.push(fn) } }
const dir = mkdtempSync(join(tmpdir(), 'agentd-wb-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))

const { tensors, bytes: total } = llamaLikeTensors(modelMiB)
const { heads, kvHeads } = llamaLike

let stopping = false
const gb = (x: number): string => `${x.toFixed(2)} GB/s`
try {
  const keyFile = join(dir, 'cluster.key')
  writeFileSync(keyFile, generateClusterKey(), { mode: 0o600 })
  // Pools sized for one resident version plus slack (older versions spill to NVMe): the machine is shared.
  const pool = (factor: number): number => Math.ceil(total * factor / MiB) * MiB
  const args = (state: string, poolBytes: number): string[] => ['--dev', '--state-dir', state, '--cluster-key', keyFile, '--log-level', 'warn',
    '--set', `state.hostPoolBytes=${poolBytes}`, '--set', `state.nvmeCapacityBytes=${8 * total}`, '--set', 'weights.retainVersions=2', '--set', 'mesh.enabled=false']
  const aDir = join(dir, 'a'); const bDir = join(dir, 'b')
  const file = join(dir, 'model.safetensors')
  writeSafetensors(file, tensors, { num_attention_heads: String(heads), num_key_value_heads: String(kvHeads) }) // before the agents start: a synchronous 2 GiB write would stall their log pipes
  // Reserving and pre-faulting multi-GiB pools takes a while on a loaded machine.
  const a = await spawnAgent(t, { stateDir: aDir, args: args(aDir, pool(1.3)), waitReady: false })
  const b = await spawnAgent(t, { stateDir: bDir, args: args(bDir, pool(1.1)), waitReady: false })
  await waitReady(a, 180_000)
  await waitReady(b, 180_000)
  for (const [name, agent] of [['A', a], ['B', b]] as const) {
    void agent.exited.then(exit => { if (!stopping) console.error(`agent ${name} exited (${JSON.stringify(exit)}):\n${agent.output().slice(-3000)}`) })
  }
  console.log(`model: ${tensors.length} tensors, ${(total / MiB).toFixed(0)} MiB bf16 (Llama-like, GQA ${heads}/${kvHeads}); ${runs} runs each; load average ${(await import('node:os')).loadavg().map(x => x.toFixed(1)).join(' ')}`)

  // 3. publish from file vs region (each a new version; durable: includes the NVMe write + fsync).
  const fromFile: number[] = []; const fromRegion: number[] = []
  let version = 0
  let fileVersion = 0
  for (let r = 0; r < runs; r++) {
    let began = performance.now()
    await a.client.weightsPublish({ model: 'bench', version: ++version, source: { kind: 'safetensors', path: file } })
    fromFile.push((performance.now() - began) / 1000)
    fileVersion = version
    if (!withRegion) continue
    const region = await a.client.weightsRegion({ model: 'bench', version: ++version, tensors: tensors.map(x => ({ name: x.name, dtype: 'bf16' as const, shape: x.shape })) })
    const fd = openSync(`/dev/shm/${region.region}`, 'r+') // the trainer's write (not timed): fill the region
    const block = Buffer.alloc(16 * MiB, 7)
    for (let at = 0; at < region.bytes; at += block.length) writeSync(fd, block, 0, Math.min(block.length, region.bytes - at), at)
    closeSync(fd)
    began = performance.now()
    await a.client.weightsPublish({ model: 'bench', version, source: { kind: 'region', region: region.region } })
    fromRegion.push((performance.now() - began) / 1000)
  }
  console.log(`publish from safetensors file: median ${median(fromFile).toFixed(2)} s (${gb(total / median(fromFile) / 1e9)})  [${fromFile.map(x => x.toFixed(2)).join(', ')}]`)
  if (withRegion) console.log(`publish from shm region:       median ${median(fromRegion).toFixed(2)} s (${gb(total / median(fromRegion) / 1e9)})  [${fromRegion.map(x => x.toFixed(2)).join(', ')}]  region/file time ratio ${(median(fromRegion) / median(fromFile)).toFixed(3)}`)
  const address = (await a.client.status()).weights!.address

  // 1. full pulls vs iperf3 -P S, interleaved in the same run.
  const fullSeconds: Record<number, number[]> = {}
  for (const streams of [1, 4]) {
    const pulls: number[] = []; const baseline: number[] = []
    for (let r = 0; r < runs; r++) {
      await b.client.call('POST', '/v1/state/drop', { prefix: 'weights/' })
      const res = await b.client.weightsPull({ from: address, model: 'bench', version, streams })
      if (res.bytesReceived !== total) throw new Error(`received ${res.bytesReceived}, expected ${total}`)
      pulls.push(total / res.seconds / 1e9)
      baseline.push(iperfGbPerSecond(streams))
    }
    fullSeconds[streams] = pulls.map(p => total / p / 1e9)
    console.log(`full pull S=${streams}: median ${gb(median(pulls))} [${pulls.map(x => x.toFixed(2)).join(', ')}]; iperf3 -P ${streams}: median ${gb(median(baseline))} [${baseline.map(x => x.toFixed(2)).join(', ')}]; ratio ${(median(pulls) / median(baseline)).toFixed(3)}`)
  }

  // 2. resharded pulls, rank 0 of TP (llama preset; heads from the published metadata), 4 streams.
  // With a region-published version: the same pulls from it, interleaved — the server verifies the
  // committed chunks under every slice of a region-backed tensor (PROTOCOL.md), the file version's
  // pool-backed tensors need no check.
  for (const tp of [2, 4, 8]) {
    const secs: number[] = []; const regionSecs: number[] = []; let received = 0; let needed = 0
    for (let r = 0; r < runs; r++) {
      await b.client.call('POST', '/v1/state/drop', { prefix: 'weights/' })
      const res = await b.client.weightsPull({ from: address, model: 'bench', version: fileVersion, streams: 4, layout: { tp, rank: 0, preset: 'llama' } })
      secs.push(res.seconds); received = res.bytesReceived; needed = res.bytes
      if (!withRegion) continue
      await b.client.call('POST', '/v1/state/drop', { prefix: 'weights/' })
      regionSecs.push((await b.client.weightsPull({ from: address, model: 'bench', version, streams: 4, layout: { tp, rank: 0, preset: 'llama' } })).seconds)
    }
    console.log(`tp=${tp} rank 0: bytes needed ${needed} (${(needed / total).toFixed(4)} of the model), received ${received}, received/needed ${(received / needed).toFixed(4)} (+ 24-byte reply headers per piece); median ${median(secs).toFixed(2)} s vs full S=4 ${median(fullSeconds[4]!).toFixed(2)} s (time ratio ${(median(secs) / median(fullSeconds[4]!)).toFixed(3)})`)
    if (withRegion) console.log(`  same from the region-published version (server verifies slices): median ${median(regionSecs).toFixed(2)} s [${regionSecs.map(x => x.toFixed(2)).join(', ')}] vs file version [${secs.map(x => x.toFixed(2)).join(', ')}], time ratio ${(median(regionSecs) / median(secs)).toFixed(3)}`)
  }
} finally {
  stopping = true
  for (const fn of teardowns.reverse()) await fn()
}
