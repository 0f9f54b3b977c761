/**
 * Who is calling: SO_PEERCRED (pid, uid, gid) of the unix-socket connection,
 * read once per connection through the native addon. Authorization
 * (authorization.ts) checks its uid and gid; the device lock ties holders to its pid.
 */
import type { Socket } from 'node:net'
import { peerCredentials, type PeerCredentials } from '../../native/index.ts'

const byConnection = new WeakMap<Socket, PeerCredentials | null>()

/** The peer of `socket`, or null when it cannot be read (addon missing, not a unix socket). */
export function callerOf (socket: Socket): PeerCredentials | null {
  let caller = byConnection.get(socket)
  if (caller === undefined) {
    try {
      caller = peerCredentials(socket)
    } catch {
      caller = null
    }
    byConnection.set(socket, caller)
  }
  return caller
}
