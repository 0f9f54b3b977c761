/**
 * Mutual challenge-response on every data connection, keyed by the cluster
 * key (the same file the mesh uses; mesh/membership/cluster-key.ts). The key never goes
 * on the wire: both sides derive an authentication key from it and prove
 * knowledge with HMAC-SHA256 over both nonces (fresh per connection, so a
 * recorded exchange cannot be replayed).
 *
 *   authKey     = HMAC-SHA256(cluster key file bytes, "agentd weights data plane v1")
 *   clientProof = HMAC-SHA256(authKey, "client" | serverNonce | clientNonce)
 *   serverProof = HMAC-SHA256(authKey, "server" | clientNonce | serverNonce)
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import { nonceBytes } from './protocol.ts'

export interface DataAuth {
  newNonce(): Buffer
  clientProof(serverNonce: Buffer, clientNonce: Buffer): Buffer
  serverProof(serverNonce: Buffer, clientNonce: Buffer): Buffer
  /** Constant-time comparison. */
  equal(a: Buffer, b: Buffer): boolean
}

export function createDataAuth (clusterKey: Uint8Array): DataAuth {
  const authKey = createHmac('sha256', clusterKey).update('agentd weights data plane v1').digest()
  const proof = (label: string, a: Buffer, b: Buffer): Buffer => createHmac('sha256', authKey).update(label).update(a).update(b).digest()
  return {
    newNonce: () => randomBytes(nonceBytes),
    clientProof: (serverNonce, clientNonce) => proof('client', serverNonce, clientNonce),
    serverProof: (serverNonce, clientNonce) => proof('server', clientNonce, serverNonce),
    equal: (a, b) => a.length === b.length && timingSafeEqual(a, b),
  }
}
