/**
 * File paths that reach the agent through its API (materialize's output,
 * a safetensors file to publish) are confined to configured directories
 * (`api.pathRoots`): the agent runs as a service user, often root, and must
 * not read or write a file its caller names elsewhere.
 *
 * Contract: the path must be absolute and free of NUL. For reading, the
 * file's real path (every symlink resolved) must lie inside the real path of
 * a root. For writing, the real path of its directory must, and the file
 * itself must not be a symlink. Otherwise ERR_PATH_FORBIDDEN (403) naming
 * the roots. Returns the resolved path, which the caller uses from then on.
 * A root that does not exist confines nothing.
 */
import { lstat, realpath } from 'node:fs/promises'
import { basename, dirname, isAbsolute, join, relative } from 'node:path'
import { AgentError } from '../../../core/errors.ts'

export async function confinedPath (path: string, roots: readonly string[], mode: 'read' | 'write', what: string): Promise<string> {
  if (!isAbsolute(path) || path.includes('\0')) throw new AgentError('ERR_BAD_REQUEST', `${what} must be an absolute path, got ${JSON.stringify(path.slice(0, 200))}`)
  const realRoots = (await Promise.all(roots.map(r => realpath(r).catch(() => undefined)))).filter((r): r is string => r !== undefined)
  const forbidden = (): AgentError => new AgentError('ERR_PATH_FORBIDDEN', `${what} ${path} is outside the directories the API may ${mode === 'read' ? 'read' : 'write'} (api.pathRoots: ${roots.length > 0 ? roots.join(', ') : 'none'})`)
  const inside = (p: string): boolean => realRoots.some(root => { const rel = relative(root, p); return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel)) })
  if (mode === 'read') {
    const real = await realpath(path).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT' || err.code === 'ENOTDIR') throw new AgentError('ERR_NOT_FOUND', `${what} ${path} does not exist`)
      throw new AgentError('ERR_BAD_REQUEST', `${what} ${path}: ${err.message}`)
    })
    if (!inside(real)) throw forbidden()
    return real
  }
  const dir = await realpath(dirname(path)).catch(() => { throw new AgentError('ERR_NOT_FOUND', `the directory of ${what} ${path} does not exist`) })
  if (!inside(dir)) throw forbidden()
  const target = join(dir, basename(path))
  const link = await lstat(target).then(s => s.isSymbolicLink(), () => false)
  if (link) throw new AgentError('ERR_PATH_FORBIDDEN', `${what} ${path} is a symbolic link; the agent does not write through links`)
  return target
}
