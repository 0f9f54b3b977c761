/**
 * Files that must survive a crash whole or not at all (node id, mesh key,
 * incarnation, election state, weights manifests): written to a temp file
 * beside the target, fsynced, renamed over it, and then the directory is
 * fsynced, so a reader sees either the old or the new content and, once the
 * write resolved, a power cut cannot take the new name away again (rename
 * only changes the directory, whose own fsync makes it durable; etcd,
 * PostgreSQL and SQLite do the same).
 *
 * write-file-atomic is not used: it fsyncs the temp file and renames, but
 * never fsyncs the directory.
 *
 * `fs` is injectable so tests can see the order of the calls.
 */
import * as nodeFs from 'node:fs/promises'
import { dirname, join, relative, resolve, sep } from 'node:path'

/** The file-system calls these helpers make (node:fs/promises by default). */
export interface DurableFs {
  open: typeof nodeFs.open
  rename: typeof nodeFs.rename
  unlink: typeof nodeFs.unlink
  mkdir: typeof nodeFs.mkdir
}

let writes = 0

/**
 * Atomically replaces `file` with `data`, created with `mode` (e.g. 0o600 for secrets); durable when it resolves.
 * Each call writes its own temporary file, so concurrent writes of one file never mix (the last rename wins;
 * a caller that needs its latest state to win orders its writes).
 */
export async function writeFileDurably (file: string, data: string | Uint8Array, mode: number, fs: DurableFs = nodeFs): Promise<void> {
  const tmp = `${file}.${process.pid}.${++writes}.tmp`
  const handle = await fs.open(tmp, 'w', mode)
  try {
    await handle.writeFile(data)
    await handle.sync()
  } catch (err) {
    await handle.close()
    await fs.unlink(tmp).catch(() => {})
    throw err
  }
  await handle.close()
  await fs.rename(tmp, file)
  await syncDirectory(dirname(file), fs)
}

/** fsync(2) of a directory: makes the names created, renamed or removed in it durable. */
export async function syncDirectory (dir: string, fs: Pick<DurableFs, 'open'> = nodeFs): Promise<void> {
  const handle = await fs.open(dir, 'r')
  try {
    await handle.sync()
  } finally {
    await handle.close()
  }
}

/**
 * mkdir -p whose new directories are durable: each one created is fsynced
 * along with the directory holding it, so a file later made durable in `dir`
 * cannot be lost with a directory entry above it.
 */
export async function mkdirDurably (dir: string, mode: number, fs: DurableFs = nodeFs): Promise<void> {
  const first = await fs.mkdir(dir, { recursive: true, mode })
  if (first === undefined) return
  // first, then each directory below it down to dir
  const created = [resolve(first)]
  for (const part of relative(created[0]!, resolve(dir)).split(sep).filter(p => p !== '')) created.push(join(created.at(-1)!, part))
  for (const d of created.reverse()) await syncDirectory(d, fs)
  await syncDirectory(dirname(resolve(first)), fs)
}
