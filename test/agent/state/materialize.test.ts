// Materialization to safetensors, checked by an independent reader (Python parsing the format by hand).
import t, { type Test } from 'tap'
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { pino } from 'pino'
import { parseKey } from '../../../agent/state/keys.ts'
import { chunkRuns, planTensors, safetensorsHeader } from '../../../agent/state/materialize.ts'
import { materialize } from '../../../agent/state/materialize.ts'
import { createStateManager, type StateManager } from '../../../agent/state/state-manager.ts'
import { diskDir, makeShm, patternBytes } from '../../native/helpers.ts'

const MiB = 2 ** 20
const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex')

/** A started StateManager with a 4 MiB pool (spilling to NVMe below 20 %) in a disk dir of its own, stopped at teardown. */
async function stateManager (t: Test, nvmeBytes: number): Promise<{ dir: string, sm: StateManager }> {
  const dir = diskDir(t)
  const sm = createStateManager({ hostPoolBytes: 4 * MiB, lockHostPool: false, nvmeDir: join(dir, 'nvme'), nvmeCapacityBytes: nvmeBytes, directIo: true, spillHighWatermark: 0.9, spillLowWatermark: 0.2, namespaceQuotaBytes: {}, prefetchHorizonMs: 0 }, { logger: pino({ level: 'silent' }) })
  await sm.start()
  t.teardown(() => sm.stop())
  return { dir, sm }
}

t.test('planTensors assembles chunks and refuses gaps, overlaps and mixed dtypes', async t => {
  const k = (s: string) => parseKey(s)
  const cols = [0, 1, 2, 3].map(i => k(`j/m/w:param@[0,${i * 8}]/[16,8]:f32#v1`))
  t.match(planTensors([...cols, k('j/m/b:param@[0]/[32]:f32#v1'), k('j/m/w:optim.exp_avg@[0,0]/[16,32]:f32#v1')]), [
    { name: 'b', shape: [32], bytes: 128 },
    { name: 'w', shape: [16, 32], bytes: 2048, chunks: cols },
    { name: 'w#optim.exp_avg', shape: [16, 32] },
  ])
  t.throws(() => planTensors(cols.slice(1)), /do not tile .* exactly \(384 of 512 elements present\)/)
  t.throws(() => planTensors([...cols, k('j/m/w:param@[0,4]/[16,8]:f32#v1')]), /overlapping chunks/)
  t.throws(() => planTensors([k('j/m/x:param@[0]/[4]:f32#v1'), k('j/m/x:param@[4]/[4]:bf16#v1')]), /disagree on dtype/)
  t.throws(() => planTensors([k('j/a/x:param@[0]/[4]:f32#v1'), k('j/b/x:param@[0]/[4]:f32#v1')]), /more than one namespace/)
})

t.test('chunkRuns: row chunks are one run, column chunks one run per row, 3-D', async t => {
  t.same([...chunkRuns(parseKey('j/m/w:param@[4,0]/[4,8]:u8#v1'), [16, 8])], [[0, 32, 32]])
  t.same([...chunkRuns(parseKey('j/m/w:param@[0,8]/[2,8]:u8#v1'), [2, 32])], [[0, 8, 8], [8, 40, 8]])
  t.same([...chunkRuns(parseKey('j/m/w:param@[1,0,2]/[1,2,2]:i16#v1'), [2, 2, 4])], [[0, 2 * (8 + 2), 4], [4, 2 * (8 + 4 + 2), 4]])
})

t.test('the header is JSON padded to 8 bytes with data offsets in order', async t => {
  const plan = planTensors([parseKey('j/m/a:param@[0]/[3]:u8#v1'), parseKey('j/m/b:param@[0]/[2]:f32#v1')])
  const h = safetensorsHeader(plan, { format: 'pt' })
  const n = Number(h.readBigUInt64LE(0))
  t.equal(n % 8, 0)
  t.same(JSON.parse(h.subarray(8, 8 + n).toString()), { __metadata__: { format: 'pt' }, a: { dtype: 'U8', shape: [3], data_offsets: [0, 3] }, b: { dtype: 'F32', shape: [2], data_offsets: [3, 11] } })
})

const reader = `
import hashlib, json, struct, sys, os
def read(path):
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return header, data
out = {}
for path in sys.argv[1:]:
    header, data = read(path)
    for name, info in header.items():
        if name == '__metadata__': continue
        a, b = info['data_offsets']
        assert b - a == len(data[a:b])
        out[name] = {'dtype': info['dtype'], 'shape': info['shape'], 'sha256': hashlib.sha256(data[a:b]).hexdigest(), 'file': os.path.basename(path)}
print(json.dumps(out))
`

