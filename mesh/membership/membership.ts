/**
 * The membership table (SWIM, with memberlist's precedence rules and
 * Lifeguard's suspicion): who is in the cluster, in which state, at which
 * incarnation, with their latest availability record. No I/O: messages come in
 * through applyRecord / applyClaim, local evidence through suspect /
 * declareDead, and what must be said goes out through `broadcast`.
 *
 * Precedence for a member at incarnation i (SWIM §4.2):
 *   record (alive) at j   overrides alive/suspect when j > i; at j == i it only
 *                         refreshes the record (seq must grow), never clears a
 *                         suspicion — only the member itself can, by a higher j;
 *   suspect at j          overrides alive when j >= i, suspect when j > i; at
 *                         j == i it is one more confirmation;
 *   dead at j             overrides everything when j >= i.
 * A claim about this agent at >= its incarnation is refuted via onRefute (the
 * service raises the incarnation and publishes a record). A record from a
 * member held dead at the same incarnation means that member has not heard of
 * its death: the dead claim is said again (at most once per probe interval),
 * so it can refute. Dead members are forgotten after deadRetentionMs.
 *
 * Timers (on `clock`, core/clock.ts): one suspicion timer per suspect and one
 * forget timer per dead member, all cleared by stop().
 */
import type { AvailabilityRecord, MembershipClaim } from './mesh-messages.ts'
import { suspicionBounds, suspicionTimeoutMs, type SuspicionTimeoutOptions } from './suspicion-timeout.ts'
import type { LocalHealth } from './local-health.ts'
import { systemClock, type Clock, type ClockTimer } from '../../core/clock.ts'

export type MemberState = 'alive' | 'suspect' | 'dead'
export type ClaimReason = MembershipClaim['reason']

export interface Member {
  peerId: string
  /** Node name (from the record); '' until the first record arrives. */
  node: string
  state: MemberState
  incarnation: number
  /** Latest accepted record, if any. */
  record: AvailabilityRecord | undefined
  /** When the state last changed, ms since the epoch. */
  stateSinceMs: number
  /** When a record or probe answer last came from the member, ms since the epoch; 0 = never. */
  lastHeardMs: number
  /** Why it is suspect or dead. */
  reason: ClaimReason | undefined
}

export interface MembershipEvent {
  peerId: string
  node: string
  /** null: newly learned. */
  from: MemberState | null
  /** 'forgotten': removed after the dead retention. */
  to: MemberState | 'forgotten'
  incarnation: number
  reason: ClaimReason | 'record' | 'retention'
  atMs: number
}

export type ApplyResult = 'accepted' | 'stale' | 'unknown' | 'refuted'

export interface MembershipOptions extends SuspicionTimeoutOptions {
  /** This agent's peer id. */
  self: string
  deadRetentionMs: number
}

export interface MembershipComponents {
  health: Pick<LocalHealth, 'healthy'>
  /** Says a claim to the cluster (signed and published by the service). */
  broadcast(claim: Omit<MembershipClaim, 'from' | 'sentAtMs'>): void
  /** A claim about this agent at `incarnation` must be refuted with a higher one. */
  onRefute(incarnation: number, claim: MembershipClaim): void
  /** Default: the system clock. */
  clock?: Clock
}

export interface Membership {
  applyRecord(record: AvailabilityRecord): ApplyResult
  applyClaim(claim: MembershipClaim): ApplyResult
  /** Local evidence (a failed probe): suspect the member unless this agent is unhealthy. Returns whether it did. */
  suspect(peerId: string): boolean
  /** Conclusive local evidence (its port refuses connections, confirmed by others): dead at once, healthy or not. */
  declareDead(peerId: string, reason: 'refused'): boolean
  /** A probe answer or other proof of life at the current incarnation. */
  heard(peerId: string): void
  get(peerId: string): Member | undefined
  members(): Member[]
  /** The peer ids of the members not held dead (no snapshots: cheap at thousands of members). */
  livePeerIds(): string[]
  /** Alive and suspect members, this agent included. */
  liveCount(): number
  subscribe(listener: (event: MembershipEvent) => void): () => void
  stop(): void
}

