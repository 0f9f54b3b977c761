/**
 * Raft (Ongaro & Ousterhout, §5.2 election, §5.3–5.4 log replication with the
 * election restriction, §9.6 PreVote, §6.4 leader lease; etcd's CheckQuorum)
 * among a fixed voter set. The log is the decision log compacted to one
 * snapshot (replicated-log.ts): the leader sends its whole snapshot in each
 * `append` request, a voter stores it durably before answering, and a
 * decision counts as committed once a majority (the leader included) holds a
 * snapshot of the leader's term at or past its seq (commit). A voter grants
 * no (pre)vote to a candidate whose last log position is behind its own, so
 * every leader holds every committed decision (Leader Completeness).
 * Transport and persistence are components, so tests drive several instances
 * in one process.
 *
 * Roles: follower → (election timeout, PreVote majority) → candidate →
 * (vote majority) → leader → (lease lost or higher term seen) → follower.
 * A node outside the voter set never campaigns and never votes.
 *
 * Timing (all monotonic, performance.now(); CLOCK_MONOTONIC keeps running
 * while a process is stopped, so a SIGCONTed leader sees its lease expired):
 *   heartbeatIntervalMs  leader → voters, renews the lease
 *   electionTimeoutMinMs..electionTimeoutMaxMs  random per round; a follower
 *                        that heard no leader for this long runs PreVote
 *   leaseMs              < electionTimeoutMinMs; a leader acts only while
 *                        now < (send time of a heartbeat round a majority
 *                        acknowledged) + leaseMs, and steps down when that
 *                        passes (CheckQuorum)
 *   rpcTimeoutMs         one PreVote / vote / heartbeat request
 *
 * Why two leaders never act in one epoch:
 *  1. One leader per term: a voter grants at most one vote per term, and the
 *     vote is fsynced before the answer leaves (store.save), so even a crash
 *     and restart cannot produce a second vote; two majorities of one voter
 *     set intersect.
 *  2. No overlap across terms: a voter that acknowledged leader L at time t
 *     refuses every PreVote and vote until t + electionTimeoutMinMs (leader
 *     stickiness). L's lease, from the send time s ≤ t of a round a majority
 *     acknowledged, ends at s + leaseMs < t + electionTimeoutMinMs. A new
 *     leader needs a majority, which contains one of those voters, so it is
 *     elected only after L's lease ended (given clock rates that differ by
 *     less than (electionTimeoutMinMs - leaseMs) / electionTimeoutMinMs).
 *     The new leader additionally waits, from its own last contact with the
 *     old leader, electionTimeoutMinMs before acting (LeaderState.actAfterMs).
 *  3. Fencing: even a leader that checked its lease and was then frozen
 *     publishes decisions stamped with its term; every agent persists the
 *     highest epoch it has seen and rejects lower ones (decision-log.ts).
 */

import { AgentError } from '../../core/errors.ts'
import { positionBefore, type LogPosition, type LogSnapshot } from './replicated-log.ts'

export type ElectionRole = 'follower' | 'candidate' | 'leader'

export type ElectionRequest =
  | { type: 'prevote' | 'vote', term: number, candidate: string, voterSetId: string, log: LogPosition }
  | { type: 'heartbeat', term: number, leader: string, voterSetId: string }
  | { type: 'append', term: number, leader: string, voterSetId: string, snapshot: LogSnapshot }

export interface ElectionResponse {
  term: number
  granted: boolean
  /** Why it was not granted (diagnostics). */
  reason?: string
  /** Heartbeat answers: the highest decision the voter applied (components.appliedPosition). */
  applied?: { epoch: number, seq: number }
  /** Heartbeat and append answers: the voter's last log position, durable (components.replica). */
  log?: LogPosition
}

export interface ElectionTransport {
  /** Sends one request to `peer`; rejects on timeout or when unreachable. */
  request(peer: string, request: ElectionRequest, signal: AbortSignal): Promise<ElectionResponse>
}

export interface ElectionPersistence {
  term: number
  votedFor: string | null
}

export interface ElectionStorage {
  current(): ElectionPersistence
  /** Resolves once durable. */
  save(patch: Partial<ElectionPersistence>): Promise<void>
}

