/**
 * Who is calling: SO_PEERCRED (pid, uid, gid) of the unix-socket connection,
 * read once per connection through the native addon. Later services (device
 * lock, state ownership) use it to tie requests to client processes.
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
