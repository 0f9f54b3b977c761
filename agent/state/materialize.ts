/**
 * Materialization (DESIGN "StateManager"): export one namespace/version to
 * safetensors from host memory and NVMe, without a GPU. Chunks of a tensor
 * (keys that differ only in their offsets) are assembled into the full tensor;
 * together they must tile it exactly (no gap, no overlap).
 *
 * Tensor names: the fqn for `param` and `buffer`, `<fqn>#<role>` for `grad`
 * and `optim.*` (so optimizer state cannot collide with parameters).
 * Files: `path` itself when everything fits in `maxFileBytes`, otherwise
 * `<stem>-00001-of-0000N.safetensors` … plus `<stem>.safetensors.index.json`
 * (`{ metadata: { total_size }, weight_map }`, the Hugging Face layout).
 * Each file is written to a temporary name of its own (so concurrent
 * materializations never write into one file), fsynced, then put under its
 * final name: renamed when `overwrite`, else linked, which fails when the
 * name exists by then (ERR_BAD_REQUEST; of two concurrent writers of one new
 * name, one wins and the other is told the file exists). A crash never
 * leaves a half-written file under the final name.
 */
import { randomBytes } from 'node:crypto'
import { link, rename, stat, unlink } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import { AgentError } from '../../core/errors.ts'
import { copyHost, openDirectFile, type DirectFile } from '../../native/index.ts'
import { dtypeBytes, parseKey, type Dtype, type StateKey } from './keys.ts'
import type { StateManager } from './state-manager.ts'
import { syncDirectory, writeFileDurably } from '../../core/durable-file.ts'

/** Our dtype names → safetensors' (the header's "dtype"). */
export const safetensorsDtype: Record<Dtype, string> = {
  bool: 'BOOL', u8: 'U8', i8: 'I8', i16: 'I16', i32: 'I32', i64: 'I64', f16: 'F16', bf16: 'BF16', f32: 'F32', f64: 'F64', f8_e4m3: 'F8_E4M3', f8_e5m2: 'F8_E5M2',
}
const dtypeSize: Record<Dtype, number> = { bool: 1, u8: 1, i8: 1, i16: 2, i32: 4, i64: 8, f16: 2, bf16: 2, f32: 4, f64: 8, f8_e4m3: 1, f8_e5m2: 1 }

export interface MaterializeRequest {
  /** Keys whose text starts with this (usually a namespace followed by "/"), at `version`. */
  prefix?: string
  version?: number
  /**
   * Instead of prefix and version: exactly these stored keys, each written
   * whole as the tensor `name`, in this order (a resharded pull's slices,
   * named as the engine loads them). An item with `empty` instead of `key`
   * is a tensor of no elements (a rank whose vocab part is all padding): its
   * dtype and shape, one dimension 0.
   */
  tensors?: Array<{ key: string, name: string } | { empty: { dtype: string, shape: number[] }, name: string }>
  /** More __metadata__ entries (e.g. model, version, layout, tp and rank of a shard). */
  metadata?: Record<string, string>
  /** Output file, e.g. /ckpt/model.safetensors (absolute). */
  path: string
  /** Split into several files above this size. Default 5 GiB. */
  maxFileBytes?: number
  /** Replace existing files. Default false: ERR_BAD_REQUEST when the file exists. */
  overwrite?: boolean
}

export interface MaterializeResult {
  files: string[]
  /** The index file when split, else null. */
  index: string | null
  tensors: number
  bytes: number
}

/** One tensor of the output: its chunks and the assembled shape. */
export interface PlannedTensor {
  name: string
  dtype: Dtype
  shape: number[]
  bytes: number
  chunks: StateKey[]
}

