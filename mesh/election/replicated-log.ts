/**
 * A voter's durable copy of the leader's decision log (Raft §5.3), compacted
 * to one snapshot: the desired state (the latest payload per decision kind)
 * as of log position (epoch, seq). `seq` is the log index — it counts from 1
 * across epochs, never restarts — and `epoch` is the term of the leader that
 * wrote entry `seq`. Since every decision replaces the whole payload of its
 * kind, the snapshot is the whole log: replicating it is Raft's
 * AppendEntries with InstallSnapshot on every call.
 *
 * Stored in <stateDir>/replicated-log.jsonl, one snapshot per line, appended
 * and fdatasynced before any call here resolves, so what a voter acknowledged
 * survives a crash. Reading takes the last line that parses (a torn last line
 * of a killed agent is skipped); once the file holds more than
 * compactAfterBytes it is replaced by its last line (durable-file.ts). One
 * append + fdatasync per decision, where a replaced file costs an fsync of
 * the file and one of its directory: on a busy disk that is most of a
 * decision's commit latency.
 *
 * Ordering: positions compare lexicographically, (epoch, seq). A follower
 * adopts a leader's snapshot only when it is newer than its own (a delayed,
 * older snapshot of the same leader changes nothing), and a snapshot of a
 * higher epoch always wins over entries of a lower one (Raft truncating a
 * deposed leader's uncommitted suffix). The vote restriction compares the
 * same positions (raft-election.ts).
 *
 * Fencing domain: the log belongs to one voter set. Opening or appending with
 * another voterSetId starts from the empty log.
 */
import { open, readFile, type FileHandle } from 'node:fs/promises'
import { join } from 'node:path'
import { writeFileDurably } from '../../core/durable-file.ts'
import { AgentError } from '../../core/errors.ts'

export interface LogPosition {
  /** Term of the leader that wrote entry `seq`; 0 for the empty log. */
  epoch: number
  /** Log index of the last entry, from 1; 0 for the empty log. */
  seq: number
}

export interface LogSnapshot extends LogPosition {
  voterSetId: string
  /** The desired state after entry `seq`: the latest payload per decision kind. */
  entries: Record<string, unknown>
}

export interface ReplicatedLog {
  /** The last position held for `voterSetId` ({0, 0} for another voter set). */
  last(voterSetId: string): LogPosition
  /** A copy of the snapshot held for `voterSetId` (the empty log for another). */
  snapshot(voterSetId: string): LogSnapshot
  /**
   * Leader: appends `kind` = `payload` as entry last.seq + 1 of `epoch`. The
   * returned snapshot holds it; it is durable when the promise resolves.
   * Appends are numbered in call order.
   */
  append(voterSetId: string, epoch: number, kind: string, payload: unknown): { snapshot: LogSnapshot, durable: Promise<void> }
  /**
   * Follower (or a new leader reading its committed state from elsewhere):
   * adopts `s` when newer than what is held; resolves, once durable, with
   * the position now held.
   */
  accept(s: LogSnapshot): Promise<LogPosition>
  /**
   * A new leader on a backend that keeps the committed log elsewhere (etcd):
   * replaces what is held with `s`, whatever it is, durable on resolve.
   */
  reset(s: LogSnapshot): Promise<void>
  /**
   * Waits for the writes in flight, then releases the file. Idempotent; a
   * write after it fails with ERR_ELECTION_STATE (the owner stopped).
   */
  close(): Promise<void>
}

export const emptyPosition: LogPosition = { epoch: 0, seq: 0 }

/** a < b, lexicographically by (epoch, seq). */
export function positionBefore (a: LogPosition, b: LogPosition): boolean {
  return a.epoch < b.epoch || (a.epoch === b.epoch && a.seq < b.seq)
}

/** A log file larger than this is rewritten as its last snapshot, bytes (or 8 snapshots, if larger). */
const compactAfterBytes = 1024 * 1024

