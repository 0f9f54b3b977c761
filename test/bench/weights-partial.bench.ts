/**
 * Pulling one rank's slices from a partial holder vs from the full holder
 * (PROTOCOL.md "Partial holders"), interleaved in every run, three agents in
 * one process on loopback: A publishes a Llama-like model (llama preset,
 * bf16), B pulls TP 2 rank 0 from A, then P pulls TP 2 rank 0 alternately
 * from A (strided gathers on A) and from B (contiguous stored slices, no
 * gather), dropping its keys in between. Also times what registering a
 * partial holding costs the puller: the checksum pass over its slices.
 * A publishes from a region (the zero-copy path: its sliced READs also verify
 * the committed chunks they cover) or, with --file, from a safetensors file.
 * Usage: node test/bench/weights-partial.bench.ts [--model-mib 512] [--runs 5] [--streams 4] [--file]
 */
import { mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { pino } from 'pino'
import { createStateManager, type StateManager } from '../../agent/state/state-manager.ts'
import { chunkChecksums } from '../../agent/weights/publisher.ts'
import { createWeightsService, type WeightsService } from '../../agent/weights/weights-service.ts'
import { defaultWeightsConfig, devWeightsConfig } from '../../agent/weights/weights-config.ts'
import { generateClusterKey, parseClusterKey } from '../../mesh/membership/cluster-key.ts'
import { gbPerSecond, median, MiB } from './bench-stats.ts'

const { values } = parseArgs({ options: { 'model-mib': { type: 'string' }, runs: { type: 'string' }, streams: { type: 'string' }, file: { type: 'boolean' } } })
/** --file: A publishes from a safetensors file into its pool, so its sliced READs skip the region check of committed chunks. */
const fromFile = values.file === true
const modelMiB = Number(values['model-mib'] ?? 512)
const runs = Number(values.runs ?? 5)
const streams = Number(values.streams ?? 4)
const logger = pino({ level: 'silent' })
const key = parseClusterKey(generateClusterKey(), 'bench key')
const dir = mkdtempSync(join('/var/tmp', 'agentd-wpp-'))
const hidden = 4096; const inter = 11008
const layerBytes = 2 * (4 * hidden * hidden + 3 * inter * hidden)
const layers = Math.max(1, Math.round(modelMiB * MiB / layerBytes))
const tensors = Array.from({ length: layers }, (_, i) => [
  { name: `model.layers.${i}.self_attn.q_proj.weight`, shape: [hidden, hidden] },
  { name: `model.layers.${i}.self_attn.k_proj.weight`, shape: [hidden, hidden] },
  { name: `model.layers.${i}.self_attn.v_proj.weight`, shape: [hidden, hidden] },
  { name: `model.layers.${i}.self_attn.o_proj.weight`, shape: [hidden, hidden] },
  { name: `model.layers.${i}.mlp.gate_proj.weight`, shape: [inter, hidden] },
  { name: `model.layers.${i}.mlp.up_proj.weight`, shape: [inter, hidden] },
  { name: `model.layers.${i}.mlp.down_proj.weight`, shape: [hidden, inter] },
]).flat().map(x => ({ ...x, dtype: 'bf16' as const }))
const total = tensors.reduce((a, x) => a + x.shape[0]! * x.shape[1]! * 2, 0)

const nodes: Array<{ sm: StateManager, weights: WeightsService }> = []
async function node (name: string, poolBytes: number): Promise<{ sm: StateManager, weights: WeightsService }> {
  const sm = createStateManager({
    hostPoolBytes: poolBytes, lockHostPool: false, nvmeDir: join(dir, name, 'nvme'), nvmeCapacityBytes: 64 * MiB, directIo: true,
    spillHighWatermark: 0.99, spillLowWatermark: 0.9, namespaceQuotaBytes: {}, prefetchHorizonMs: 1000,
  }, { logger })
  await sm.start()
  const weights = createWeightsService({ ...devWeightsConfig, durable: false, streams, manifestDir: join(dir, name, 'weights') }, { stateManager: sm, clusterKey: key, logger })
  await weights.start()
  nodes.push({ sm, weights })
  return { sm, weights }
}

try {
  const pool = Math.ceil(total / (64 * MiB) + 1) * 64 * MiB
  const a = await node('a', fromFile ? pool : 16 * MiB)
  const b = await node('b', pool)
  const p = await node('p', pool)
  const metadata = { num_attention_heads: '32', num_key_value_heads: '32' }
  if (fromFile) {
    const header: Record<string, unknown> = {}
    let at = 0
    for (const x of tensors) { const n = x.shape[0]! * x.shape[1]! * 2; header[x.name] = { dtype: 'BF16', shape: x.shape, data_offsets: [at, at + n] }; at += n }
    let json = Buffer.from(JSON.stringify(header))
    json = Buffer.concat([json, Buffer.alloc((8 - json.length % 8) % 8, 0x20)])
    const length = Buffer.alloc(8)
    length.writeBigUInt64LE(BigInt(json.length))
    const path = join(dir, 'm.safetensors')
    writeFileSync(path, Buffer.concat([length, json]))
    truncateSync(path, 8 + json.length + total) // zeros: the bytes do not matter to the transfer
    await a.weights.publish({ model: 'm', version: 1, source: { kind: 'safetensors', path }, metadata })
  } else {
    const region = await a.weights.createRegion('m', 1, tensors)
    await a.weights.publish({ model: 'm', version: 1, source: { kind: 'region', region: region.region }, metadata })
  }
  const layout = { tp: 2, rank: 0, preset: 'llama' }
  const seeded = await b.weights.pull({ from: a.weights.address(), model: 'm', version: 1, layout })
  const checksumSeconds: number[] = []
  for (let i = 0; i < runs; i++) {
    const began = performance.now()
    for (const k of seeded.keys) {
      const pinned = await b.sm.readHost(k)
      try { await chunkChecksums(pinned.range, defaultWeightsConfig.chunkBytes) } finally { pinned.release() }
    }
    checksumSeconds.push((performance.now() - began) / 1000)
  }
  const fromA: number[] = []; const fromB: number[] = []
  for (let i = 0; i < runs; i++) {
    for (const [source, out] of [[a, fromA], [b, fromB]] as const) {
      const r = await p.weights.pull({ from: source.weights.address(), model: 'm', version: 1, layout })
      if (r.bytesReceived !== seeded.bytes) throw new Error(`received ${r.bytesReceived}, expected ${seeded.bytes}`)
      out.push(r.seconds)
      await p.sm.drop({ prefix: 'weights/m/' })
    }
  }
  console.log(`model ${(total / MiB).toFixed(0)} MiB (${layers} layers) published from a ${fromFile ? 'file' : 'region'}, TP 2 rank 0 = ${(seeded.bytes / MiB).toFixed(0)} MiB, ${streams} streams, medians of ${runs}`)
  console.log(`  from the full holder A:    ${median(fromA).toFixed(3)} s (${gbPerSecond(seeded.bytes, median(fromA)).toFixed(2)} GB/s)`)
  console.log(`  from the partial holder B: ${median(fromB).toFixed(3)} s (${gbPerSecond(seeded.bytes, median(fromB)).toFixed(2)} GB/s), ratio A/B ${(median(fromA) / median(fromB)).toFixed(2)}`)
  console.log(`  registering a holding (checksum pass over the slices): ${median(checksumSeconds).toFixed(3)} s`)
} finally {
  for (const n of nodes.reverse()) { await n.weights.stop(); await n.sm.stop() }
  rmSync(dir, { recursive: true, force: true })
}
