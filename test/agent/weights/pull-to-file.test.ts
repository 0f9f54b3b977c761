// Pulls straight into a safetensors file (out): a model 12x the puller's pool and slices larger than the
// pool, with nothing stored and nothing spilled; a pull cut off and repeated fetches only what the file
// lacks (a journaled piece damaged on disk is fetched again); refusals before a byte moves; a version
// retired mid-pull leaves no partial file. Real StateManagers, real TCP on loopback, real files.
import t from 'tap'
import { existsSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { AgentError } from '../../../core/errors.ts'
import { readSafetensorsHeader } from '../../../agent/weights/publisher.ts'
import { MiB, sharedKey, tcpProxy, tensor, weightsNode, writeSafetensors, type FixtureTensor } from './weights-fixtures.ts'
import { processMemory } from '../../helpers/process-memory.ts'

const pool = 4 * MiB
/** 48 MiB in 48 tensors of 1 MiB: twelve times the puller's pool. */
const layers = (seed: number, count = 48): FixtureTensor[] => Array.from({ length: count }, (_, i) => tensor(`model.layers.${i}.mlp.down_proj.weight`, 'bf16', [512, 1024], seed + i))
const total = (ts: FixtureTensor[]): number => ts.reduce((s, x) => s + x.data.length, 0)

/** A safetensors file's tensors as the format defines them, with their bytes. */
function readShard (path: string): { metadata: Record<string, string>, tensors: Map<string, { shape: number[], bytes: Buffer }>, order: string[] } {
  const bytes = readFileSync(path)
  const length = Number(bytes.readBigUInt64LE(0))
  const { __metadata__: metadata, ...entries } = JSON.parse(bytes.subarray(8, 8 + length).toString()) as Record<string, { shape: number[], data_offsets: [number, number] }>
  const tensors = new Map(Object.entries(entries).map(([name, e]) => [name, { shape: e.shape, bytes: bytes.subarray(8 + length + e.data_offsets[0], 8 + length + e.data_offsets[1]) }]))
  return { metadata: metadata as unknown as Record<string, string>, tensors, order: Object.entries(entries).sort((x, y) => x[1].data_offsets[0] - y[1].data_offsets[0]).map(([name]) => name) }
}

/** Columns [from, from + count) of a row-major bf16 [rows, cols] tensor. */
function columns (x: FixtureTensor, from: number, count: number): Buffer {
  const [rows, cols] = x.shape as [number, number]
  return Buffer.concat(Array.from({ length: rows }, (_, r) => x.data.subarray((r * cols + from) * 2, (r * cols + from + count) * 2)))
}

t.test('a model 12x the pool into a file: byte-exact, nothing stored or spilled, memory bounded', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key, {}, undefined, pool)
  const b = await weightsNode(t, key, {}, undefined, pool)
  // Two tensors of sizes that are no multiple of 4 KiB (written through the page cache), among 48 that are (O_DIRECT).
  const odd = [tensor('model.layers.0.self_attn.q_proj.bias', 'bf16', [1000], 90), tensor('model.embed_tokens.weight', 'bf16', [1001, 1024], 91)]
  const tensors = [odd[0]!, ...layers(1), odd[1]!]
  const source = join(a.dir, 'big.safetensors')
  writeSafetensors(source, tensors)
  await a.weights.publish({ model: 'big', version: 1, source: { kind: 'safetensors', path: source } })
  global.gc?.()
  const before = processMemory('self').now
  writeFileSync('/proc/self/clear_refs', '5')
  const out = join(b.dir, 'big-copy.safetensors')
  const r = await b.weights.pull({ from: a.weights.address(), model: 'big', version: 1, streams: 4, out: { path: out } })
  const growth = processMemory('self').peak - before
  t.equal(r.file, out)
  t.equal(r.bytes, total(tensors))
  t.equal(r.bytesReceived, total(tensors))
  t.same(r.keys, [], 'into a file: no keys')
  t.same(b.sm.storedKeys('weights/'), [], 'the puller stores nothing')
  t.equal(b.sm.availability().nvme.freeBytes, b.sm.availability().nvme.totalBytes, 'and writes nothing to its NVMe tier')
  // Both agents run in this process: their pools (8 MiB, reserved at start) plus buffers, not the model's 48 MiB.
  t.ok(growth < 24 * MiB, `peak RSS grew ${(growth / MiB).toFixed(1)} MiB during a ${(total(tensors) / MiB).toFixed(0)} MiB pull into a file (bound 24 MiB)`)
  const shard = readShard(out)
  t.same(shard.order, [...tensors.filter(x => !odd.includes(x)), ...odd].map(x => x.name), 'tensors whose size is a multiple of 4 KiB first, each group in the version\'s order')
  t.equal((8 + Number(readFileSync(out).readBigUInt64LE(0))) % 4096, 0, 'the data starts at 4 KiB')
  t.match(shard.metadata, { format: 'pt', 'agentd.model': 'big', 'agentd.version': '1' })
  t.equal(shard.metadata['agentd.tp'], undefined, 'a whole pull names no layout')
  t.ok(tensors.every(x => shard.tensors.get(x.name)!.bytes.equals(x.data)), 'every tensor byte-exact')
  t.equal((await readSafetensorsHeader(out)).tensors.length, tensors.length, 'the agent\'s own reader accepts the file')
  t.notOk(existsSync(`${out}.pull-partial`) || existsSync(`${out}.pull-journal`), 'no partial file or journal left')
})

