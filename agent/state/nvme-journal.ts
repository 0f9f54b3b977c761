/**
 * The NVMe tier's metadata journal: one line per record,
 * `<crc32 of the JSON, 8 hex digits> <JSON>\n`, appended durably (the file is
 * open with O_DSYNC: a write returns once its bytes are on disk, as a write
 * and an fdatasync would) before `append` resolves. Concurrent appends are
 * group-committed: one write for everything queued while the previous one
 * was in flight. Replay stops at the first line whose checksum or JSON is
 * wrong: a torn tail left by a crash is ignored. For the same reason a
 * writer whose write failed takes no more records: the file may end in part
 * of a line, which would hide every record appended after it.
 */
import { constants } from 'node:fs'
import { open, rename, type FileHandle } from 'node:fs/promises'
import { crc32 } from 'node:zlib'
import { dirname } from 'node:path'
import { syncDirectory } from '../../core/durable-file.ts'
import { AgentError } from '../../core/errors.ts'
import { sliceItems, yieldToEventLoop } from './event-loop-slices.ts'

/**
 * A put's `offset`: where the key's bytes start in the object file (0 when
 * absent, as in journals written before segments). Its `owner`: the uid
 * owning the key's namespace (namespace-owners.ts); absent for the agent's
 * own keys and in records written before owners were. Its `durable`: false
 * for a key that is on NVMe only because the host pool spilled it (stored
 * with durability "memory": a restart discards it); absent for a key
 * promised to survive a restart, and in records written before the flag.
 * A later put record of the same key replaces the earlier one (a key made
 * durable after it spilled is re-recorded without the flag).
 */
export type JournalRecord =
  | { op: 'put', key: string, bytes: number, checksum: number, object: string, offset?: number, owner?: number, durable?: false }
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


/** Decodes the journal's lines, pausing (yield) after each slice of them; returns what replayJournal does. */
function * replaySlices (text: string): Generator<void, ReplayResult> {
  const lines = text.split('\n')
  if (lines.at(-1) === '') lines.pop()
  const records: JournalRecord[] = []
  for (let i = 0; i < lines.length; i++) {
    if (i > 0 && i % sliceItems === 0) yield
    const record = decodeLine(lines[i]!)
    if (record === undefined) return { records, tornLines: lines.length - i }
    records.push(record)
  }
  return { records, tornLines: 0 }
}

export function replayJournal (text: string): ReplayResult {
  const slices = replaySlices(text)
  for (;;) {
    const step = slices.next()
    if (step.done === true) return step.value
  }
}

/** replayJournal that lets the event loop run between slices of lines (a journal of many keys takes a while). */
export async function replayJournalYielding (text: string): Promise<ReplayResult> {
  const slices = replaySlices(text)
  for (;;) {
    const step = slices.next()
    if (step.done === true) return step.value
    await yieldToEventLoop()
  }
}

function decodeLine (line: string): JournalRecord | undefined {
  const m = /^([0-9a-f]{8}) (.*)$/.exec(line)
  if (m === null || crc32(m[2]!) !== Number.parseInt(m[1]!, 16)) return undefined
  try {
    const r = JSON.parse(m[2]!) as JournalRecord
    if (r.op === 'put' && typeof r.key === 'string' && Number.isSafeInteger(r.bytes) && Number.isInteger(r.checksum) && typeof r.object === 'string' &&
      (r.offset === undefined || (Number.isSafeInteger(r.offset) && r.offset >= 0)) &&
      (r.owner === undefined || (Number.isSafeInteger(r.owner) && r.owner >= 0)) && (r.durable === undefined || r.durable === false)) return r
    if (r.op === 'del' && typeof r.key === 'string') return r
  } catch {}
  return undefined
}

export interface JournalWriter {
  /** Resolves once the record is on disk (its O_DSYNC write returned). */
  append(record: JournalRecord): Promise<void>
  /** Appends `records` in order, in one write; resolves once all are on disk. */
  appendAll(records: readonly JournalRecord[]): Promise<void>
  close(): Promise<void>
}

/** Opens `path` for appending (created if missing). */
export async function openJournalWriter (path: string): Promise<JournalWriter> {
  const handle = await open(path, constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_DSYNC, 0o640)
  let queue: Array<{ lines: string, done: PromiseWithResolvers<void> }> = []
  let flushing: Promise<void> | undefined
  /** Set by the first failed write: every append after it fails with it. */
  let failed: unknown

  /** Appends `text` whole (a write may be short: the rest follows it). */
  async function writeAll (text: string): Promise<void> {
    const bytes = Buffer.from(text)
    for (let done = 0; done < bytes.length;) {
      const { bytesWritten } = await handle.write(bytes, done, bytes.length - done)
      if (bytesWritten === 0) throw new AgentError('ERR_IO', `journal ${path}: a write wrote nothing`)
      done += bytesWritten
    }
  }

  async function flush (): Promise<void> {
    // Starts after the tick that queued the first record: everything appended in that tick shares the write.
    await Promise.resolve()
    while (queue.length > 0) {
      const batch = queue
      queue = []
      try {
        if (failed !== undefined) throw failed
        await writeAll(batch.length === 1 ? batch[0]!.lines : batch.map(b => b.lines).join(''))
        for (const b of batch) b.done.resolve()
      } catch (err) {
        failed ??= new AgentError('ERR_IO', `NVMe journal ${path}: a write failed (${(err as Error).message}); no record is appended after it until a restart replays the journal`, { cause: err })
        for (const b of batch) b.done.reject(failed)
      }
    }
    flushing = undefined
  }

  const enqueue = (lines: string): Promise<void> => {
    const done = Promise.withResolvers<void>()
    queue.push({ lines, done })
    flushing ??= flush()
    return done.promise
  }

  return {
    append: record => enqueue(encodeRecord(record)),
    appendAll: records => enqueue(records.map(encodeRecord).join('')),
    async close () {
      await flushing
      await handle.close()
    },
  }
}

/**
 * Atomically replaces the journal with `records` (write temp, fsync, rename,
 * fsync the directory); encodes them in slices, the event loop running between.
 */
export async function rewriteJournal (path: string, records: JournalRecord[]): Promise<void> {
  const tmp = `${path}.compact`
  const handle: FileHandle = await open(tmp, 'w', 0o640)
  try {
    const text: string[] = []
    for (let i = 0; i < records.length; i += sliceItems) {
      if (i > 0) await yieldToEventLoop()
      text.push(records.slice(i, i + sliceItems).map(encodeRecord).join(''))
    }
    await handle.writeFile(text.join(''))
    await handle.sync()
  } finally {
    await handle.close()
  }
  await rename(tmp, path)
  await syncDirectory(dirname(path))
}
