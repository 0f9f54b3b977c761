/**
 * Fenced decisions, receiving side (every agent, the leader included for its
 * own decisions). Only committed decisions are ever sent (leader-service.ts:
 * a decision leaves the leader once a quorum holds it), so every decision
 * received is final; fencing keeps out a deposed leader's late messages.
 * Contract:
 *
 * - Batches of another voter set, or from a sender that may not lead in it, are
 *   ignored (a --dev agent elsewhere on the mesh leads its own cluster).
 * - epoch < highest epoch seen → every decision in it is rejected (logged once
 *   per (epoch, seq)). The highest epoch is persisted (fsync) before anything
 *   of a new epoch is applied, so a restart keeps rejecting older epochs.
 * - epoch > highest → the new epoch starts: its sender is the epoch's leader.
 *   A second sender claiming the same epoch is rejected and counted as a
 *   violation (it cannot happen while the election is sound).
 * - `seq` is the cluster-wide log index (replicated-log.ts): it counts on
 *   across epochs. Decisions are applied in seq order, each exactly once;
 *   later ones wait for the gap to fill. A batch's `state` (the committed
 *   desired state as of state.seq) closes a gap the recent decisions cannot:
 *   the agent adopts it and logs outcome "snapshot".
 * - Convergence: the leader of epoch E sends state only once a decision of E
 *   is committed, so its state is past every decision of an older epoch that
 *   was ever committed. An agent whose last applied decision is of an older
 *   epoch than a state batch therefore adopts that state even when its own
 *   seq is as high or higher: what it holds beyond the state was never
 *   committed (an agent of an older version, a deposed leader's message).
 *   The adoption is logged with reason "repair".
 *
 * Every outcome is appended to the log: in memory (the API serves the last
 * `memoryEntries`) and to <stateDir>/decisions.jsonl, one JSON object per line,
 * which the invariant checker (decision-invariants.ts) reads. The file is an
 * audit trail written behind the persisted position, so a kill can lose its
 * last lines; a log opened on a persisted position starts with a "resumed"
 * entry naming it, which tells the checker where the agent really continues.
 */
import { appendFile } from 'node:fs/promises'
import { createHash } from 'node:crypto'
import type { Decision, DecisionBatch } from '../membership/mesh-messages.ts'

export type DecisionOutcome = 'applied' | 'rejected' | 'snapshot' | 'resumed' | 'moved'

export interface DecisionLogEntry {
  /** Wall clock when logged, ms since the epoch. */
  atMs: number
  epoch: number
  leader: string
  seq: number
  kind: string
  outcome: DecisionOutcome
  /** Why it was rejected, or "repair" for a snapshot that replaced uncommitted decisions. */
  reason?: string
  /** SHA-256 (hex, 16 chars) of kind + payload: the same decision has the same digest everywhere. */
  digest: string
}

export interface AppliedDecision {
  epoch: number
  leader: string
  seq: number
  kind: string
  payload: unknown
}

export interface DecisionLogOptions {
  /** The JSONL file every outcome is appended to. */
  file: string
  memoryEntries: number
}

export interface DecisionLogComponents {
  voterSetId(): string
  /** `peer` may lead an epoch of this voter set (the embedded backend: a voter; etcd: a server seen campaigning). */
  mayDecide(peer: string): boolean
  /** The persisted position: highest epoch seen, its leader, last seq applied in it. */
  persisted(): DecisionPosition
  /**
   * Persists the position; resolves once durable. Called before a decision is applied, and only
   * while the position belongs to the voter set the election is in (process() stops a batch whose
   * set the election left during a write: an old epoch written into the new set's position would
   * fence off every epoch of it below that).
   */
  persist(position: DecisionPosition): Promise<void>
  /** Called for each applied decision, in order; must not throw. */
  apply(decision: AppliedDecision): void
  /** Called when a snapshot replaces the desired state (at log index `seq`). */
  adoptState(epoch: number, leader: string, seq: number, entries: Record<string, unknown>): void
}

/**
 * epoch: the highest epoch seen, leader: its leader, seq: the last log index
 * applied, appliedEpoch: the epoch of the batch it was applied from.
 */
export interface DecisionPosition { epoch: number, leader: string | null, seq: number, appliedEpoch: number }

export type BatchVerdict = 'accepted' | 'stale' | 'ignored'

export interface DecisionLog {
  /** Processes one batch; batches are processed one at a time in arrival order. */
  receive(batch: DecisionBatch): Promise<BatchVerdict>
  entries(): DecisionLogEntry[]
  /** Highest epoch seen and its leader, the last log index applied and its epoch: in the voter set the election is in now. */
  position(): DecisionPosition
  counts(): { applied: number, rejected: number, snapshots: number, violations: number }
  /** Resolves once every entry logged so far is appended to the file. */
  flush(): Promise<void>
}

export function decisionDigest (kind: string, payload: unknown): string {
  return createHash('sha256').update(kind).update('\0').update(JSON.stringify(payload ?? null)).digest('hex').slice(0, 16)
}

