/**
 * The node's mesh identity: an Ed25519 key pair in `<stateDir>/mesh.key`
 * (libp2p protobuf encoding, mode 0600), created on first start. The peer id
 * is derived from it, so a node keeps its peer id across restarts; deleting
 * the file makes it a new member.
 */
import { mkdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { generateKeyPair, privateKeyFromProtobuf, privateKeyToProtobuf } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { AgentError } from '../../core/errors.ts'
import { writeFileDurably } from '../../core/durable-file.ts'

export async function loadOrCreateNodeKey (stateDir: string): Promise<PrivateKey> {
  await mkdir(stateDir, { recursive: true, mode: 0o750 })
  const file = join(stateDir, 'mesh.key')
  try {
    const bytes = await readFile(file)
    try {
      return privateKeyFromProtobuf(bytes)
    } catch (cause) {
      throw new AgentError('ERR_INTERNAL', `${file} does not hold a mesh key; move it away to create a new mesh identity`, { cause })
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  const key = await generateKeyPair('Ed25519')
  await writeFileDurably(file, privateKeyToProtobuf(key), 0o600)
  return key
}