export async function openReplicatedLog (stateDir: string): Promise<ReplicatedLog> {
  const file = join(stateDir, 'replicated-log.jsonl')
  let held: LogSnapshot = { ...emptySnapshot, entries: {} }
  let text = ''
  try {
    text = await readFile(file, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
      throw new AgentError('ERR_ELECTION_STATE', `cannot read ${file}: ${(err as Error).message}`, { cause: err })
    }
  }
  const lines = text.split('\n').filter(l => l !== '')
  for (let i = lines.length - 1; i >= 0; i--) {
    try { held = parseSnapshot(JSON.parse(lines[i]!)); break } catch (err) {
      // Only the last line can be torn (a kill mid-append); anything else is damage to report.
      if (i !== lines.length - 1) throw new AgentError('ERR_ELECTION_STATE', `cannot read ${file}: line ${i + 1}: ${(err as Error).message}`, { cause: err })
    }
  }
  let appender: FileHandle | undefined
  let closed = false
  let size = Buffer.byteLength(text)
  const write = async (s: LogSnapshot): Promise<void> => {
    if (closed) throw new AgentError('ERR_ELECTION_STATE', `${file} is closed: the election stopped`)
    const line = `${JSON.stringify(s)}\n`
    const bytes = Buffer.byteLength(line)
    if (appender === undefined || size + bytes > Math.max(compactAfterBytes, 8 * bytes)) {
      // (Re)start the file with this one snapshot: a durable replace, then appends to it.
      await appender?.close()
      appender = undefined
      await writeFileDurably(file, line, 0o600)
      appender = await open(file, 'a')
      size = bytes
      return
    }
    try {
      await appender.write(line)
      await appender.datasync()
    } catch (err) {
      // Whatever reached the file, the next write starts it afresh.
      await appender.close().catch(() => {})
      appender = undefined
      throw err
    }
    size += bytes
  }
  const close = async (): Promise<void> => {
    closed = true
    await appender?.close()
    appender = undefined
  }
  return createReplicatedLog(held, write, close)
}

const emptySnapshot: LogSnapshot = { voterSetId: '', epoch: 0, seq: 0, entries: {} }

/**
 * The log over any durable writer (`write` resolves once `s` survives a
 * crash): openReplicatedLog's file, or memory with delays in tests.
 * `release` frees the writer once the writes in flight are done.
 */
export function createReplicatedLog (initial: LogSnapshot, write: (s: LogSnapshot) => Promise<void>, release: () => Promise<void> = async () => {}): ReplicatedLog {
  let held = initial
  let chain: Promise<void> = Promise.resolve()
  /** Writes `held` as it is now; writes are serialized, so the store ends with the latest state. */
  const persist = (): Promise<void> => {
    const s = held
    chain = chain.catch(() => {}).then(() => write(s))
    return chain
  }
  const inDomain = (voterSetId: string): LogSnapshot =>
    held.voterSetId === voterSetId ? held : { ...emptySnapshot, voterSetId, entries: {} }
  const copy = (s: LogSnapshot): LogSnapshot => ({ ...s, entries: { ...s.entries } })

  return {
    last (voterSetId) { const s = inDomain(voterSetId); return { epoch: s.epoch, seq: s.seq } },
    snapshot: voterSetId => copy(inDomain(voterSetId)),
    append (voterSetId, epoch, kind, payload) {
      const base = inDomain(voterSetId)
      if (epoch < base.epoch) throw new AgentError('ERR_NOT_LEADER', `cannot append in epoch ${epoch}: the log already holds epoch ${base.epoch}`)
      held = { voterSetId, epoch, seq: base.seq + 1, entries: { ...base.entries, [kind]: payload } }
      return { snapshot: copy(held), durable: persist() }
    },
    async reset (s) {
      held = copy(s)
      await persist()
    },
    async accept (s) {
      const base = inDomain(s.voterSetId)
      const newer = positionBefore(base, s)
      const kept = newer ? s : base
      if (newer) held = copy(s)
      // Either way the answer waits until what it reports is durable (`base` may still be in flight).
      await (newer ? persist() : chain)
      return { epoch: kept.epoch, seq: kept.seq }
    },
    close () {
      chain = chain.catch(() => {}).then(release)
      return chain
    },
  }
}

const isCount = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0

/** Checks a snapshot read from disk or received from a peer; throws on anything else. */
export function parseSnapshot (value: unknown): LogSnapshot {
  const v = value as Partial<LogSnapshot> | null
  if (typeof v !== 'object' || v === null || typeof v.voterSetId !== 'string' || !isCount(v.epoch) || !isCount(v.seq) ||
    typeof v.entries !== 'object' || v.entries === null || Array.isArray(v.entries)) {
    throw new Error('not a valid log snapshot')
  }
  return { voterSetId: v.voterSetId, epoch: v.epoch, seq: v.seq, entries: v.entries }
}
