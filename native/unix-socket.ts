/**
 * Unix-socket operations Node.js lacks: SO_PEERCRED of a connected socket
 * (who is calling the local API) and the sd_notify datagram to systemd.
 */
import type { Socket } from 'node:net'
import { AgentError } from '../core/errors.ts'
import type { NativeBinding } from './native-binding.ts'
import { callNative } from './native-error.ts'

export interface PeerCredentials {
  pid: number
  uid: number
  gid: number
}

/** The file descriptor behind a connected net.Socket (libuv's handle), or the number given. */
function socketFd (socket: Socket | number): number {
  const fd = typeof socket === 'number'
    ? socket
    : (socket as unknown as { _handle?: { fd?: unknown } })._handle?.fd
  if (typeof fd !== 'number' || !Number.isInteger(fd) || fd < 0) {
    throw new AgentError('ERR_ARG_INVALID', 'expected a connected unix socket (or its file descriptor)')
  }
  return fd
}

/** Credentials of the process at the other end of a connected unix socket. */
export function peerCredentials (binding: NativeBinding, socket: Socket | number): PeerCredentials {
  const fd = socketFd(socket)
  return callNative(() => binding.peerCredentials(fd))
}

/**
 * sd_notify(3): sends `message` (e.g. "READY=1\nSTATUS=serving") to
 * $NOTIFY_SOCKET as one datagram; '@' at the start of the address means the
 * abstract namespace. Returns false when NOTIFY_SOCKET is not set (not run by
 * systemd with Type=notify); throws ERR_SYSTEM with the errno name when the
 * send fails.
 */
export function notifySystemd (binding: NativeBinding, message: string,
  env: NodeJS.ProcessEnv = process.env): boolean {
  const target = env.NOTIFY_SOCKET
  if (target === undefined || target === '') return false
  if (!target.startsWith('/') && !target.startsWith('@')) {
    throw new AgentError('ERR_ARG_INVALID', `NOTIFY_SOCKET must be an absolute path or start with '@', got ${target}`)
  }
  if (typeof message !== 'string' || message.length === 0) {
    throw new AgentError('ERR_ARG_INVALID', 'the sd_notify message must be a non-empty string')
  }
  callNative(() => binding.sendUnixDatagram(target, Buffer.from(message, 'utf8')))
  return true
}
