/**
 * What the weight-transfer benchmarks share: a Llama-like bf16 model of a
 * given size, its safetensors file, and `iperf3` on loopback as the network
 * baseline. GB/s means 10^9 bytes per second.
 */
import { spawn, spawnSync } from 'node:child_process'
import { closeSync, openSync, writeSync } from 'node:fs'
import { MiB } from './bench-stats.ts'

/** A bf16 tensor of the model: its name in the version and its shape. */
export interface BenchTensor { name: string, shape: number[] }

/** The layer shapes llamaLikeTensors stacks: hidden 4096, 32 heads, 8 kv heads (GQA), intermediate 11008, vocab 32000. */
export const llamaLike = { hidden: 4096, heads: 32, kvHeads: 8, intermediate: 11008, vocab: 32000 } as const

/** Bytes of a bf16 tensor of this shape. */
export function bf16Bytes (shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1) * 2
}

/**
 * A Llama-like layer stack of at least `modelMiB` MiB: the embedding (250 MiB),
 * then each layer's attention and MLP projections and norm, in file order,
 * until the size is reached (the last layer may be cut short). `bytes` is the
 * sum of the tensors' sizes.
 */
export function llamaLikeTensors (modelMiB: number): { tensors: BenchTensor[], bytes: number } {
  const { hidden, kvHeads, intermediate, vocab } = llamaLike
  const layer = (i: number): BenchTensor[] => [
    { name: `model.layers.${i}.self_attn.q_proj.weight`, shape: [hidden, hidden] },
    { name: `model.layers.${i}.self_attn.k_proj.weight`, shape: [kvHeads * 128, hidden] },
    { name: `model.layers.${i}.self_attn.v_proj.weight`, shape: [kvHeads * 128, hidden] },
    { name: `model.layers.${i}.self_attn.o_proj.weight`, shape: [hidden, hidden] },
    { name: `model.layers.${i}.mlp.gate_proj.weight`, shape: [intermediate, hidden] },
    { name: `model.layers.${i}.mlp.up_proj.weight`, shape: [intermediate, hidden] },
    { name: `model.layers.${i}.mlp.down_proj.weight`, shape: [hidden, intermediate] },
    { name: `model.layers.${i}.input_layernorm.weight`, shape: [hidden] },
  ]
  const tensors: BenchTensor[] = [{ name: 'model.embed_tokens.weight', shape: [vocab, hidden] }]
  let bytes = bf16Bytes(tensors[0]!.shape)
  for (let i = 0; bytes < modelMiB * MiB; i++) {
    for (const x of layer(i)) {
      if (bytes >= modelMiB * MiB) break
      tensors.push(x)
      bytes += bf16Bytes(x.shape)
    }
  }
  return { tensors, bytes }
}

/**
 * Writes `tensors` (bf16, back to back in this order) as a safetensors file
 * with `metadata` as its __metadata__. The bytes are a fixed pattern (16 MiB,
 * repeated): the transfers do not look at them. Synchronous: write it before
 * starting agents whose log pipes this process reads.
 */
export function writeSafetensors (path: string, tensors: readonly BenchTensor[], metadata: Record<string, string>): void {
  const header: Record<string, unknown> = { __metadata__: metadata }
  let offset = 0
  for (const x of tensors) {
    header[x.name] = { dtype: 'BF16', shape: x.shape, data_offsets: [offset, offset + bf16Bytes(x.shape)] }
    offset += bf16Bytes(x.shape)
  }
  let json = Buffer.from(JSON.stringify(header))
  json = Buffer.concat([json, Buffer.alloc((8 - json.length % 8) % 8, 0x20)])
  const fd = openSync(path, 'w')
  try {
    const length = Buffer.alloc(8)
    length.writeBigUInt64LE(BigInt(json.length))
    writeSync(fd, length)
    writeSync(fd, json)
    const block = Buffer.alloc(16 * MiB)
    for (let i = 0; i < block.length; i += 4) block.writeUInt32LE((i * 2654435761) >>> 0, i)
    for (let left = offset; left > 0; left -= block.length) writeSync(fd, block, 0, Math.min(block.length, left))
  } finally {
    closeSync(fd)
  }
}

/** `iperf3 -P streams` over loopback for 4 s (port 5299): received GB/s. */
export function iperfGbPerSecond (streams: number): number {
  const server = spawn('iperf3', ['-s', '-1', '-p', '5299'], { stdio: 'ignore' })
  spawnSync('sleep', ['0.5'])
  const out = spawnSync('iperf3', ['-c', '127.0.0.1', '-p', '5299', '-P', String(streams), '-t', '4', '-J'], { encoding: 'utf8' })
  server.kill()
  const parsed = JSON.parse(out.stdout) as { end: { sum_received: { bits_per_second: number } } }
  return parsed.end.sum_received.bits_per_second / 8 / 1e9
}
