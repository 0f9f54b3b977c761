/**
 * What the leader service (leader-service.ts) needs of an election backend:
 * who leads which epoch, whether this agent may act now, and the fencing
 * domain of decisions. Two implementations: embedded-election.ts (Raft's
 * election among a voter set over the mesh) and etcd-election.ts (a lease
 * and a campaign key in etcd). Acting, decisions, republishing and the
 * leader-only tasks are the leader service's and do not depend on which.
 */
import type { DecisionBatch } from '../membership/mesh-messages.ts'
import type { ElectionRole } from './raft-election.ts'
import type { LogSnapshot } from './replicated-log.ts'

export type ElectionBackend = 'embedded' | 'etcd'

export interface LeaderElectionState {
  role: ElectionRole
  /** The epoch this agent knows of: Raft's term, or the etcd leader key's create revision. */
  epoch: number
  leaderId: string | null
  /** Monotonic ms (performance.now) from which the leader may act: the previous leader's lease is over. */
  actAfterMs: number
  /** Leader: monotonic ms until which its lease lets it act (0 when it has none). */
  leaseUntilMs: number
  /** Follower: monotonic ms when the leader was last heard by the election; undefined where the backend does not know. */
  leaderContactMs?: number
}

export interface LeaderElection {
  readonly backend: ElectionBackend
  /** Resolves once the backend runs (it may still be waiting for a voter set or for etcd). */
  start(options: { signal: AbortSignal }): Promise<void>
  /** Idempotent; a leader gives up its leadership where the backend allows it (etcd: revokes its lease). */
  stop(): Promise<void>
  /** The fencing domain stamped on decisions; "" until known (no decision is made or accepted before). */
  voterSetId(): string
  /** The voters shown in the leader view and advertised in this agent's record. */
  voters(): readonly string[]
  /** Peers whose decision batches this agent accepts (fenced by epoch in decision-log.ts). */
  mayDecide(peer: string): boolean
  /** This agent votes or campaigns (undefined state: not yet). */
  state(): LeaderElectionState | undefined
  /** Leader, its lease valid, the previous lease waited out. Checked before every decision leaves. */
  mayAct(): boolean
  onChange(listener: () => void): () => void
  /**
   * Leader: resolves once the log up to `snapshot.seq` (this leader's log, of
   * its epoch, durable here) is held by a quorum — embedded: a majority of
   * voters (Raft replication); etcd: the desired-state key, written in a
   * transaction guarded by this leader's campaign key. Only then is a
   * decision acknowledged or gossiped. Rejects with ERR_NOT_COMMITTED when
   * that cannot happen before `signal` aborts or leadership is lost.
   */
  commit(snapshot: LogSnapshot, signal: AbortSignal): Promise<void>
  /**
   * Leader, before its first decision: the committed log it must continue
   * from — embedded: undefined (its own replicated log holds every committed
   * decision, by the election restriction); etcd: the desired-state key as
   * etcd has it (undefined when never written).
   */
  committedBase(signal: AbortSignal): Promise<LogSnapshot | undefined>
  /** Leader side, optional: hands a lagging follower the epoch's decisions directly. */
  sendDecisions?(peer: string, batch: DecisionBatch, signal: AbortSignal): Promise<void>
}