t.test('slices and tensors larger than the pool go into a file (into keys they are refused)', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key, {}, undefined, 64 * MiB)
  const b = await weightsNode(t, key, {}, undefined, pool)
  // 16 MiB each: four times B's pool; a rank's half of the first is 8 MiB, twice the pool.
  const tensors = [tensor('model.layers.0.mlp.down_proj.weight', 'bf16', [2048, 4096], 7), tensor('model.norm.weight', 'bf16', [4096, 2048], 8)]
  const source = join(a.dir, 'huge.safetensors')
  writeSafetensors(source, tensors)
  await a.weights.publish({ model: 'huge', version: 1, source: { kind: 'safetensors', path: source } })
  const layout = { tp: 2, rank: 1, rules: [{ pattern: 'down_proj', dim: 1 as const }] }
  await t.rejects(b.weights.pull({ from: a.weights.address(), model: 'huge', version: 1, layout }), { code: 'ERR_TIER_FULL', message: /do not fit the host pool/ }, 'into keys: refused')
  const out = join(b.dir, 'rank1.safetensors')
  const r = await b.weights.pull({ from: a.weights.address(), model: 'huge', version: 1, streams: 2, layout, out: { path: out, metadata: { 'agentd.layout': 'rules' } } })
  t.equal(r.bytes, 8 * MiB + 16 * MiB)
  const shard = readShard(out)
  t.same(shard.tensors.get(tensors[0]!.name)!.shape, [2048, 2048], 'the sliced shape')
  t.ok(shard.tensors.get(tensors[0]!.name)!.bytes.equals(columns(tensors[0]!, 2048, 2048)), 'rank 1\'s half (8 MiB, twice the pool), byte-exact')
  t.ok(shard.tensors.get(tensors[1]!.name)!.bytes.equals(tensors[1]!.data), 'a replicated 16 MiB tensor, byte-exact')
  t.match(shard.metadata, { 'agentd.model': 'huge', 'agentd.version': '1', 'agentd.tp': '2', 'agentd.rank': '1', 'agentd.layout': 'rules' })
  t.same(b.sm.storedKeys('weights/'), [])
})

t.test('a pull into a file cut off halfway: the repeat fetches only what the file lacks, and refetches a damaged piece', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key, {}, undefined, 64 * MiB)
  const b = await weightsNode(t, key, {}, undefined, pool)
  const tensors = layers(20, 24) // 24 MiB
  const source = join(a.dir, 'm.safetensors')
  writeSafetensors(source, tensors)
  await a.weights.publish({ model: 'm', version: 1, source: { kind: 'safetensors', path: source } })
  const out = join(b.dir, 'm.safetensors')
  const caller = new AbortController()
  await t.rejects(b.weights.pull({
    from: a.weights.address(), model: 'm', version: 1, streams: 2, out: { path: out }, signal: caller.signal,
    onProgress: done => { if (done > 10 * MiB) caller.abort(new AgentError('ERR_WEIGHTS_TRANSFER', 'the caller went away')) },
  }), { code: 'ERR_WEIGHTS_TRANSFER' })
  t.notOk(existsSync(out), 'no file under the final name')
  const journal = readFileSync(`${out}.pull-journal`, 'utf8').trim().split('\n').slice(1).map(l => JSON.parse(l) as { s: number, o: number, l: number, c: number })
  const journaled = journal.reduce((s, p) => s + p.l, 0)
  t.ok(journaled >= 10 * MiB && journaled < total(tensors), `${journaled / MiB} MiB journaled`)
  // Damage one journaled piece on disk (a write the power cut took): the repeat must not trust it.
  const damaged = journal[0]!
  const partial = readFileSync(`${out}.pull-partial`)
  const dataStart = 8 + Number(partial.readBigUInt64LE(0))
  const at = dataStart + damaged.s * MiB + damaged.o
  partial[at] = partial[at]! ^ 0xff
  writeFileSync(`${out}.pull-partial`, partial)

  const repeat = await b.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 2, out: { path: out } })
  t.equal(repeat.bytes, total(tensors))
  t.equal(repeat.bytesReceived, total(tensors) - journaled + damaged.l, 'only the missing pieces and the damaged one were fetched')
  const shard = readShard(out)
  t.ok(tensors.every(x => shard.tensors.get(x.name)!.bytes.equals(x.data)), 'the file is whole and byte-exact')
  t.notOk(existsSync(`${out}.pull-partial`) || existsSync(`${out}.pull-journal`), 'partial file and journal gone')

  // A pull of another version into the same path does not reuse the journal of this one.
  await a.weights.publish({ model: 'm', version: 2, source: { kind: 'safetensors', path: source } })
  const caller2 = new AbortController()
  const out2 = join(b.dir, 'm2.safetensors')
  await t.rejects(b.weights.pull({
    from: a.weights.address(), model: 'm', version: 1, streams: 1, out: { path: out2 }, signal: caller2.signal,
    onProgress: done => { if (done > 4 * MiB) caller2.abort(new AgentError('ERR_WEIGHTS_TRANSFER', 'the caller went away')) },
  }), { code: 'ERR_WEIGHTS_TRANSFER' })
  const other = await b.weights.pull({ from: a.weights.address(), model: 'm', version: 2, streams: 2, out: { path: out2 } })
  t.equal(other.bytesReceived, total(tensors), 'another version (another header) starts the file over')
  t.equal(readShard(out2).metadata['agentd.version'], '2')
})

