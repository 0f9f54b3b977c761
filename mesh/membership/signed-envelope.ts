/**
 * The wire form of every mesh message: one version byte, the sender's 64-byte
 * Ed25519 signature, then the message as UTF-8 JSON. The signature covers a
 * domain prefix plus the JSON bytes exactly as sent; the public key comes from
 * the `from` peer id inside the message (Ed25519 peer ids embed the key), so
 * a relayed or stored message stays verifiable.
 *
 * decodeEnvelope never throws: anything wrong comes back as a reason, which
 * the caller counts (oversized, malformed, schema, signature).
 */
import { createPublicKey, verify, type KeyObject } from 'node:crypto'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { peerIdFromString } from '@libp2p/peer-id'
import type { PrivateKey } from '@libp2p/interface'
import { MeshMessageSchema, type MeshMessage } from './mesh-messages.ts'

const formatVersion = 1
const signatureBytes = 64
const headerBytes = 1 + signatureBytes
/** Bytes an envelope adds to the message's JSON: a receiver's size bound covers them too. */
export const envelopeHeaderBytes = headerBytes
const domain = new TextEncoder().encode('agentd/mesh/1\n')
const checkMessage = TypeCompiler.Compile(MeshMessageSchema)

export type InvalidReason = 'oversized' | 'malformed' | 'schema' | 'signature'

export type DecodeResult = { ok: true, message: MeshMessage } | { ok: false, reason: InvalidReason, detail: string }

export async function encodeEnvelope (message: MeshMessage, key: PrivateKey): Promise<Uint8Array> {
  const body = new TextEncoder().encode(JSON.stringify(message))
  const signature = await key.sign(signedBytes(body))
  const out = new Uint8Array(headerBytes + body.length)
  out[0] = formatVersion
  out.set(signature, 1)
  out.set(body, headerBytes)
  return out
}

export async function decodeEnvelope (data: Uint8Array, maxBytes: number): Promise<DecodeResult> {
  if (data.length > maxBytes) return { ok: false, reason: 'oversized', detail: `${data.length} bytes > ${maxBytes}` }
  if (data.length <= headerBytes || data[0] !== formatVersion) return { ok: false, reason: 'malformed', detail: 'not a version-1 envelope' }
  const body = data.subarray(headerBytes)
  let message: unknown
  try {
    message = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body))
  } catch (err) {
    return { ok: false, reason: 'malformed', detail: (err as Error).message }
  }
  const schemaError = meshMessageSchemaError(message)
  if (schemaError !== undefined) return { ok: false, reason: 'schema', detail: schemaError }
  const valid = message as MeshMessage
  try {
    const publicKey = senderKey(valid.from)
    if (publicKey === undefined) return { ok: false, reason: 'signature', detail: 'sender peer id carries no Ed25519 key' }
    if (!verify(null, signedBytes(body), publicKey, data.subarray(1, headerBytes))) return { ok: false, reason: 'signature', detail: 'signature does not match the sender' }
  } catch (err) {
    return { ok: false, reason: 'signature', detail: (err as Error).message }
  }
  return { ok: true, message: valid }
}

/** Why `message` is not a mesh message receivers accept (the schema check of decodeEnvelope); undefined when it is one. */
export function meshMessageSchemaError (message: unknown): string | undefined {
  if (checkMessage.Check(message)) return undefined
  const first = checkMessage.Errors(message).First()
  return first !== undefined ? `${first.path || '/'}: ${first.message}` : 'does not match the schema'
}

/** Most sender keys kept; past it the cache starts afresh (a cluster has far fewer members). */
const maxCachedKeys = 4096
const senderKeys = new Map<string, KeyObject | undefined>()

/**
 * The Ed25519 public key a peer id embeds, as a node:crypto key object,
 * parsed once per sender: decoding the peer id and importing the key cost
 * about as much as the verification itself, for every message received.
 */
function senderKey (peerId: string): KeyObject | undefined {
  if (senderKeys.has(peerId)) return senderKeys.get(peerId)
  const publicKey = peerIdFromString(peerId).publicKey
  const key = publicKey?.type === 'Ed25519'
    ? createPublicKey({ format: 'jwk', key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(publicKey.raw).toString('base64url') } })
    : undefined
  if (senderKeys.size >= maxCachedKeys) senderKeys.clear()
  senderKeys.set(peerId, key)
  return key
}

function signedBytes (body: Uint8Array): Uint8Array {
  const out = new Uint8Array(domain.length + body.length)
  out.set(domain)
  out.set(body, domain.length)
  return out
}
