/**
 * The node's incarnation number (SWIM): persisted in `<stateDir>/mesh.incarnation`
 * and raised on every start, so a restarted agent rejoins with a higher
 * incarnation than any message its previous run sent, and raised again whenever
 * the agent refutes a suspicion or death claim about itself.
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { writeFileDurably } from '../../core/durable-file.ts'

export interface IncarnationStore {
  /** The current incarnation. */
  readonly current: number
  /** Raises the incarnation above `atLeast` (and the current one), persists it, returns it. */
  raiseAbove(atLeast: number): Promise<number>
}

/** Reads the last incarnation, persists last + 1 and returns the store (first start: 1). */
export async function openIncarnationStore (stateDir: string): Promise<IncarnationStore> {
  const file = join(stateDir, 'mesh.incarnation')
  let last = 0
  try {
    const text = (await readFile(file, 'utf8')).trim()
    if (/^\d+$/.test(text)) last = Number(text)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  let current = last + 1
  let writing = Promise.resolve()
  const persist = (value: number): Promise<void> => {
    // Writes are serialised so a slower earlier write never lands after a later one.
    writing = writing.then(() => writeFileDurably(file, `${value}\n`, 0o640))
    return writing
  }
  await persist(current)
  return {
    get current () { return current },
    async raiseAbove (atLeast) {
      current = Math.max(current, atLeast) + 1
      await persist(current)
      return current
    },
  }
}
