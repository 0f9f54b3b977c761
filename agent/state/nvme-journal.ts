/**
 * The NVMe tier's metadata journal: one line per record,
 * `<crc32 of the JSON, 8 hex digits> <JSON>\n`, appended and fdatasynced
 * before `append` resolves. Concurrent appends are group-committed (one write
 * and one fdatasync for everything queued). Replay stops at the first line
 * whose checksum or JSON is wrong: a torn tail left by a crash is ignored.
 */
import { open, rename, type FileHandle } from 'node:fs/promises'
import { crc32 } from 'node:zlib'
import { dirname } from 'node:path'
import { syncDirectory } from '../../core/durable-file.ts'

/**
 * `owner` of a put: the uid owning the key's namespace (namespace-owners.ts);
 * absent for the agent's own keys and in records written before owners were.
 */
export type JournalRecord =
  | { op: 'put', key: string, bytes: number, checksum: number, object: string, owner?: number }
  | { op: 'del', key: string }

export interface ReplayResult {
  records: JournalRecord[]
  /** Lines after the last valid one (a torn write), ignored. */
  tornLines: number
}

export function encodeRecord (record: JournalRecord): string {
  const json = JSON.stringify(record)
  return `${crc32(json).toString(16).padStart(8, '0')} ${json}\n`
}

export function replayJournal (text: string): ReplayResult {
  const lines = text.split('\n')
  if (lines.at(-1) === '') lines.pop()
  const records: JournalRecord[] = []
  for (let i = 0; i < lines.length; i++) {
    const record = decodeLine(lines[i]!)
    if (record === undefined) return { records, tornLines: lines.length - i }
    records.push(record)
  }
  return { records, tornLines: 0 }
}

function decodeLine (line: string): JournalRecord | undefined {
  const m = /^([0-9a-f]{8}) (.*)$/.exec(line)
  if (m === null || crc32(m[2]!) !== Number.parseInt(m[1]!, 16)) return undefined
  try {
    const r = JSON.parse(m[2]!) as JournalRecord
    if (r.op === 'put' && typeof r.key === 'string' && Number.isSafeInteger(r.bytes) && Number.isInteger(r.checksum) && typeof r.object === 'string' &&
      (r.owner === undefined || (Number.isSafeInteger(r.owner) && r.owner >= 0))) return r
    if (r.op === 'del' && typeof r.key === 'string') return r
  } catch {}
  return undefined
}

export interface JournalWriter {
  /** Resolves once the record is on disk (fdatasync). */
  append(record: JournalRecord): Promise<void>
  close(): Promise<void>
}

/** Opens `path` for appending (created if missing). */
export async function openJournalWriter (path: string): Promise<JournalWriter> {
  const handle = await open(path, 'a', 0o640)
  let queue: Array<{ line: string, done: PromiseWithResolvers<void> }> = []
  let flushing: Promise<void> | undefined

  async function flush (): Promise<void> {
    while (queue.length > 0) {
      const batch = queue
      queue = []
      try {
        await handle.write(batch.map(b => b.line).join(''))
        await handle.datasync()
        for (const b of batch) b.done.resolve()
      } catch (err) {
        for (const b of batch) b.done.reject(err)
      }
    }
    flushing = undefined
  }

  return {
    append (record) {
      const done = Promise.withResolvers<void>()
      queue.push({ line: encodeRecord(record), done })
      flushing ??= flush()
      return done.promise
    },
    async close () {
      await flushing
      await handle.close()
    },
  }
}

/** Atomically replaces the journal with `records` (write temp, fsync, rename, fsync the directory). */
export async function rewriteJournal (path: string, records: JournalRecord[]): Promise<void> {
  const tmp = `${path}.compact`
  const handle: FileHandle = await open(tmp, 'w', 0o640)
  try {
    await handle.write(records.map(encodeRecord).join(''))
    await handle.sync()
  } finally {
    await handle.close()
  }
  await rename(tmp, path)
  await syncDirectory(dirname(path))
}