interface Entry extends Member {
  suspicion?: { startedAt: number, confirmations: Set<string>, timer: ClockTimer | undefined }
  forgetTimer?: ClockTimer
  lastReclaimAt?: number
}

export function createMembership (options: MembershipOptions, components: MembershipComponents): Membership {
  const clock = components.clock ?? systemClock
  const now = (): number => clock.now()
  const table = new Map<string, Entry>()
  /** Entries in state dead (kept up to date by setState and forgetting), so liveCount is O(1). */
  let deadCount = 0
  const listeners = new Set<(event: MembershipEvent) => void>()

  const emit = (e: Entry, from: MemberState | null, to: MemberState | 'forgotten', reason: MembershipEvent['reason']): void => {
    const event: MembershipEvent = { peerId: e.peerId, node: e.node, from, to, incarnation: e.incarnation, reason, atMs: now() }
    for (const l of listeners) {
      try { l(event) } catch { /* a listener's failure is its own */ }
    }
  }

  const liveCount = (): number => 1 + table.size - deadCount

  const clearSuspicion = (e: Entry): void => {
    if (e.suspicion !== undefined) clock.clearTimeout(e.suspicion.timer)
    e.suspicion = undefined
  }

  const setState = (e: Entry, state: MemberState, reason: MembershipEvent['reason']): void => {
    const from = e.state
    if (from === state) return
    e.state = state
    if (from === 'dead') deadCount--
    if (state === 'dead') deadCount++
    e.stateSinceMs = now()
    e.reason = reason === 'record' || reason === 'retention' ? undefined : reason
    if (state !== 'suspect') clearSuspicion(e)
    if (e.forgetTimer !== undefined) { clock.clearTimeout(e.forgetTimer); e.forgetTimer = undefined }
    if (state === 'dead') {
      e.forgetTimer = clock.setTimeout(() => {
        if (table.get(e.peerId) !== e || e.state !== 'dead') return
        table.delete(e.peerId)
        deadCount--
        emit(e, 'dead', 'forgotten', 'retention')
      }, options.deadRetentionMs)
    }
    emit(e, from, state, reason)
  }

  const armSuspicionTimer = (e: Entry): void => {
    const s = e.suspicion!
    clock.clearTimeout(s.timer)
    const bounds = suspicionBounds(liveCount(), options)
    // The accuser's own confirmation is not independent: confirmations = other accusers.
    const timeout = suspicionTimeoutMs(bounds, Math.max(0, s.confirmations.size - 1))
    const remaining = Math.max(0, s.startedAt + timeout - now())
    s.timer = clock.setTimeout(() => {
      if (e.suspicion !== s || e.state !== 'suspect') return
      if (!components.health.healthy()) {
        // A stalled agent does not accuse: look again one probe interval later.
        s.timer = clock.setTimeout(() => armSuspicionTimer(e), options.probeIntervalMs)
        return
      }
      setState(e, 'dead', 'suspicion-timeout')
      components.broadcast({ kind: 'dead', subject: e.peerId, incarnation: e.incarnation, reason: 'suspicion-timeout' })
    }, remaining)
  }

  const startSuspicion = (e: Entry, accuser: string, reason: ClaimReason): void => {
    clearSuspicion(e)
    e.suspicion = { startedAt: now(), confirmations: new Set([accuser]), timer: undefined }
    setState(e, 'suspect', reason)
    armSuspicionTimer(e)
  }

  const newEntry = (peerId: string, incarnation: number): Entry => ({
    peerId, node: '', state: 'alive', incarnation, record: undefined, stateSinceMs: now(), lastHeardMs: 0, reason: undefined,
  })

  return {
    applyRecord (record) {
      if (record.from === options.self) return 'stale'
      let e = table.get(record.from)
      if (e === undefined) {
        e = newEntry(record.from, record.incarnation)
        Object.assign(e, { record, node: record.node, lastHeardMs: now() })
        table.set(record.from, e)
        emit(e, null, 'alive', 'record')
        return 'accepted'
      }
      if (record.incarnation < e.incarnation) return 'stale'
      if (record.incarnation === e.incarnation) {
        if (e.state === 'dead') {
          // It does not know it was declared dead: say it again so it can refute.
          if (e.lastReclaimAt === undefined || now() - e.lastReclaimAt >= options.probeIntervalMs) {
            e.lastReclaimAt = now()
            components.broadcast({ kind: 'dead', subject: e.peerId, incarnation: e.incarnation, reason: e.reason ?? 'suspicion-timeout' })
          }
          return 'stale'
        }
        if (e.record !== undefined && record.seq <= e.record.seq) return 'stale'
        e.record = record
        e.node = record.node
        e.lastHeardMs = now()
        return 'accepted'
      }
      e.incarnation = record.incarnation
      e.record = record
      e.node = record.node
      e.lastHeardMs = now()
      setState(e, 'alive', 'record')
      return 'accepted'
    },

    applyClaim (claim) {
      if (claim.subject === options.self) {
        components.onRefute(claim.incarnation, claim)
        return 'refuted'
      }
      const e = table.get(claim.subject)
      if (e === undefined) return 'unknown'
      if (claim.incarnation < e.incarnation) return 'stale'
      if (claim.kind === 'dead') {
        if (e.state === 'dead') {
          // The member's own goodbye can arrive after its closed port was noticed: it is the better reason.
          if (claim.reason === 'left' && claim.from === claim.subject && e.reason !== 'left') { e.reason = 'left'; return 'accepted' }
          return 'stale'
        }
        e.incarnation = claim.incarnation
        setState(e, 'dead', claim.reason)
        return 'accepted'
      }
      if (e.state === 'dead') return 'stale'
      if (e.state === 'suspect' && claim.incarnation === e.incarnation) {
        const s = e.suspicion!
        if (s.confirmations.has(claim.from)) return 'stale'
        s.confirmations.add(claim.from)
        armSuspicionTimer(e)
        return 'accepted'
      }
      e.incarnation = claim.incarnation
      startSuspicion(e, claim.from, claim.reason)
      return 'accepted'
    },

    suspect (peerId) {
      const e = table.get(peerId)
      if (e === undefined || e.state === 'dead') return false
      if (!components.health.healthy()) return false
      if (e.state === 'suspect') {
        if (e.suspicion!.confirmations.has(options.self)) return false
        e.suspicion!.confirmations.add(options.self)
        armSuspicionTimer(e)
      } else {
        startSuspicion(e, options.self, 'probe-failed')
      }
      components.broadcast({ kind: 'suspect', subject: peerId, incarnation: e.incarnation, reason: 'probe-failed' })
      return true
    },

    declareDead (peerId, reason) {
      const e = table.get(peerId)
      if (e === undefined || e.state === 'dead') return false
      // No health gate: a refused connection is the kernel's answer, not a deadline this agent may have missed.
      setState(e, 'dead', reason)
      components.broadcast({ kind: 'dead', subject: peerId, incarnation: e.incarnation, reason })
      return true
    },

    heard (peerId) {
      const e = table.get(peerId)
      if (e !== undefined && e.state !== 'dead') e.lastHeardMs = now()
    },

    get: peerId => { const e = table.get(peerId); return e === undefined ? undefined : snapshot(e) },
    members: () => [...table.values()].map(snapshot),
    livePeerIds () {
      const ids: string[] = []
      for (const e of table.values()) if (e.state !== 'dead') ids.push(e.peerId)
      return ids
    },
    liveCount,
    subscribe (listener) {
      listeners.add(listener)
      return () => { listeners.delete(listener) }
    },
    stop () {
      for (const e of table.values()) {
        clearSuspicion(e)
        clock.clearTimeout(e.forgetTimer)
      }
      listeners.clear()
    },
  }
}

function snapshot (e: Entry): Member {
  return { peerId: e.peerId, node: e.node, state: e.state, incarnation: e.incarnation, record: e.record, stateSinceMs: e.stateSinceMs, lastHeardMs: e.lastHeardMs, reason: e.reason }
}