export interface RaftElectionOptions {
  self: string
  /** The voter set (peer ids, this node may or may not be one) and its id. */
  voters: readonly string[]
  voterSetId: string
  heartbeatIntervalMs: number
  electionTimeoutMinMs: number
  electionTimeoutMaxMs: number
  leaseMs: number
  rpcTimeoutMs: number
}

export interface RaftElectionComponents {
  transport: ElectionTransport
  storage: ElectionStorage
  log: { info(obj: object, msg: string): void, warn(obj: object, msg: string): void, debug(obj: object, msg: string): void }
  /** Monotonic ms; default performance.now. */
  now?(): number
  /** Random in [0, 1); default Math.random. */
  random?(): number
  /** Follower side: reported in every heartbeat answer, so the leader sees who lags behind its decisions. */
  appliedPosition?(): { epoch: number, seq: number }
  /** Leader side: every heartbeat answer, as it arrives. */
  onHeartbeatAnswer?(peer: string, response: ElectionResponse): void
  /**
   * This voter's copy of the decision log: its last position (votes compare
   * it), the snapshot a leader sends, and the follower's durable adoption of
   * a leader's snapshot.
   */
  replica: {
    last(): LogPosition
    snapshot(): LogSnapshot
    accept(snapshot: LogSnapshot): Promise<LogPosition>
  }
}

export interface ElectionState {
  role: ElectionRole
  term: number
  leaderId: string | null
  votedFor: string | null
  /** Leader only: monotonic ms until which the majority-renewed lease holds; 0 otherwise. */
  leaseUntilMs: number
  /** Leader only: monotonic ms from which it may act (previous lease waited out). */
  actAfterMs: number
  /** Monotonic ms when a leader of this term was last heard (or a vote granted); -Infinity: never. */
  lastLeaderContactMs: number
}

export interface RaftElection {
  start(options: { signal: AbortSignal }): void
  stop(): void
  /** Answers a request from `from` (the authenticated sender). */
  handle(from: string, request: ElectionRequest): Promise<ElectionResponse>
  state(): ElectionState
  /** Leader with a valid lease and the previous lease waited out. */
  mayAct(): boolean
  /** Role or term changed. */
  onChange(listener: (state: ElectionState) => void): () => void
  /**
   * Leader: resolves once a majority of voters (this one included) holds the
   * log up to `seq` in the current term. This leader counts itself as holding
   * `seq` from the call on: the caller must not acknowledge anything before
   * its own write of `seq` is durable too. Rejects with ERR_NOT_COMMITTED when leadership is lost or
   * `signal` aborts first (the decision may still be committed later by this
   * or the next leader: the caller retries idempotently).
   */
  commit(seq: number, signal: AbortSignal): Promise<void>
  /** Leader: the highest seq known committed in its term (0 otherwise). */
  commitSeq(): number
}