/** Groups chunk keys into full tensors and checks that each is tiled exactly. Pure. */
export function planTensors (keys: readonly StateKey[]): PlannedTensor[] {
  const groups = new Map<string, StateKey[]>()
  for (const k of keys) {
    const name = k.role === 'param' || k.role === 'buffer' ? k.fqn : `${k.fqn}#${k.role}`
    const id = `${name}\u0000${k.namespace}`
    groups.set(id, [...(groups.get(id) ?? []), k])
  }
  const byName = new Map<string, PlannedTensor>()
  for (const chunks of groups.values()) {
    const first = chunks[0]!
    const name = first.role === 'param' || first.role === 'buffer' ? first.fqn : `${first.fqn}#${first.role}`
    if (byName.has(name)) throw new AgentError('ERR_BAD_REQUEST', `tensor ${name} exists in more than one namespace under this prefix; use a narrower prefix`)
    for (const c of chunks) {
      if (c.dtype !== first.dtype || c.shape.length !== first.shape.length) {
        throw new AgentError('ERR_BAD_REQUEST', `chunks of ${name} disagree on dtype or rank (${first.text} vs ${c.text})`)
      }
    }
    const shape = first.shape.map((_, d) => Math.max(...chunks.map(c => c.offsets[d]! + c.shape[d]!)))
    const total = shape.reduce((a, b) => a * b, 1)
    const covered = chunks.reduce((a, c) => a + c.shape.reduce((x, y) => x * y, 1), 0)
    const overlap = chunks.some((a, i) => chunks.some((b, j) => j > i && a.shape.every((_, d) => a.offsets[d]! < b.offsets[d]! + b.shape[d]! && b.offsets[d]! < a.offsets[d]! + a.shape[d]!)))
    if (overlap || covered !== total) {
      throw new AgentError('ERR_BAD_REQUEST', `chunks of ${name} do not tile its shape [${shape.join(',')}] exactly (${overlap ? 'overlapping chunks' : `${covered} of ${total} elements present`})`)
    }
    byName.set(name, { name, dtype: first.dtype, shape, bytes: total * dtypeSize[first.dtype], chunks })
  }
  return [...byName.values()].sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0)
}

/**
 * Contiguous runs of `chunk` inside the row-major full tensor: yields
 * [byte offset in the chunk, byte offset in the tensor, byte length].
 */
export function * chunkRuns (chunk: StateKey, shape: readonly number[]): Generator<[number, number, number]> {
  const size = dtypeSize[chunk.dtype]
  const rank = shape.length
  // Innermost dims the chunk covers fully merge into one run.
  let inner = rank
  while (inner > 0 && chunk.shape[inner - 1] === shape[inner - 1] && chunk.offsets[inner - 1] === 0) inner--
  const split = Math.max(0, inner - 1)
  const runElems = chunk.shape.slice(split).reduce((a, b) => a * b, 1)
  const strides = shape.map((_, d) => shape.slice(d + 1).reduce((a, b) => a * b, 1))
  const outer = chunk.shape.slice(0, split)
  const count = outer.reduce((a, b) => a * b, 1)
  const index = outer.map(() => 0)
  for (let n = 0; n < count; n++) {
    let dst = 0
    for (let d = 0; d < rank; d++) dst += (chunk.offsets[d]! + (d < split ? index[d]! : 0)) * strides[d]!
    yield [n * runElems * size, dst * size, runElems * size]
    for (let d = split - 1; d >= 0; d--) {
      if (++index[d]! < outer[d]!) break
      index[d] = 0
    }
  }
}

/**
 * The safetensors header for `tensors` laid out in order, its JSON padded
 * with spaces so that the data starts at a multiple of `alignment` (8, or a
 * multiple of it: 4096 lets the data be written with O_DIRECT).
 */
export function safetensorsHeader (tensors: readonly PlannedTensor[], metadata: Record<string, string>, alignment = 8): Buffer {
  const header: Record<string, unknown> = { __metadata__: metadata }
  let offset = 0
  for (const t of tensors) {
    header[t.name] = { dtype: safetensorsDtype[t.dtype], shape: t.shape, data_offsets: [offset, offset + t.bytes] }
    offset += t.bytes
  }
  const json = Buffer.from(JSON.stringify(header))
  const padded = Math.ceil((8 + json.length) / alignment) * alignment - 8
  const out = Buffer.alloc(8 + padded, 0x20)
  out.writeBigUInt64LE(BigInt(padded), 0)
  json.copy(out, 8)
  return out
}