t.test('materialize a TP-sharded namespace (some chunks on NVMe) and read it back independently', async t => {
  const { dir, sm } = await stateManager(t, 64 * MiB)
  // w: [256, 1024] u8, column-parallel over 4 ranks (each [256, 256]); bias [1024] whole; plus a decoy at another version.
  const full = patternBytes(256 * 1024, 42)
  for (let r = 0; r < 4; r++) {
    const chunk = Buffer.alloc(256 * 256)
    for (let row = 0; row < 256; row++) full.copy(chunk, row * 256, row * 1024 + r * 256, row * 1024 + r * 256 + 256)
    await sm.offload([{ key: `job/m/w:param@[0,${r * 256}]/[256,256]:u8#v3`, source: { kind: 'shm', name: makeShm(t, chunk), offset: 0 } }])
  }
  const bias = patternBytes(1024, 7)
  await sm.offload([{ key: 'job/m/bias:param@[0]/[1024]:u8#v3', source: { kind: 'shm', name: makeShm(t, bias), offset: 0 } }])
  const filler = makeShm(t, 4 * MiB)
  for (const i of [0, 1, 2, 3]) await sm.offload([{ key: `job/m/big${i}:param@[0]/[${MiB}]:u8#v2`, source: { kind: 'shm', name: filler, offset: i * MiB } }])
  t.ok(sm.residency().keys.some(k => k.tier === 'nvme' && k.key.includes('#v3')), 'some v3 chunks were spilled to NVMe')

  const path = join(dir, 'out', 'model.safetensors')
  await t.rejects(materialize(sm, { prefix: 'job/m/', version: 3, path: 'relative.safetensors' }), { code: 'ERR_BAD_REQUEST' })
  await t.rejects(materialize(sm, { prefix: 'job/m/', version: 9, path }), { code: 'ERR_KEY_NOT_FOUND' })
  execFileSync('mkdir', ['-p', join(dir, 'out')])
  const result = await materialize(sm, { prefix: 'job/m/', version: 3, path })
  t.same(result, { files: [path], index: null, tensors: 2, bytes: 256 * 1024 + 1024 })
  const read = JSON.parse(execFileSync('python3', ['-c', reader, path], { encoding: 'utf8' }))
  t.same(Object.keys(read).sort(), ['bias', 'w'])
  t.match(read.w, { dtype: 'U8', shape: [256, 1024] })
  t.equal(read.w.sha256, sha256(full), 'assembled weight equals the original full tensor')
  t.equal(read.bias.sha256, sha256(bias))
  t.notOk(existsSync(`${path}.partial`), 'no temporary file left')
  await t.rejects(materialize(sm, { prefix: 'job/m/', version: 3, path }), { code: 'ERR_BAD_REQUEST', message: /exists; pass overwrite/ })

  const split = join(dir, 'out', 'split.safetensors')
  const sharded = await materialize(sm, { prefix: 'job/m/', version: 2, path: split, maxFileBytes: MiB })
  t.equal(sharded.files.length, 4)
  t.match(sharded.index, /split\.safetensors\.index\.json$/)
  const index = JSON.parse(execFileSync('cat', [sharded.index!], { encoding: 'utf8' }))
  t.same(index.metadata, { total_size: 4 * MiB })
  const parts = JSON.parse(execFileSync('python3', ['-c', reader, ...sharded.files], { encoding: 'utf8' }))
  t.same(Object.fromEntries(Object.entries(parts).map(([name, v]) => [name, (v as { file: string }).file])), index.weight_map, 'index maps each tensor to its file')
  t.same(readdirSync(join(dir, 'out')).sort(), ['model.safetensors', ...[1, 2, 3, 4].map(i => `split-0000${i}-of-00004.safetensors`), 'split.safetensors.index.json'])
})

t.test('concurrent materializations of one new path: one writes it whole, the others are told it exists', async t => {
  const { dir, sm } = await stateManager(t, 16 * MiB)
  const data = [0, 1, 2, 3].map(i => patternBytes(256 * 1024, 100 + i))
  for (const [i, bytes] of data.entries()) await sm.offload([{ key: `job${i}/m/w:param@[0]/[${bytes.length}]:u8#v1`, source: { kind: 'shm', name: makeShm(t, bytes), offset: 0 } }])
  const path = join(dir, 'race.safetensors')
  const outcomes = await Promise.allSettled(data.map((_, i) => materialize(sm, { prefix: `job${i}/m/`, version: 1, path })))
  const won = outcomes.flatMap((o, i) => o.status === 'fulfilled' ? [i] : [])
  t.equal(won.length, 1, 'one writer wins')
  for (const o of outcomes) if (o.status === 'rejected') t.match(o.reason, { code: 'ERR_BAD_REQUEST', message: /exists; pass overwrite/ })
  const read = JSON.parse(execFileSync('python3', ['-c', reader, path], { encoding: 'utf8' }))
  t.equal(read.w.sha256, sha256(data[won[0]!]!), 'the file holds the winner\'s bytes, whole')
  t.same(readdirSync(dir).filter(f => f.startsWith('race')), ['race.safetensors'], 'no temporary file left')
})

