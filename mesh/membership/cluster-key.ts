/**
 * The cluster key: a 32-byte pre-shared key in libp2p's private-network (pnet)
 * file format, shared by every agent of a cluster. A connection from a node
 * with another key fails in the pnet handshake, before any protocol runs.
 *
 *   /key/swarm/psk/1.0.0/
 *   /base16/
 *   <64 hex digits>
 */
import { randomBytes } from 'node:crypto'
import { mkdir, readFile, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { AgentError } from '../../core/errors.ts'
import { writeFileDurably } from '../../core/durable-file.ts'

const header = '/key/swarm/psk/1.0.0/\n/base16/\n'
const keyPattern = /^\/key\/swarm\/psk\/1\.0\.0\/\r?\n\/base16\/\r?\n([0-9a-fA-F]{64})\s*$/

/** A new random key as the text of a key file (with a trailing newline). */
export function generateClusterKey (): string {
  return `${header}${randomBytes(32).toString('hex')}\n`
}

/**
 * The key file's content normalised to what @libp2p/pnet parses (no trailing
 * newline, lower-case hex). Throws ERR_CLUSTER_KEY_INVALID naming `source`.
 */
export function parseClusterKey (text: string, source: string): Uint8Array {
  const match = keyPattern.exec(text)
  if (match === null) {
    throw new AgentError('ERR_CLUSTER_KEY_INVALID',
      `${source} is not a cluster key: expected "/key/swarm/psk/1.0.0/", "/base16/" and 64 hex digits on three lines (agentctl keygen prints one)`)
  }
  return new TextEncoder().encode(`${header}${match[1]!.toLowerCase()}`)
}

/** Reads and parses the key file; a key readable by others than its owner and group is refused. */
export async function loadClusterKey (file: string): Promise<Uint8Array> {
  let text: string
  try {
    const info = await stat(file)
    if ((info.mode & 0o007) !== 0) {
      throw new AgentError('ERR_CLUSTER_KEY_INVALID', `cluster key ${file} is readable by others (mode ${(info.mode & 0o777).toString(8)}); chmod 0640 it`)
    }
    text = await readFile(file, 'utf8')
  } catch (cause) {
    if (cause instanceof AgentError) throw cause
    throw new AgentError('ERR_CLUSTER_KEY_INVALID',
      `cannot read the cluster key ${file}: ${(cause as Error).message}. Create one with \`agentctl keygen > ${file}\` on one node and copy it to every node (or set mesh.clusterKeyFile / --cluster-key)`,
      { cause })
  }
  return parseClusterKey(text, file)
}

/** --dev without a key: `<stateDir>/cluster.key`, generated on first start. */
export async function loadOrCreateDevClusterKey (stateDir: string): Promise<{ file: string, key: Uint8Array }> {
  const file = join(stateDir, 'cluster.key')
  await mkdir(stateDir, { recursive: true, mode: 0o750 })
  try {
    return { file, key: await loadClusterKey(file) }
  } catch (err) {
    if ((err as AgentError).cause === undefined || ((err as AgentError).cause as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  await writeFileDurably(file, generateClusterKey(), 0o600)
  return { file, key: await loadClusterKey(file) }
}