export function createDecisionLog (options: DecisionLogOptions, components: DecisionLogComponents): DecisionLog {
  const memory: DecisionLogEntry[] = []
  const start = components.persisted()
  let epoch = start.epoch
  let epochLeader: string | null = start.leader
  let appliedSeq = start.seq
  let appliedEpoch = start.appliedEpoch
  let pending = new Map<number, Decision>()
  /**
   * The voter set the position above belongs to (learned at the first batch: the election may
   * not exist yet when the log is created); epochs of another one are not comparable.
   */
  let domain: string | undefined
  const rejectedSeen = new Set<string>()
  const counts = { applied: 0, rejected: 0, snapshots: 0, violations: 0 }
  let queue: Promise<unknown> = Promise.resolve()
  let fileChain: Promise<void> = Promise.resolve()

  const record = (entry: DecisionLogEntry): void => {
    memory.push(entry)
    if (memory.length > options.memoryEntries) memory.splice(0, memory.length - options.memoryEntries)
    const line = `${JSON.stringify(entry)}\n`
    fileChain = fileChain.then(() => appendFile(options.file, line)).catch(() => {})
  }

  if (start.seq > 0 || start.epoch > 0) {
    record({ atMs: Date.now(), epoch: start.appliedEpoch, leader: start.leader ?? '', seq: start.seq, kind: 'resumed', outcome: 'resumed', digest: '' })
  }

  const reject = (batch: DecisionBatch, reason: string): void => {
    for (const d of batch.decisions) {
      const key = `${batch.epoch}/${batch.from}/${d.seq}`
      if (rejectedSeen.has(key)) continue
      rejectedSeen.add(key)
      counts.rejected++
      record({ atMs: Date.now(), epoch: batch.epoch, leader: batch.from, seq: d.seq, kind: d.kind, outcome: 'rejected', reason, digest: decisionDigest(d.kind, d.payload) })
    }
  }

  /** The election moved to another voter set (the store then reset its position): continue from there. */
  const followDomain = (): void => {
    const id = components.voterSetId()
    if (id === domain) return
    const moved = domain !== undefined && domain !== ''
    domain = id
    const p = components.persisted()
    epoch = p.epoch
    epochLeader = p.leader
    appliedSeq = p.seq
    appliedEpoch = p.appliedEpoch
    pending = new Map()
    // Epochs of the new voter set are not comparable with the old one's (decision-invariants.ts starts over here).
    if (moved) record({ atMs: Date.now(), epoch, leader: epochLeader ?? '', seq: appliedSeq, kind: 'voter-set', outcome: 'moved', reason: `voter set ${id}`, digest: '' })
  }
  const position = (): DecisionPosition => ({ epoch, leader: epochLeader, seq: appliedSeq, appliedEpoch })

  async function process (batch: DecisionBatch): Promise<BatchVerdict> {
    followDomain()
    if (batch.voterSetId !== components.voterSetId() || !components.mayDecide(batch.from)) return 'ignored'
    /**
     * Persists for the batch's voter set; false when the election moved to another one while
     * the position was written: the rest of the batch is dropped (the next batch follows the
     * new domain from its own persisted position).
     */
    const persist = async (p: DecisionPosition): Promise<boolean> => {
      await components.persist(p)
      return components.voterSetId() === batch.voterSetId
    }
    if (batch.epoch < epoch) { reject(batch, `epoch ${batch.epoch} < ${epoch}`); return 'stale' }
    if (batch.epoch > epoch) {
      if (!await persist({ ...position(), epoch: batch.epoch, leader: batch.from })) return 'ignored'
      epoch = batch.epoch
      epochLeader = batch.from
      // What waits for a gap is dropped: the new epoch's first batch carries the committed state, which holds it.
      pending = new Map()
    }
    if (epochLeader === null) {
      if (!await persist({ ...position(), leader: batch.from })) return 'ignored'
      epochLeader = batch.from
    }
    if (epochLeader !== batch.from) {
      counts.violations++
      reject(batch, `epoch ${epoch} is led by ${epochLeader}`)
      return 'stale'
    }
    for (const d of batch.decisions) if (d.seq > appliedSeq) pending.set(d.seq, d)
    /** Applies what continues the applied position; false when the voter set changed meanwhile. */
    const drain = async (): Promise<boolean> => {
      for (let next = pending.get(appliedSeq + 1); next !== undefined; next = pending.get(appliedSeq + 1)) {
        pending.delete(next.seq)
        if (!await persist({ ...position(), seq: next.seq, appliedEpoch: epoch })) return false
        appliedSeq = next.seq
        appliedEpoch = epoch
        counts.applied++
        record({ atMs: Date.now(), epoch, leader: batch.from, seq: next.seq, kind: next.kind, outcome: 'applied', digest: decisionDigest(next.kind, next.payload) })
        components.apply({ epoch, leader: batch.from, seq: next.seq, kind: next.kind, payload: next.payload })
      }
      return true
    }
    if (!await drain()) return 'ignored'
    const state = batch.state
    const repair = state !== undefined && state.seq <= appliedSeq && appliedEpoch < epoch && state.seq > 0
    if (state !== undefined && (state.seq > appliedSeq || repair)) {
      // A gap the recent decisions cannot fill, or uncommitted decisions to replace: the committed state as of state.seq.
      if (!await persist({ ...position(), seq: state.seq, appliedEpoch: epoch })) return 'ignored'
      appliedSeq = state.seq
      appliedEpoch = epoch
      for (const s of [...pending.keys()]) if (s <= appliedSeq) pending.delete(s)
      counts.snapshots++
      record({ atMs: Date.now(), epoch, leader: batch.from, seq: appliedSeq, kind: 'snapshot', outcome: 'snapshot', ...(repair ? { reason: 'repair' } : {}), digest: decisionDigest('snapshot', state.entries) })
      components.adoptState(epoch, batch.from, state.seq, state.entries)
      if (!await drain()) return 'ignored'
    }
    // Valid for the current epoch: forwarded even when nothing was new here (others may need it).
    return 'accepted'
  }

  return {
    receive (batch) {
      const result = queue.then(() => process(batch))
      queue = result.catch(() => {})
      return result
    },
    entries: () => [...memory],
    // The position of the voter set the election is in now: after a move, the new set's, before any
    // batch of it arrived (the leader's fencing reads it to decide whether it may act at all).
    position: () => { followDomain(); return position() },
    counts: () => ({ ...counts }),
    flush: () => fileChain,
  }
}