t.test('named keys: each written whole under its name, in order, with metadata; bad lists refused before a byte is written', async t => {
  const { dir, sm } = await stateManager(t, 16 * MiB)
  const a = patternBytes(32 * 1024, 7)
  const b = patternBytes(16 * 1024, 8)
  const keyA = 'weights/m/q_proj.weight:param@[64,0]/[64,512]:u8#v3'
  const keyB = 'weights/m/qkv_proj.weight.tp2-r1:param@[0,0]/[64,512]:u8#v3'
  await sm.offload([{ key: keyA, source: { kind: 'shm', name: makeShm(t, a), offset: 0 } }])
  await sm.offload([{ key: keyB, source: { kind: 'shm', name: makeShm(t, Buffer.concat([b, b])), offset: 0 } }])
  const path = join(dir, 'shard.safetensors')
  const r = await materialize(sm, { tensors: [{ key: keyB, name: 'qkv_proj.weight' }, { key: keyA, name: 'q_proj.weight' }], metadata: { 'agentd.tp': '2' }, path })
  t.same([r.tensors, r.bytes], [2, a.length + 2 * b.length])
  const read = JSON.parse(execFileSync('python3', ['-c', reader, path], { encoding: 'utf8' }))
  t.same(Object.keys(read), ['qkv_proj.weight', 'q_proj.weight'], 'in the order given')
  t.equal(read['q_proj.weight'].sha256, sha256(a))
  t.same(read['q_proj.weight'].shape, [64, 512], 'the slice\'s shape, not the full tensor\'s')
  const head = readFileSync(path)
  t.match(JSON.parse(head.subarray(8, 8 + Number(head.readBigUInt64LE(0))).toString()).__metadata__, { format: 'pt', 'agentd.tp': '2' })

  const other = join(dir, 'bad.safetensors')
  await t.rejects(materialize(sm, { tensors: [{ key: keyA, name: 'x' }, { key: keyB, name: 'x' }], path: other }), { code: 'ERR_BAD_REQUEST', message: /the name x is given twice/ })
  await t.rejects(materialize(sm, { tensors: [{ key: keyA, name: 'x' }, { key: 'weights/m/gone:param@[0]/[4]:u8#v3', name: 'y' }], path: other }), { code: 'ERR_KEY_NOT_FOUND', message: /tensors\[1\]: weights\/m\/gone.* is not stored/ })
  await t.rejects(materialize(sm, { tensors: [{ key: keyA, name: 'x' }], prefix: 'weights/', version: 3, path: other }), { message: /not both/ })
  await t.rejects(materialize(sm, { tensors: [{ key: keyA, name: '__metadata__' }], path: other }), { message: /cannot name a safetensors tensor/ })
  await t.rejects(materialize(sm, { path: other }), { message: /give prefix and version, or tensors/ })
  await t.rejects(materialize(sm, { tensors: [{ key: keyA, name: 'x' }, { empty: { dtype: 'q4', shape: [0, 8] }, name: 'y' }], path: other }), { code: 'ERR_BAD_REQUEST', message: /tensors\[1\]\.empty\.dtype "q4" is not one of/ })
  await t.rejects(materialize(sm, { tensors: [{ empty: { dtype: 'bf16', shape: [2, 8] }, name: 'y' }], path: other }), { code: 'ERR_BAD_REQUEST', message: /has no 0 dimension/ })
  t.notOk(existsSync(other), 'no file written by a refused request')

  // A tensor of no elements (a rank whose vocab part is all padding) beside a stored one: a valid file safetensors reads.
  const withEmpty = join(dir, 'empty.safetensors')
  await materialize(sm, { tensors: [{ key: keyA, name: 'q_proj.weight' }, { empty: { dtype: 'bf16', shape: [0, 512] }, name: 'embed_tokens.weight' }], path: withEmpty })
  const readEmpty = JSON.parse(execFileSync('python3', ['-c', reader, withEmpty], { encoding: 'utf8' }))
  t.same(readEmpty['embed_tokens.weight'].shape, [0, 512], 'the empty tensor, with its shape')
  t.equal(readEmpty['q_proj.weight'].sha256, sha256(a), 'and the stored one intact')
})