export async function materialize (state: StateManager, request: MaterializeRequest): Promise<MaterializeResult> {
  if (!request.path.startsWith('/') || !request.path.endsWith('.safetensors')) {
    throw new AgentError('ERR_BAD_REQUEST', `path must be an absolute path ending in .safetensors, got ${JSON.stringify(request.path)}`)
  }
  const tensors = request.tensors !== undefined ? namedTensors(state, request) : tensorsUnder(state, request)
  const maxFileBytes = request.maxFileBytes ?? 5 * 2 ** 30
  const shards: PlannedTensor[][] = [[]]
  let size = 0
  for (const t of tensors) {
    if (size > 0 && size + t.bytes > maxFileBytes) { shards.push([]); size = 0 }
    shards.at(-1)!.push(t)
    size += t.bytes
  }
  const stem = basename(request.path, '.safetensors')
  const names = shards.length === 1
    ? [request.path]
    : shards.map((_, i) => join(dirname(request.path), `${stem}-${String(i + 1).padStart(5, '0')}-of-${String(shards.length).padStart(5, '0')}.safetensors`))
  const metadata = {
    ...request.metadata,
    format: 'pt',
    ...(request.prefix !== undefined ? { 'agentd.prefix': request.prefix, 'agentd.version': String(request.version) } : {}),
  }
  if (request.overwrite !== true) {
    for (const name of names) {
      if (await stat(name).then(() => true, () => false)) throw new AgentError('ERR_BAD_REQUEST', `${name} exists; pass overwrite to replace it`)
    }
  }
  for (let i = 0; i < shards.length; i++) await writeShard(state, names[i]!, shards[i]!, metadata, request.overwrite === true)
  let index: string | null = null
  if (shards.length > 1) {
    index = join(dirname(request.path), `${stem}.safetensors.index.json`)
    const weightMap = Object.fromEntries(shards.flatMap((s, i) => s.map(t => [t.name, basename(names[i]!)])))
    const totalSize = tensors.reduce((a, t) => a + t.bytes, 0)
    await writeFileDurably(index, JSON.stringify({ metadata: { total_size: totalSize }, weight_map: weightMap }, null, 2) + '\n', 0o644)
  }
  return { files: names, index, tensors: tensors.length, bytes: tensors.reduce((a, t) => a + t.bytes, 0) }
}

/** The tensors of a prefix at a version: chunks assembled, in name order. */
function tensorsUnder (state: StateManager, request: MaterializeRequest): PlannedTensor[] {
  if (request.prefix === undefined || request.version === undefined) throw new AgentError('ERR_BAD_REQUEST', 'give prefix and version, or tensors')
  const keys = state.storedKeys(request.prefix).filter(k => k.version === request.version)
  if (keys.length === 0) throw new AgentError('ERR_KEY_NOT_FOUND', `no stored keys under ${JSON.stringify(request.prefix)} at version ${request.version}`)
  return planTensors(keys)
}

