/**
 * The weight data plane's wire format (documented in PROTOCOL.md; keep both in
 * step). Little-endian throughout. One TCP connection carries:
 *
 *   server → client  HELLO   magic "AGWT", u16 protocol version, u16 0, 32-byte server nonce   (40 bytes)
 *   client → server  AUTH    magic "AGWA", 32-byte client nonce, 32-byte HMAC proof           (68 bytes)
 *   server → client  REPLY   to AUTH (status OK + 32-byte server proof, or an error)
 *   then requests and replies, in order, pipelined by the client:
 *   client → server  REQUEST header (16 bytes) + body
 *   server → client  REPLY   header (24 bytes) + payload
 *
 * Codec functions are pure (Buffers in and out); framing state lives in the
 * server and the puller.
 */
import { AgentError } from '../../core/errors.ts'
import type { SliceRange } from './reshard.ts'

export const protocolVersion = 1
export const helloMagic = 0x54574741 // "AGWT" read as u32 LE
export const authMagic = 0x41574741 // "AGWA"
export const requestMagic = 0x51574741 // "AGWQ"
export const replyMagic = 0x52574741 // "AGWR"
export const nonceBytes = 32
export const proofBytes = 32
export const helloBytes = 8 + nonceBytes
export const authBytes = 4 + nonceBytes + proofBytes
export const requestHeaderBytes = 16
export const replyHeaderBytes = 24
/** Largest request body a server reads; anything larger is malformed. */
export const maxRequestBodyBytes = 4096
/** Largest payload a READ may ask for (a chunk). */
export const maxReadBytes = 64 * 2 ** 20
/** Most ranges one sliced READ may name. */
export const maxSliceRanges = 16
/** Model names: one key segment. */
/** A model name becomes a directory under the state directory: letters, digits, "_", "-", "."; never "." or "..". */
export const modelNamePattern = /^(?!\.{1,2}$)[A-Za-z0-9_.-]{1,128}$/
/** "latest committed version" in a MANIFEST request. */
export const latestVersion = -1

export const Op = { auth: 1, manifest: 2, read: 3, have: 4, ucxOpen: 5, checksum: 6, ucxAddress: 7 } as const
export const Status = { ok: 0, notFound: 1, retired: 2, badRequest: 3, internal: 4, unauthorized: 5, corrupt: 6, notHeld: 7 } as const
export type StatusCode = typeof Status[keyof typeof Status]

const statusNames: Record<number, string> = { 0: 'ok', 1: 'not found', 2: 'retired', 3: 'bad request', 4: 'internal error', 5: 'unauthorized', 6: 'corrupt', 7: 'not held yet' }
export const statusName = (status: number): string => statusNames[status] ?? `status ${status}`

export function protocolError (message: string): AgentError {
  return new AgentError('ERR_WEIGHTS_PROTOCOL', message)
}

// ---- handshake ----

export function encodeHello (nonce: Buffer): Buffer {
  const b = Buffer.alloc(helloBytes)
  b.writeUInt32LE(helloMagic, 0)
  b.writeUInt16LE(protocolVersion, 4)
  nonce.copy(b, 8)
  return b
}

export function decodeHello (b: Buffer): { nonce: Buffer } {
  if (b.length !== helloBytes || b.readUInt32LE(0) !== helloMagic) throw protocolError('the peer is not an agentd weight server (bad HELLO)')
  const version = b.readUInt16LE(4)
  if (version !== protocolVersion) throw protocolError(`the weight server speaks protocol ${version}, this agent ${protocolVersion}`)
  return { nonce: Buffer.from(b.subarray(8)) }
}

export function encodeAuth (clientNonce: Buffer, proof: Buffer): Buffer {
  const b = Buffer.alloc(authBytes)
  b.writeUInt32LE(authMagic, 0)
  clientNonce.copy(b, 4)
  proof.copy(b, 4 + nonceBytes)
  return b
}

export function decodeAuth (b: Buffer): { clientNonce: Buffer, proof: Buffer } {
  if (b.length !== authBytes || b.readUInt32LE(0) !== authMagic) throw protocolError('bad AUTH frame')
  return { clientNonce: Buffer.from(b.subarray(4, 4 + nonceBytes)), proof: Buffer.from(b.subarray(4 + nonceBytes)) }
}

// ---- requests ----

export interface RequestHeader { op: number, requestId: number, bodyLength: number }

export function encodeRequestHeader (op: number, requestId: number, bodyLength: number): Buffer {
  const b = Buffer.alloc(requestHeaderBytes)
  b.writeUInt32LE(requestMagic, 0)
  b.writeUInt8(op, 4)
  b.writeUInt32LE(requestId, 8)
  b.writeUInt32LE(bodyLength, 12)
  return b
}

export function decodeRequestHeader (b: Buffer): RequestHeader {
  if (b.readUInt32LE(0) !== requestMagic) throw protocolError('bad request magic')
  const op = b.readUInt8(4)
  if (!Object.values(Op).includes(op as never) || op === Op.auth) throw protocolError(`unknown op ${op}`)
  const bodyLength = b.readUInt32LE(12)
  if (bodyLength > maxRequestBodyBytes) throw protocolError(`request body of ${bodyLength} bytes exceeds ${maxRequestBodyBytes}`)
  return { op, requestId: b.readUInt32LE(8), bodyLength }
}