export function createRaftElection (options: RaftElectionOptions, components: RaftElectionComponents): RaftElection {
  const { self, voters } = options
  const now = components.now ?? (() => performance.now())
  const random = components.random ?? Math.random
  const log = components.log
  const isVoter = voters.includes(self)
  const others = voters.filter(v => v !== self)
  const majority = Math.floor(voters.length / 2) + 1
  const persisted = components.storage.current()
  let term = persisted.term
  let votedFor = persisted.votedFor
  let role: ElectionRole = 'follower'
  let leaderId: string | null = null
  /** Last time a leader of the current term was heard (or a vote granted), monotonic ms; -Infinity: never. */
  let lastLeaderContactMs = Number.NEGATIVE_INFINITY
  let leaseUntilMs = 0
  let actAfterMs = 0
  let running = false
  let electionTimer: NodeJS.Timeout | undefined
  let heartbeatTimer: NodeJS.Timeout | undefined
  let controller = new AbortController()
  let campaigning = false
  const listeners = new Set<(s: ElectionState) => void>()
  /**
   * Leader side of log replication, reset on every term led: per other voter
   * the highest seq it acknowledged holding in this term, whether an append
   * is in flight and whether another must follow it; this leader's own
   * durable seq; commits waiting for a majority.
   */
  let followers = new Map<string, { match: number, inFlight: boolean, sentSeq: number, again: boolean }>()
  let ownSeq = 0
  let committedSeq = 0
  let commitWaiters: Array<{ seq: number, resolve(): void, reject(err: Error): void }> = []
  const failCommits = (why: string): void => {
    const waiting = commitWaiters
    commitWaiters = []
    for (const w of waiting) w.reject(new AgentError('ERR_NOT_COMMITTED', `decision ${w.seq} not committed: ${why}; it may still be committed by the next leader, so retry by id`))
  }

  const snapshot = (): ElectionState => ({ role, term, leaderId, votedFor, leaseUntilMs, actAfterMs, lastLeaderContactMs })
  const changed = (): void => {
    const s = snapshot()
    for (const l of listeners) {
      try { l(s) } catch { /* a listener's failure is its own */ }
    }
  }
  const inLeaderContact = (): boolean => now() - lastLeaderContactMs < options.electionTimeoutMinMs

  const armElectionTimer = (delayMs?: number): void => {
    clearTimeout(electionTimer)
    if (!running || !isVoter) return
    const span = options.electionTimeoutMaxMs - options.electionTimeoutMinMs
    const delay = delayMs ?? options.electionTimeoutMinMs + random() * span
    electionTimer = setTimeout(() => { void campaign() }, delay)
    electionTimer.unref()
  }

  const becomeFollower = (newTerm: number, leader: string | null, why: string): Promise<void> | undefined => {
    const wasLeader = role === 'leader'
    const termChanged = newTerm > term
    const before = role
    if (termChanged) { term = newTerm; votedFor = null }
    role = 'follower'
    leaderId = leader
    leaseUntilMs = 0
    actAfterMs = 0
    clearInterval(heartbeatTimer)
    heartbeatTimer = undefined
    if (wasLeader) { controller.abort(); controller = new AbortController(); failCommits(why) }
    if (before !== 'follower' || termChanged) {
      log.info({ term, leader, from: before, why }, 'election: follower')
      changed()
    }
    return termChanged ? components.storage.save({ term, votedFor }) : undefined
  }

  /** One request to every other voter; calls onAnswer as answers arrive. */
  const broadcast = (request: ElectionRequest, onAnswer: (peer: string, r: ElectionResponse) => void, signal: AbortSignal): Promise<void> =>
    Promise.all(others.map(async peer => {
      try {
        const r = await components.transport.request(peer, request, AbortSignal.any([signal, AbortSignal.timeout(options.rpcTimeoutMs)]))
        onAnswer(peer, r)
      } catch (err) {
        log.debug({ peer, type: request.type, err: (err as Error).message }, 'election request failed')
      }
    })).then(() => {})

  /** Sends `request` to all other voters and resolves true once a majority (self included) granted. */
  const gather = (request: ElectionRequest): Promise<boolean> => new Promise(resolve => {
    let granted = 1
    let answered = 0
    if (granted >= majority) { resolve(true); return }
    void broadcast(request, (_peer, r) => {
      answered++
      if (r.term > term) { void becomeFollower(r.term, null, `${request.type} answered with term ${r.term}`); resolve(false); return }
      if (r.granted && ++granted >= majority) resolve(true)
      else if (answered === others.length) resolve(false)
    }, controller.signal).then(() => resolve(false))
  })

  async function campaign (): Promise<void> {
    if (!running || role === 'leader' || campaigning) return
    // Re-armed first: a round that gets no majority is retried after another random timeout.
    armElectionTimer()
    if (inLeaderContact()) return
    campaigning = true
    try {
      const startTerm = term
      const preVoteOk = await gather({ type: 'prevote', term: term + 1, candidate: self, voterSetId: options.voterSetId, log: components.replica.last() })
      if (!running || !preVoteOk || term !== startTerm || (role as ElectionRole) === 'leader' || inLeaderContact()) return
      term += 1
      votedFor = self
      role = 'candidate'
      leaderId = null
      await components.storage.save({ term, votedFor })
      log.info({ term }, 'election: candidate')
      changed()
      const sentAt = now()
      const electionTerm = term
      const won = await gather({ type: 'vote', term, candidate: self, voterSetId: options.voterSetId, log: components.replica.last() })
      if (!running || !won || term !== electionTerm || role !== 'candidate') return
      becomeLeader(sentAt)
    } finally {
      campaigning = false
    }
  }

  function becomeLeader (voteSentAtMs: number): void {
    role = 'leader'
    leaderId = self
    clearTimeout(electionTimer)
    // The votes are the first majority acknowledgement: voters restart their contact clock on granting.
    leaseUntilMs = voteSentAtMs + options.leaseMs
    // Previous lease: whoever led before was last heard by us at lastLeaderContactMs; its lease
    // cannot outlast that by more than electionTimeoutMinMs (see the argument above).
    actAfterMs = Math.max(now(), lastLeaderContactMs + options.electionTimeoutMinMs)
    followers = new Map(others.map(peer => [peer, { match: 0, inFlight: false, sentSeq: 0, again: false }]))
    ownSeq = 0
    committedSeq = 0
    log.info({ term, voters: voters.length, actAfterMs: Math.round(actAfterMs - now()) }, 'election: leader')
    changed()
    heartbeatTimer = setInterval(heartbeatRound, options.heartbeatIntervalMs)
    heartbeatTimer.unref()
    heartbeatRound()
  }

  function heartbeatRound (): void {
    if (role !== 'leader') return
    const t = now()
    if (t >= leaseUntilMs) {
      // CheckQuorum: no majority renewed the lease in time; stop acting at once.
      void becomeFollower(term, null, 'lease not renewed by a majority')
      armElectionTimer()
      return
    }
    const roundTerm = term
    let acks = 1
    if (acks >= majority) leaseUntilMs = Math.max(leaseUntilMs, t + options.leaseMs)
    void broadcast({ type: 'heartbeat', term, leader: self, voterSetId: options.voterSetId }, (peer, r) => {
      components.onHeartbeatAnswer?.(peer, r)
      if (r.term > term) { void becomeFollower(r.term, null, `heartbeat answered with term ${r.term}`); armElectionTimer(); return }
      if (role !== 'leader' || term !== roundTerm || !r.granted) return
      if (++acks >= majority) leaseUntilMs = Math.max(leaseUntilMs, t + options.leaseMs)
      // A voter that lacks the leader's log (a heal, a restart, a lost append) gets it now.
      if (r.log !== undefined) matched(peer, r.log)
      const leaderLog = components.replica.last()
      const f = followers.get(peer)
      if (f !== undefined && leaderLog.epoch === term && f.match < leaderLog.seq && (r.log === undefined || positionBefore(r.log, leaderLog))) sendLog(peer)
    }, controller.signal)
  }

  /** A voter's answer shows it holds `position`: counts toward commits when it is this term's log. */
  function matched (peer: string, position: LogPosition): void {
    const f = followers.get(peer)
    if (f === undefined || role !== 'leader' || position.epoch !== term) return
    if (position.seq > f.match) { f.match = position.seq; advanceCommit() }
  }

  /** The highest seq a majority holds in this term; resolves the commits it covers (Raft §5.3–5.4). */
  function advanceCommit (): void {
    const held = [ownSeq, ...[...followers.values()].map(f => f.match)].sort((a, b) => b - a)
    const majoritySeq = held[majority - 1] ?? 0
    if (majoritySeq <= committedSeq) return
    committedSeq = majoritySeq
    const ready = commitWaiters.filter(w => w.seq <= committedSeq)
    commitWaiters = commitWaiters.filter(w => w.seq > committedSeq)
    for (const w of ready) w.resolve()
  }

  /**
   * Sends the leader's whole log snapshot to `peer`; one append in flight per
   * voter, and one more after it when the log grew past what is in flight.
   */
  function sendLog (peer: string): void {
    const f = followers.get(peer)
    if (f === undefined || role !== 'leader') return
    if (f.inFlight) { if (components.replica.last().seq > f.sentSeq) f.again = true; return }
    f.inFlight = true
    f.again = false
    const sendTerm = term
    const snapshot = components.replica.snapshot()
    f.sentSeq = snapshot.seq
    const signal = AbortSignal.any([controller.signal, AbortSignal.timeout(options.rpcTimeoutMs)])
    void components.transport.request(peer, { type: 'append', term, leader: self, voterSetId: options.voterSetId, snapshot }, signal)
      .then(r => {
        if (r.term > term) { void becomeFollower(r.term, null, `append answered with term ${r.term}`); armElectionTimer(); return }
        if (r.granted && r.log !== undefined && term === sendTerm) matched(peer, r.log)
      })
      .catch(err => log.debug({ peer, err: (err as Error).message }, 'append failed'))
      .finally(() => {
        f.inFlight = false
        if (f.again && role === 'leader' && term === sendTerm) sendLog(peer)
      })
  }

  return {
    start ({ signal }) {
      running = true
      signal.addEventListener('abort', () => this.stop(), { once: true })
      if (!isVoter) return
      // A sole voter has nobody to wait for: it leads at once.
      armElectionTimer(voters.length === 1 ? 0 : undefined)
    },

    stop () {
      running = false
      clearTimeout(electionTimer)
      clearInterval(heartbeatTimer)
      controller.abort()
      failCommits('the agent is stopping')
      if (role !== 'follower') { role = 'follower'; leaderId = null; leaseUntilMs = 0; changed() }
    },

    async handle (from, request) {
      if (!isVoter || !voters.includes(from)) return { term, granted: false, reason: 'not in the voter set' }
      if (request.voterSetId !== options.voterSetId) return { term, granted: false, reason: 'another voter set' }
      if (request.type === 'heartbeat' || request.type === 'append') {
        if (request.leader !== from) return { term, granted: false, reason: 'sender is not the leader it names' }
        if (request.term < term) return { term, granted: false, reason: 'stale term' }
        if (request.type === 'append' && (request.snapshot.voterSetId !== options.voterSetId || request.snapshot.epoch > request.term)) {
          return { term, granted: false, reason: 'the snapshot is not of this voter set and term' }
        }
        const saving = request.term > term || role !== 'follower' || leaderId !== from
          ? becomeFollower(request.term, from, `${request.type} from the leader`)
          : undefined
        lastLeaderContactMs = now()
        armElectionTimer()
        await saving
        // The snapshot is durable before the answer leaves: the leader counts this voter toward a commit.
        const held = request.type === 'append' ? await components.replica.accept(request.snapshot) : components.replica.last()
        const applied = components.appliedPosition?.()
        return applied !== undefined ? { term, granted: true, applied, log: held } : { term, granted: true, log: held }
      }
      if (request.candidate !== from) return { term, granted: false, reason: 'sender is not the candidate it names' }
      // Leader stickiness (CheckQuorum/PreVote): while a leader is heard, nobody else may win.
      if (role === 'leader' && now() < leaseUntilMs) return { term, granted: false, reason: 'leader with a lease' }
      if (role !== 'leader' && inLeaderContact()) return { term, granted: false, reason: 'a leader is heard' }
      // Election restriction (Raft §5.4.1): a candidate must hold every decision this voter may have helped commit.
      const own = components.replica.last()
      if (positionBefore(request.log, own)) return { term, granted: false, reason: `candidate's log ${request.log.epoch}/${request.log.seq} is behind ${own.epoch}/${own.seq}` }
      if (request.type === 'prevote') {
        return request.term > term ? { term, granted: true } : { term, granted: false, reason: 'stale term' }
      }
      if (request.term < term) return { term, granted: false, reason: 'stale term' }
      if (request.term > term) await becomeFollower(request.term, null, `vote request for term ${request.term}`)
      if (votedFor !== null && votedFor !== from) return { term, granted: false, reason: `already voted for ${votedFor}` }
      votedFor = from
      // Durable before the answer leaves: a restart must not vote again in this term.
      await components.storage.save({ term, votedFor })
      lastLeaderContactMs = now()
      armElectionTimer()
      return { term, granted: true }
    },

    state: snapshot,
    mayAct: () => role === 'leader' && now() < leaseUntilMs && now() >= actAfterMs,
    onChange (listener) { listeners.add(listener); return () => listeners.delete(listener) },
    commit (seq, signal) {
      if (role !== 'leader') return Promise.reject(new AgentError('ERR_NOT_COMMITTED', `decision ${seq} not committed: this agent no longer leads`))
      ownSeq = Math.max(ownSeq, seq)
      const done = new Promise<void>((resolve, reject) => {
        const waiter = { seq, resolve, reject }
        commitWaiters.push(waiter)
        signal.addEventListener('abort', () => {
          if (!commitWaiters.includes(waiter)) return
          commitWaiters = commitWaiters.filter(w => w !== waiter)
          reject(new AgentError('ERR_NOT_COMMITTED', `decision ${seq} not committed: no majority of voters stored it in time; it may still be committed, so retry by id`))
        }, { once: true })
      })
      advanceCommit()
      for (const peer of others) sendLog(peer)
      return done
    },
    commitSeq: () => role === 'leader' ? committedSeq : 0,
  }
}
