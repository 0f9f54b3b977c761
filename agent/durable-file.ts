/**
 * Small files that must survive a crash whole or not at all (node id, mesh
 * key, incarnation): written to a temp file beside the target, fsynced, then
 * renamed over it, so a reader sees either the old or the new content.
 */
import { open, rename, unlink } from 'node:fs/promises'

/** Atomically replaces `file` with `data`, created with `mode` (e.g. 0o600 for secrets). */
export async function writeFileDurably (file: string, data: string | Uint8Array, mode: number): Promise<void> {
  const tmp = `${file}.${process.pid}.tmp`
  const handle = await open(tmp, 'w', mode)
  try {
    await handle.writeFile(data)
    await handle.sync()
  } catch (err) {
    await handle.close()
    await unlink(tmp).catch(() => {})
    throw err
  }
  await handle.close()
  await rename(tmp, file)
}