/** MANIFEST body: i64 version (-1 = latest), u16 model length, model utf8. */
export function encodeManifestRequest (model: string, version: number): Buffer {
  const name = Buffer.from(model, 'utf8')
  const b = Buffer.alloc(10 + name.length)
  b.writeBigInt64LE(BigInt(version), 0)
  b.writeUInt16LE(name.length, 8)
  name.copy(b, 10)
  return b
}

export function decodeManifestRequest (b: Buffer): { model: string, version: number } {
  if (b.length < 10) throw protocolError('MANIFEST body too short')
  const version = Number(b.readBigInt64LE(0))
  const len = b.readUInt16LE(8)
  if (b.length !== 10 + len) throw protocolError('MANIFEST body length mismatch')
  return { model: checkModel(b.subarray(10).toString('utf8')), version: checkVersion(version, true) }
}

/**
 * UCX_OPEN reply (PROTOCOL.md "RDMA (UCX)"): the server's UCP worker address
 * and, per tensor of the version in table order, where its bytes are mapped
 * (address, decimal) and the packed remote key (hex) to read them with.
 */
export interface UcxOpenReply {
  worker: string
  tensors: Array<{ address: string, rkey: string }>
}

const isHex = (x: unknown): boolean => typeof x === 'string' && x.length > 0 && x.length % 2 === 0 && /^[0-9a-f]+$/.test(x)

/** Parses a UCX_ADDRESS reply: `{ "worker": "<hex UCP worker address>" }`, the server's worker address (hex). */
export function decodeUcxAddressReply (payload: Buffer): string {
  let reply: { worker?: unknown }
  try {
    reply = JSON.parse(payload.toString('utf8')) as { worker?: unknown }
  } catch {
    throw protocolError('UCX_ADDRESS reply is not JSON')
  }
  if (!isHex(reply?.worker)) throw protocolError('UCX_ADDRESS reply malformed (expected a worker address)')
  return reply.worker as string
}

/** Parses and checks the shape of a UCX_OPEN reply (the reader checks each tensor index it uses against it). */
export function decodeUcxOpenReply (payload: Buffer): UcxOpenReply {
  let reply: UcxOpenReply
  try {
    reply = JSON.parse(payload.toString('utf8')) as UcxOpenReply
  } catch {
    throw protocolError('UCX_OPEN reply is not JSON')
  }
  if (!isHex(reply?.worker) || !Array.isArray(reply.tensors) ||
    !reply.tensors.every(t => isHex(t?.rkey) && typeof t.address === 'string' && /^[1-9]\d{0,19}$/.test(t.address))) {
    throw protocolError('UCX_OPEN reply malformed (expected a worker address and a mapped address and remote key per tensor)')
  }
  return reply
}

/** A layout id as a HAVE names it (reshard.ts layoutId; the mesh record's bound). */
export const layoutIdPattern = /^[A-Za-z0-9_.-]{1,128}$/

/**
 * HAVE body: the MANIFEST body (an exact version), then optionally u16 layout
 * length and the layout id utf8: what the server holds of that (layout,
 * rank)'s slices. Without it: of the whole version.
 */
export function encodeHaveRequest (model: string, version: number, layout?: string): Buffer {
  const head = encodeManifestRequest(model, version)
  if (layout === undefined) return head
  const id = Buffer.from(layout, 'utf8')
  const tail = Buffer.alloc(2 + id.length)
  tail.writeUInt16LE(id.length, 0)
  id.copy(tail, 2)
  return Buffer.concat([head, tail])
}

export function decodeHaveRequest (b: Buffer): { model: string, version: number, layout?: string } {
  if (b.length < 10) throw protocolError('HAVE body too short')
  const end = 10 + b.readUInt16LE(8)
  if (b.length < end) throw protocolError('HAVE body length mismatch')
  const { model, version } = decodeManifestRequest(b.subarray(0, end))
  if (b.length === end) return { model, version }
  if (b.length < end + 2 || b.length !== end + 2 + b.readUInt16LE(end)) throw protocolError('HAVE layout length mismatch')
  const layout = b.subarray(end + 2).toString('utf8')
  if (!layoutIdPattern.test(layout)) throw protocolError(`HAVE layout ${JSON.stringify(layout.slice(0, 140))} is not a layout id`)
  return { model, version, layout }
}

/** What a source holds of a version (HAVE): per tensor, stored (served) or being fetched; one bit each, tensor i at bit i % 8 of byte i / 8. */
export interface Have {
  tensors: number
  held: Uint8Array
  fetching: Uint8Array
}

/** HAVE payload: u32 tensor count, then the held and the fetching bitmaps, ceil(count / 8) bytes each. */
export function encodeHave (have: Have): Buffer {
  const n = Math.ceil(have.tensors / 8)
  const b = Buffer.alloc(4 + 2 * n)
  b.writeUInt32LE(have.tensors, 0)
  Buffer.from(have.held.buffer, have.held.byteOffset, n).copy(b, 4)
  Buffer.from(have.fetching.buffer, have.fetching.byteOffset, n).copy(b, 4 + n)
  return b
}