t.test('refusals before a byte moves leave nothing; a version retired mid-pull leaves no partial file', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key, {}, undefined, 64 * MiB)
  const b = await weightsNode(t, key, {}, undefined, pool)
  const tensors = layers(40, 8)
  const source = join(a.dir, 'm.safetensors')
  writeSafetensors(source, tensors)
  await a.weights.publish({ model: 'm', version: 1, source: { kind: 'safetensors', path: source } })
  const from = a.weights.address()
  const exists = join(b.dir, 'exists.safetensors')
  writeFileSync(exists, 'keep me')
  await t.rejects(b.weights.pull({ from, model: 'm', version: 1, out: { path: exists } }), { code: 'ERR_BAD_REQUEST', message: /exists; pass overwrite/ })
  t.equal(readFileSync(exists, 'utf8'), 'keep me', 'the existing file is untouched')
  t.notOk(existsSync(`${exists}.pull-partial`), 'and no partial file was made')
  await t.rejects(b.weights.pull({ from, model: 'm', version: 1, out: { path: join(b.dir, 'm.bin') } }), { code: 'ERR_BAD_REQUEST', message: /ending in \.safetensors/ })
  await t.rejects(b.weights.pull({ from, model: 'm', version: 1, out: { path: join(b.dir, 'missing-dir', 'm.safetensors') } }), { code: 'ERR_NOT_FOUND' })

  // Links planted where the side files go (the directory is shared): never written through.
  const victim = join(b.dir, 'victim')
  writeFileSync(victim, 'precious')
  const planted = join(b.dir, 'planted.safetensors')
  symlinkSync(victim, `${planted}.pull-journal`)
  await t.rejects(b.weights.pull({ from, model: 'm', version: 1, out: { path: planted } }), { code: 'ERR_PATH_FORBIDDEN', message: /symbolic link/ })
  symlinkSync(victim, join(b.dir, 'planted2.safetensors.pull-partial'))
  await b.weights.pull({ from, model: 'm', version: 1, out: { path: join(b.dir, 'planted2.safetensors') } }) // a link without a journal is removed, not followed
  t.equal(readFileSync(victim, 'utf8'), 'precious', 'nothing written through the links')

  // Two pulls into one path at once: the one that comes while the other writes is refused, the writer
  // completes. The first goes through an uplink paced at 4 MiB/s, so it is still writing when the second comes.
  const path = join(b.dir, 'one.safetensors')
  const slow = await tcpProxy(t, from, c => c, () => undefined, 4 * MiB)
  const first = b.weights.pull({ from: slow.address, model: 'm', version: 1, out: { path } })
  for (const deadline = Date.now() + 10_000; !existsSync(`${path}.pull-partial`) && Date.now() < deadline;) await new Promise(resolve => setTimeout(resolve, 2))
  await t.rejects(b.weights.pull({ from, model: 'm', version: 1, out: { path } }), { code: 'ERR_BAD_REQUEST', message: /another pull of this agent is writing/ }, 'the second is refused while the first writes')
  await first
  t.ok(readShard(path).tensors.get(tensors[3]!.name)!.bytes.equals(tensors[3]!.data))
  const again = await b.weights.pull({ from, model: 'm', version: 1, out: { path, overwrite: true } })
  t.equal(again.bytesReceived, total(tensors), 'overwrite replaces the file')

  let retiring: Promise<unknown> | undefined
  const proxy = await tcpProxy(t, from, (chunk, seen, connection) => {
    if (connection === 0 && seen + chunk.length > 2 * MiB) { retiring ??= a.weights.retire('m', 1); return 'cut' }
    return chunk
  })
  const retiredOut = join(b.dir, 'retired.safetensors')
  await t.rejects(b.weights.pull({ from: proxy.address, model: 'm', version: 1, streams: 1, out: { path: retiredOut } }), { code: 'ERR_WEIGHTS_RETIRED' })
  await retiring
  t.notOk(existsSync(retiredOut) || existsSync(`${retiredOut}.pull-partial`) || existsSync(`${retiredOut}.pull-journal`), 'nothing of a retired version stays')
})
