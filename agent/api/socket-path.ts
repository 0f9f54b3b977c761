/**
 * Ownership of the API socket path. Before listening, the agent claims the
 * path: a live agent answering there makes start-up fail (ERR_SOCKET_IN_USE);
 * a stale socket left by a killed agent (connection refused) is removed; any
 * other kind of file is never removed. After listening, mode and group are set.
 */
import { connect } from 'node:net'
import { chmod, chown, lstat, mkdir, readFile, unlink } from 'node:fs/promises'
import { dirname } from 'node:path'
import { AgentError } from '../../core/errors.ts'

/** Throws ERR_SOCKET_IN_USE when a live process listens on `path`; removes a stale socket. */
export async function claimSocketPath (path: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o755 })
  let stat
  try {
    stat = await lstat(path)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return
    throw err
  }
  if (!stat.isSocket()) {
    throw new AgentError('ERR_SOCKET_IN_USE', `${path} exists and is not a socket; refusing to replace it (move it away or set api.socketPath)`)
  }
  if (await isListening(path)) {
    throw new AgentError('ERR_SOCKET_IN_USE', `another agent is already listening on ${path}; stop it first or use another --socket`)
  }
  await unlink(path)
}

/** True when something accepts connections on the unix socket `path`. */
export function isListening (path: string, timeoutMs = 1000): Promise<boolean> {
  return new Promise(resolve => {
    const socket = connect(path)
    const done = (answer: boolean): void => { socket.destroy(); resolve(answer) }
    socket.setTimeout(timeoutMs, () => done(true))
    socket.once('connect', () => done(true))
    socket.once('error', err => done((err as NodeJS.ErrnoException).code === 'EAGAIN'))
  })
}

/** Applies the configured octal mode and group to the listening socket. */
export async function setSocketPermissions (path: string, mode: string, group: string): Promise<void> {
  if (group !== '') {
    const gid = await lookupGroupId(group)
    if (gid === undefined) {
      throw new AgentError('ERR_UNAVAILABLE', `socket group "${group}" does not exist; create it (systemd/install.sh does) or set api.socketGroup = ""`)
    }
    await chown(path, -1, gid)
  }
  await chmod(path, Number.parseInt(mode, 8))
}

async function lookupGroupId (group: string): Promise<number | undefined> {
  const lines = (await readFile('/etc/group', 'utf8')).split('\n')
  const entry = lines.map(l => l.split(':')).find(f => f[0] === group)
  return entry?.[2] !== undefined ? Number(entry[2]) : undefined
}