export function decodeHave (b: Buffer): Have {
  if (b.length < 4) throw protocolError('HAVE payload too short')
  const tensors = b.readUInt32LE(0)
  const n = Math.ceil(tensors / 8)
  if (b.length !== 4 + 2 * n) throw protocolError('HAVE payload length mismatch')
  return { tensors, held: Uint8Array.from(b.subarray(4, 4 + n)), fetching: Uint8Array.from(b.subarray(4 + n)) }
}

export const hasBit = (bits: Uint8Array, i: number): boolean => ((bits[i >> 3] ?? 0) & (1 << (i & 7))) !== 0

/** A READ: bytes [byteOffset, byteOffset + byteLength) of a tensor's slice (dim null = the whole tensor). */
export interface ReadRequest {
  model: string
  version: number
  tensorIndex: number
  dim: number | null
  ranges: SliceRange[]
  byteOffset: number
  byteLength: number
}

const noDim = 255

/** READ body: u64 version, u32 tensor, u8 dim (255 = whole), u8 nRanges, u16 model length, u64 byteOffset, u32 byteLength, u32 0, nRanges × (u64 start, u64 count), model utf8. */
export function encodeReadRequest (r: ReadRequest): Buffer {
  const name = Buffer.from(r.model, 'utf8')
  const b = Buffer.alloc(32 + 16 * r.ranges.length + name.length)
  b.writeBigUInt64LE(BigInt(r.version), 0)
  b.writeUInt32LE(r.tensorIndex, 8)
  b.writeUInt8(r.dim ?? noDim, 12)
  b.writeUInt8(r.ranges.length, 13)
  b.writeUInt16LE(name.length, 14)
  b.writeBigUInt64LE(BigInt(r.byteOffset), 16)
  b.writeUInt32LE(r.byteLength, 24)
  let at = 32
  for (const range of r.ranges) {
    b.writeBigUInt64LE(BigInt(range.start), at)
    b.writeBigUInt64LE(BigInt(range.count), at + 8)
    at += 16
  }
  name.copy(b, at)
  return b
}

export function decodeReadRequest (b: Buffer): ReadRequest {
  if (b.length < 32) throw protocolError('READ body too short')
  const dimByte = b.readUInt8(12)
  const n = b.readUInt8(13)
  const nameLength = b.readUInt16LE(14)
  if (n > maxSliceRanges) throw protocolError(`READ names ${n} ranges, at most ${maxSliceRanges}`)
  if (b.length !== 32 + 16 * n + nameLength) throw protocolError('READ body length mismatch')
  if ((dimByte === noDim) !== (n === 0)) throw protocolError('READ: a slice needs a dim and at least one range; a whole tensor neither')
  const ranges: SliceRange[] = []
  for (let i = 0; i < n; i++) ranges.push({ start: safe(b.readBigUInt64LE(32 + 16 * i)), count: safe(b.readBigUInt64LE(40 + 16 * i)) })
  const byteLength = b.readUInt32LE(24)
  if (byteLength === 0 || byteLength > maxReadBytes) throw protocolError(`READ of ${byteLength} bytes (1..${maxReadBytes})`)
  return {
    version: checkVersion(safe(b.readBigUInt64LE(0)), false),
    tensorIndex: b.readUInt32LE(8),
    dim: dimByte === noDim ? null : dimByte,
    ranges,
    byteOffset: safe(b.readBigUInt64LE(16)),
    byteLength,
    model: checkModel(b.subarray(32 + 16 * n).toString('utf8')),
  }
}

// ---- replies ----

export interface ReplyHeader { status: number, requestId: number, payloadLength: number, crc32c: number }

export function encodeReplyHeader (status: number, requestId: number, payloadLength: number, crc32c: number): Buffer {
  const b = Buffer.alloc(replyHeaderBytes)
  b.writeUInt32LE(replyMagic, 0)
  b.writeUInt8(status, 4)
  b.writeUInt32LE(requestId, 8)
  b.writeUInt32LE(payloadLength, 12)
  b.writeUInt32LE(crc32c >>> 0, 16)
  return b
}

export function decodeReplyHeader (b: Buffer): ReplyHeader {
  if (b.readUInt32LE(0) !== replyMagic) throw protocolError('bad reply magic (the stream is out of step)')
  return { status: b.readUInt8(4), requestId: b.readUInt32LE(8), payloadLength: b.readUInt32LE(12), crc32c: b.readUInt32LE(16) }
}

function safe (v: bigint): number {
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw protocolError('a number in the request is too large')
  return Number(v)
}

function checkModel (model: string): string {
  if (!modelNamePattern.test(model)) throw protocolError(`invalid model name ${JSON.stringify(model.slice(0, 64))}`)
  return model
}

function checkVersion (version: number, latestAllowed: boolean): number {
  if (latestAllowed && version === latestVersion) return version
  if (!Number.isSafeInteger(version) || version < 0) throw protocolError(`invalid version ${version}`)
  return version
}
