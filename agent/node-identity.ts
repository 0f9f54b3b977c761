/**
 * The node's persistent identity: a random UUID stored in `<stateDir>/node-id`,
 * created on first start (written to a temp file, fsynced, renamed) and read
 * back on every later start, so a node keeps its id across restarts.
 */
import { randomUUID } from 'node:crypto'
import { mkdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { AgentError } from '../core/errors.ts'
import { writeFileDurably } from '../core/durable-file.ts'

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

export async function loadOrCreateNodeId (stateDir: string): Promise<string> {
  await mkdir(stateDir, { recursive: true, mode: 0o750 })
  const file = join(stateDir, 'node-id')
  try {
    const id = (await readFile(file, 'utf8')).trim()
    if (!uuidPattern.test(id)) {
      throw new AgentError('ERR_INTERNAL', `${file} does not hold a node id (expected a UUID); move it away to create a new identity`)
    }
    return id
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  const id = randomUUID()
  await writeFileDurably(file, `${id}\n`, 0o640)
  return id
}