/** Named stored keys, each a whole tensor, in the order given; every key checked before a byte is written. */
function namedTensors (state: StateManager, request: MaterializeRequest): PlannedTensor[] {
  if (request.prefix !== undefined || request.version !== undefined) throw new AgentError('ERR_BAD_REQUEST', 'give tensors, or prefix and version, not both')
  const seen = new Set<string>()
  return request.tensors!.map((item, i) => {
    const { name } = item
    if (name === '' || name === '__metadata__') throw new AgentError('ERR_BAD_REQUEST', `tensors[${i}].name ${JSON.stringify(name)} cannot name a safetensors tensor`)
    if (seen.has(name)) throw new AgentError('ERR_BAD_REQUEST', `tensors[${i}]: the name ${name} is given twice`)
    seen.add(name)
    if ('empty' in item) {
      const { dtype, shape } = item.empty
      if (!Object.hasOwn(dtypeBytes, dtype)) throw new AgentError('ERR_BAD_REQUEST', `tensors[${i}].empty.dtype ${JSON.stringify(dtype)} is not one of ${Object.keys(dtypeBytes).join(', ')}`)
      if (!shape.includes(0)) throw new AgentError('ERR_BAD_REQUEST', `tensors[${i}].empty.shape [${shape.join(', ')}] has no 0 dimension: a tensor with elements is given by its key`)
      return { name, dtype: dtype as Dtype, shape, bytes: 0, chunks: [] }
    }
    const k = parseKey(item.key)
    if (!state.storedKeys(k.text).some(s => s.text === k.text)) throw new AgentError('ERR_KEY_NOT_FOUND', `tensors[${i}]: ${k.text} is not stored`)
    return { name, dtype: k.dtype, shape: k.shape, bytes: k.bytes, chunks: [k] }
  })
}

async function writeShard (state: StateManager, path: string, tensors: PlannedTensor[], metadata: Record<string, string>, overwrite: boolean): Promise<void> {
  const tmp = `${path}.${process.pid}-${randomBytes(4).toString('hex')}.partial`
  const header = safetensorsHeader(tensors, metadata)
  let file: DirectFile | undefined
  try {
    file = openDirectFile(tmp, { create: true })
    const head = await state.scratch(header.length)
    try {
      header.copy(head.view, 0)
      await file.write(head.range, 0)
    } finally {
      head.release()
    }
    let offset = header.length
    for (const t of tensors) {
      await writeTensor(state, file, t, offset)
      offset += t.bytes
    }
    await file.sync()
    file.close()
    file = undefined
    await putInPlace(tmp, path, overwrite)
  } catch (err) {
    file?.close()
    await unlink(tmp).catch(() => {})
    throw err
  }
}

/**
 * Puts a written, fsynced file under its final name: renamed over it when
 * `overwrite`, else linked, which fails (ERR_BAD_REQUEST) when the name exists
 * by then; the directory is fsynced. On failure `tmp` is left to the caller.
 */
export async function putInPlace (tmp: string, path: string, overwrite: boolean): Promise<void> {
  if (overwrite) {
    await rename(tmp, path)
  } else {
    const linked = await link(tmp, path).then(() => true, (err: NodeJS.ErrnoException) => {
      if (err.code === 'EEXIST') throw new AgentError('ERR_BAD_REQUEST', `${path} exists; pass overwrite to replace it`)
      // A filesystem without hard links: the check before writing is then the only guard.
      if (err.code === 'EPERM' || err.code === 'ENOTSUP' || err.code === 'EOPNOTSUPP') return false
      throw err
    })
    if (linked) await unlink(tmp)
    else await rename(tmp, path)
  }
  await syncDirectory(dirname(path))
}

async function writeTensor (state: StateManager, file: DirectFile, tensor: PlannedTensor, fileOffset: number): Promise<void> {
  if (tensor.bytes === 0) return
  if (tensor.chunks.length === 1) {
    const bytes = await state.readHost(tensor.chunks[0]!.text)
    try { await file.write(bytes.range, fileOffset) } finally { bytes.release() }
    return
  }
  const whole = await state.scratch(tensor.bytes)
  try {
    for (const chunk of tensor.chunks) {
      const src = await state.readHost(chunk.text)
      try {
        for (const [from, to, length] of chunkRuns(chunk, tensor.shape)) {
          await copyHost(sub(whole.range, to, length), sub(src.range, from, length))
        }
      } finally {
        src.release()
      }
    }
    await file.write(whole.range, fileOffset)
  } finally {
    whole.release()
  }
}

function sub<T extends { memory: unknown, offset: number, length: number }> (range: T, offset: number, length: number): T {
  return { ...range, offset: range.offset + offset, length }
}
