/**
 * The leader subsystem: an election backend (leader-election.ts: the embedded
 * Raft-style election, or etcd), fenced decisions over gossip
 * (decision-log.ts), and the leader-only tasks.
 *
 * Acting. The leader acts (decides, runs the leader-only tasks) only while
 * the election says it may (embedded: majority-renewed lease, previous lease
 * waited out; etcd: its campaign lease renewed, its key the lowest) and after
 * viewGraceMs more, during which it rebuilds its view of the cluster from
 * gossip: nothing it has not heard of yet is "dead" because it just took
 * over. The first decision of every epoch is kind "leader". Acting stops the
 * moment the election says it may not; tasks are aborted.
 *
 * Taking over. Until that first decision is committed the leader has not
 * taken over: it is still adopting the committed state (etcd's copy can take
 * an etcd outage to read). Nothing else is appended before it — a decision
 * appended to a log that has not adopted the committed state would overwrite
 * it — so LeaderService.decide waits for the take-over, and the view says
 * `acting` only once it is done.
 *
 * Commit before acknowledge. A decision is appended to the leader's log
 * (replicated-log.ts, durable), then committed by the election backend
 * (LeaderElection.commit: a majority of voters on the embedded backend, etcd
 * on the etcd one); only then is it applied, gossiped and acknowledged. A
 * decision that cannot be committed within commitTimeoutMs fails with
 * ERR_NOT_COMMITTED and the leader stops acting (it resumes from its log if
 * it still holds the lease: the entry is then committed with the next one).
 * Gossip spreads committed decisions only; it is never the source of truth.
 *
 * Desired state. Every agent keeps the latest payload per decision kind as
 * applied. A new leader starts from the committed log — its own replicated
 * copy (embedded: complete by Raft's election restriction) or etcd's — and
 * its first decision (kind "leader") carries that state, so every agent
 * adopts it on entering the epoch. While acting, the leader re-publishes the
 * epoch's recent decisions and the committed state every
 * republishIntervalMs, so an agent that missed a message catches up — when
 * some other live agent advertises the same voter set (nobody else needs it).
 *
 * Pulling. Gossip is not the only way: an agent that follows a known leader
 * (not itself) and accepted no batch from it for pullAfterSilenceMs (two
 * republish intervals) asks that leader directly, over a leader call on the
 * authenticated connection (method `election.state`), for the epoch's recent
 * decisions and the desired state, and feeds them to its decision log like a
 * gossiped batch (same fencing). So a follower that gossip cannot reach
 * still catches up, on every backend, clients included, within about
 * 2 × republishIntervalMs. Voters of the embedded backend are also pushed
 * to (catchUp below).
 */
import { join } from 'node:path'
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { validateElectionConfig, type ElectionConfig } from './election-config.ts'
import type { Mesh } from '../membership/mesh-service.ts'
import { Value } from '@sinclair/typebox/value'
import { DecisionBatchSchema, type Decision, type DecisionBatch } from '../membership/mesh-messages.ts'
import { openElectionStore, type ElectionStore } from './election-store.ts'
import type { LeaderElection, LeaderElectionState } from './leader-election.ts'
import { createEmbeddedElection } from './embedded-election.ts'
import { createEtcdElection } from './etcd-election.ts'
import type { LeaderViewBody } from './leader-views.ts'
import { createLeaderCalls, type LeaderCallHandler, type LeaderCallOptions } from './leader-calls.ts'
import { createDecisionLog, type AppliedDecision, type BatchVerdict, type DecisionLog, type DecisionLogEntry } from './decision-log.ts'
import { openReplicatedLog, type LogSnapshot } from './replicated-log.ts'

/** Why a payload is not a valid one of its kind; undefined when it is. */
export type PayloadCheck = (payload: unknown) => string | undefined

/** A leader-only subsystem (the cluster policies): runs while this agent acts as leader. */
export interface LeaderTask {
  name: string
  /**
   * Decision kinds this task owns, each with its payload check: only the
   * task publishes them (LeaderService.decide, the API's generic route,
   * refuses them with ERR_FORBIDDEN), and a payload that fails its check is
   * never appended to the log.
   */
  kinds?: Record<string, PayloadCheck>
  /** Starts the task; it must stop when `context.signal` aborts (leadership lost or agent stopping). */
  start(context: LeaderContext): Promise<void> | void
}

export interface LeaderContext {
  epoch: number
  signal: AbortSignal
  /** Resolves once the decision is committed (see above); ERR_NOT_COMMITTED / ERR_NOT_LEADER otherwise. */
  decide(kind: string, payload: unknown): Promise<{ epoch: number, seq: number }>
  /** The leader's log: every committed decision and this leader's own decisions (the base for the next one). */
  desiredState(): Record<string, unknown>
  /**
   * Resolves, with the log's last position, once everything desiredState()
   * holds is committed — a task answering from that state without deciding
   * anything (an idempotent repeat) waits for it first, since a decision whose
   * commit failed stays in the log. ERR_NOT_COMMITTED / ERR_NOT_LEADER otherwise.
   */
  barrier(): Promise<{ epoch: number, seq: number }>
  /** Answers leader calls to `method` (leader-calls.ts) until `signal` aborts. */
  handleCalls(method: string, handler: LeaderCallHandler): void
}

export type LeaderView = LeaderViewBody
export type SelfRole = LeaderView['self']

export interface LeaderServiceOptions {
  config: ElectionConfig
  /** Where election.json and decisions.jsonl live. */
  stateDir: string
  /**
   * Largest mesh message accepted, bytes (mesh.maxRecordBytes). A republish
   * carries as many of the recent decisions as fit beside the desired state
   * (which closes any gap the others would have). Default 65536.
   */
  maxBatchBytes?: number
}

export interface LeaderServiceComponents {
  logger: Logger
  mesh: Pick<Mesh, 'node' | 'publish' | 'setDecisionHandler' | 'peers' | 'subscribe' | 'addAvailabilityContributor' | 'availabilityChanged' | 'status'>
  /** Leader-only subsystems, started in order on gaining leadership. */
  leaderTasks: readonly LeaderTask[]
}

export interface LeaderService {
  start(options: { signal: AbortSignal }): Promise<void>
  stop(): Promise<void>
  view(): LeaderView
  /**
   * Publishes a decision of a kind no subsystem owns (operators' and tests'
   * own kinds): ERR_FORBIDDEN for an owned kind ('leader', 'jobs',
   * 'reward-workers', …), ERR_BODY_TOO_LARGE for a payload over
   * maxExternalPayloadBytes, ERR_NOT_LEADER unless this agent acts as leader.
   */
  decide(kind: string, payload: unknown): Promise<{ epoch: number, seq: number }>
  decisions(): DecisionLogEntry[]
  desiredState(): Record<string, unknown>
  /**
   * Runs `method` on the acting leader — this agent when it acts, else over
   * the mesh — retrying across leader changes (leader-calls.ts).
   */
  callLeader(method: string, body: unknown, options?: LeaderCallOptions): Promise<unknown>
  /** Every applied decision, in order (agents apply what concerns them). */
  onApplied(listener: (decision: AppliedDecision) => void): () => void
}

const recentDecisions = 32
/** Largest JSON payload of a decision published through LeaderService.decide (the API), bytes. */
export const maxExternalPayloadBytes = 64 * 1024

/** The payload of the epoch's first decision, kind 'leader'. */
const checkLeaderPayload: PayloadCheck = p => {
  const l = p as { leader?: unknown, epoch?: unknown, voters?: unknown } | null
  return l !== null && typeof l === 'object' && typeof l.leader === 'string' && Number.isInteger(l.epoch) && Array.isArray(l.voters)
    ? undefined
    : 'a leader decision is { leader, epoch, voters }'
}
/** Room left in a batch for its envelope and fields around the decisions, bytes. */
const batchOverheadBytes = 1024
/** The leader call that answers the acting leader's state batch (pulling, above). */
export const stateCallMethod = 'election.state'
/**
 * How long a leader call waits for an acting leader by default: covers a
 * failover — the old lease, two election rounds (a split vote), the view
 * grace — and at least 10 s. With the default timing that is 10 s.
 */
function leaderCallTimeoutMs (config: ElectionConfig): number {
  const failoverMs = config.backend === 'etcd'
    ? 2 * config.etcdLeaseTtlS * 1000 + config.viewGraceMs
    : config.leaseMs + 2 * config.electionTimeoutMaxMs + config.viewGraceMs
  return Math.max(10_000, failoverMs)
}

export { voterSetIdOf } from './embedded-election.ts'
export { validateElectionConfig } from './election-config.ts'

export async function createLeaderService (options: LeaderServiceOptions, components: LeaderServiceComponents): Promise<LeaderService> {
  const { config } = options
  validateElectionConfig(config)
  const log = components.logger
  const mesh = components.mesh
  const self = mesh.status().peerId
  const opened = await openElectionStore(options.stateDir, config.backend)
  if (opened.switchedFrom !== null) log.warn({ from: opened.switchedFrom, to: config.backend }, 'election backend changed: the previous voter set and fencing epoch are forgotten')
  const store: ElectionStore = opened
  const replicated = await openReplicatedLog(options.stateDir)
  /**
   * How long a decision may wait for its quorum before the leader gives up
   * (and stops acting). A leader that loses its majority loses its lease
   * sooner and fails the commit then; this bounds a majority that renews the
   * lease but is slow to store the log.
   */
  const commitTimeoutMs = config.backend === 'etcd' ? config.etcdLeaseTtlS * 1000 : 2 * config.electionTimeoutMaxMs
  const calls = createLeaderCalls({
    node: mesh.node,
    self,
    leadership: () => { const v = view(); return { leaderId: v.leaderId, acting: v.acting, tasksStarted: v.acting && acting?.tasksStarted === true } },
    onLeadershipChange (listener) { leadershipListeners.add(listener); return () => leadershipListeners.delete(listener) },
    logger: log,
    defaultTimeoutMs: leaderCallTimeoutMs(config),
  })
  let signal: AbortSignal = AbortSignal.abort()
  /** Waiting leader calls: woken when the election changes, a new epoch's first decision applies, or tasks start or stop. */
  const leadershipListeners = new Set<() => void>()
  const leadershipChanged = (): void => { for (const l of [...leadershipListeners]) l() }
  let desired: Record<string, unknown> = {}
  const appliedListeners = new Set<(d: AppliedDecision) => void>()

  /** A batch of the committed state and the newest recent decisions that fit in one mesh message with it. */
  const stateBatch = ({ epoch, committed, recent }: { epoch: number, committed: LogSnapshot, recent: readonly Decision[] }): DecisionBatch => {
    const { seq, entries } = committed
    let room = (options.maxBatchBytes ?? 65_536) - batchOverheadBytes - Buffer.byteLength(JSON.stringify(entries))
    let first = recent.length
    while (first > 0) {
      const bytes = Buffer.byteLength(JSON.stringify(recent[first - 1])) + 1
      if (bytes > room) break
      room -= bytes
      first--
    }
    return { kind: 'decisions', from: self, voterSetId: election.voterSetId(), epoch, decisions: recent.slice(first), state: { seq, entries }, sentAtMs: Date.now() }
  }

  const decisionLog: DecisionLog = createDecisionLog({ file: join(options.stateDir, 'decisions.jsonl'), memoryEntries: 10_000 }, {
    voterSetId: () => election.voterSetId(),
    mayDecide: peer => election.mayDecide(peer),
    persisted: () => { const p = store.current(); return { epoch: p.highestEpoch, leader: p.epochLeader, seq: p.appliedSeq, appliedEpoch: p.appliedEpoch } },
    persist: p => store.save({ highestEpoch: p.epoch, epochLeader: p.leader, appliedSeq: p.seq, appliedEpoch: p.appliedEpoch }),
    apply (d) {
      desired[d.kind] = d.payload
      if (d.kind === 'leader') leadershipChanged()
      for (const l of appliedListeners) {
        try { l(d) } catch (err) { log.warn({ err, kind: d.kind }, 'decision listener failed') }
      }
    },
    adoptState (epoch, leader, seq, entries) {
      const before = desired
      desired = { ...entries }
      log.info({ epoch, leader, seq }, 'adopted the desired state from a snapshot')
      // Subsystems hear of every kind the snapshot changed, as if its decision had been applied.
      for (const kind of Object.keys(desired)) {
        if (JSON.stringify(before[kind]) === JSON.stringify(desired[kind])) continue
        if (kind === 'leader') leadershipChanged()
        for (const l of appliedListeners) {
          try { l({ epoch, leader, seq, kind, payload: desired[kind] }) } catch (err) { log.warn({ err, kind }, 'decision listener failed') }
        }
      }
    },
  })

  /**
   * A voter whose heartbeat answers show it behind the acting leader's
   * decisions for catchUpAfterAnswers answers in a row gets the epoch's recent
   * decisions and the desired state directly, over the election protocol
   * (backends that have one: election.sendDecisions).
   */
  const lagging = new Map<string, number>()
  const catchUpAfterAnswers = 3
  const catchUp = (peer: string, applied: { epoch: number, seq: number } | undefined): void => {
    const a = acting
    if (a?.committed === undefined || applied === undefined || election.sendDecisions === undefined) return
    const committed = a.committed
    const behind = applied.seq < committed.seq
    const count = behind ? (lagging.get(peer) ?? 0) + 1 : 0
    lagging.set(peer, count >= catchUpAfterAnswers ? 0 : count)
    if (count < catchUpAfterAnswers || !election.mayAct()) return
    const batch = stateBatch({ ...a, committed })
    log.info({ peer, applied, epoch: a.epoch, seq: committed.seq }, 'voter lags behind the decisions: sending them directly')
    void election.sendDecisions(peer, batch, AbortSignal.timeout(config.rpcTimeoutMs * 3)).catch(err => log.debug({ peer, err: (err as Error).message }, 'direct catch-up failed'))
  }

  const election: LeaderElection = config.backend === 'etcd'
    ? createEtcdElection(config, { self, logger: log, store })
    : createEmbeddedElection(config, {
      self,
      logger: log,
      mesh,
      store,
      appliedPosition: () => { const p = decisionLog.position(); return { epoch: p.epoch, seq: p.seq } },
      onHeartbeatAnswer: (peer, r) => catchUp(peer, r.applied),
      receiveDecisions: batch => receive(batch),
      log: replicated,
    })

  /**
   * Follower side: when a batch of the leader this agent follows was last
   * accepted, or that leader first seen (monotonic ms), and whether a pull runs.
   */
  const heard = { leaderId: null as string | null, atMs: 0, pulling: false, batchFrom: null as string | null, batchAtMs: 0 }
  const receive = async (batch: DecisionBatch): Promise<BatchVerdict> => {
    const verdict = await decisionLog.receive(batch)
    if (verdict === 'accepted') {
      heard.batchFrom = batch.from
      heard.batchAtMs = performance.now()
      if (batch.from === heard.leaderId) heard.atMs = heard.batchAtMs
    }
    return verdict
  }
  const pullAfterSilenceMs = 2 * config.republishIntervalMs

  /** Asks the leader this agent follows for its state batch when it has been silent too long (pulling, above). */
  const pullIfSilent = (): void => {
    const { leaderId } = view()
    if (leaderId !== heard.leaderId) { heard.leaderId = leaderId; heard.atMs = performance.now() }
    if (leaderId === null || leaderId === self || acting !== undefined || heard.pulling || signal.aborted) return
    if (performance.now() - heard.atMs < pullAfterSilenceMs) return
    heard.pulling = true
    log.info({ leader: leaderId, silentMs: Math.round(performance.now() - heard.atMs) }, 'no decisions from the leader lately: pulling its state directly')
    void (async () => {
      const batch = await calls.callPeer(leaderId, stateCallMethod, {}, AbortSignal.any([signal, AbortSignal.timeout(config.rpcTimeoutMs * 3)])) as DecisionBatch
      if (!Value.Check(DecisionBatchSchema, batch) || batch.from !== leaderId) throw new Error('the answer is not a state batch of the leader called')
      const verdict = await receive(batch)
      log.info({ leader: leaderId, epoch: batch.epoch, seq: batch.state?.seq, verdict }, 'pulled the leader\'s state')
    })().catch(err => log.debug({ leader: leaderId, err: (err as Error).message }, 'state pull failed'))
      .finally(() => {
        heard.pulling = false
        // One pull per silence period, answered or not.
        if (heard.leaderId === leaderId) heard.atMs = Math.max(heard.atMs, performance.now() - pullAfterSilenceMs + config.republishIntervalMs)
      })
  }

  // Leader side of the current epoch.
  /**
   * The last epoch this agent acted in: its last committed snapshot (undefined
   * until its first decision committed) and recent decisions. A lease that
   * lapsed and was renewed in time (a late majority acknowledgement, a late
   * etcd keep-alive answer) resumes acting in the same epoch from there.
   */
  interface Led { epoch: number, committed: LogSnapshot | undefined, recent: Decision[], unpublished: Decision[] }
  let lastLed: Led | undefined
  /**
   * tasksStarted: the leader tasks of this epoch have started (leader calls are answered from then on).
   * tookOver: resolves once the committed state is adopted and the epoch's first decision committed
   * (at once for a resumed epoch); rejects with ERR_NOT_LEADER if acting stops before.
   */
  type Acting = Led & { controller: AbortController, republish: NodeJS.Timeout, tasksStarted: boolean, tookOver: PromiseWithResolvers<void> }
  let acting: Acting | undefined
  let supervisor: NodeJS.Timeout | undefined

  const notActing = (): AgentError => {
    const v = view()
    return new AgentError('ERR_NOT_LEADER', `this agent is not the acting leader (self: ${v.self}, leader: ${v.leaderId ?? 'unknown'}, epoch ${v.epoch})`, { details: { leaderId: v.leaderId, epoch: v.epoch } })
  }

  /**
   * Commits this leader's log up to `snapshot` (`durable`: its write here), then
   * applies and gossips every decision it covers that was not published yet
   * (a decision whose own commit failed is carried by the next one). A
   * commit that fails stops acting (the supervisor resumes from the log).
   */
  const commitAndPublish = async (a: Acting, snapshot: LogSnapshot, durable: Promise<void>): Promise<void> => {
    try {
      // The leader's own write and the replication run at once (Raft §10.2.1): the decision counts as
      // committed only when both are done, so the majority that holds it includes a durable leader.
      await Promise.all([durable, election.commit(snapshot, AbortSignal.any([a.controller.signal, AbortSignal.timeout(commitTimeoutMs)]))])
    } catch (err) {
      const e = (err as AgentError).code === 'ERR_NOT_COMMITTED'
        ? err as AgentError
        : new AgentError('ERR_NOT_COMMITTED', `decision ${snapshot.seq} not committed: ${(err as Error).message}`, { cause: err })
      if (acting === a) stopActing(`decision ${a.epoch}/${snapshot.seq} not committed`)
      throw e
    }
    const previous = a.committed?.seq
    if (previous !== undefined && previous >= snapshot.seq) return
    a.committed = snapshot
    const decisions = a.unpublished.filter(d => d.seq <= snapshot.seq)
    a.unpublished = a.unpublished.filter(d => d.seq > snapshot.seq)
    a.recent.push(...decisions)
    if (a.recent.length > recentDecisions) a.recent.splice(0, a.recent.length - recentDecisions)
    // The epoch's first batch, and any batch that does not continue the last one, carries the committed state.
    const withState = previous === undefined || decisions[0]?.seq !== previous + 1
    const batch: DecisionBatch = { kind: 'decisions', from: self, voterSetId: snapshot.voterSetId, epoch: a.epoch, decisions, ...(withState ? { state: { seq: snapshot.seq, entries: snapshot.entries } } : {}), sentAtMs: Date.now() }
    // Committed: it stands whatever happens to this leader now, so it is published even if the lease just
    // lapsed, while it is applied here (the answer still waits for both: the leader reads its own writes).
    await Promise.all([
      decisionLog.receive(batch),
      mesh.publish(batch).catch(err => log.warn({ err, seq: snapshot.seq }, 'committed decision not gossiped (republish and direct catch-up carry it)')),
    ])
  }

  /** Kind → its owner's payload check (the leader's own kind, and every task's). */
  const ownedKinds = new Map<string, { owner: string, check: PayloadCheck }>([['leader', { owner: 'the leader service', check: checkLeaderPayload }]])
  for (const task of components.leaderTasks) {
    for (const [kind, check] of Object.entries(task.kinds ?? {})) ownedKinds.set(kind, { owner: `the ${task.name} task`, check })
  }

  const decide = async (kind: string, payload: unknown): Promise<{ epoch: number, seq: number }> => {
    const a = acting
    if (a === undefined || !election.mayAct()) throw notActing()
    const owned = ownedKinds.get(kind)
    const problem = owned?.check(payload)
    if (problem !== undefined) throw new AgentError('ERR_INTERNAL', `refusing a ${kind} decision with an invalid payload (${problem}); nothing was appended`)
    const { snapshot, durable } = replicated.append(election.voterSetId(), a.epoch, kind, payload)
    a.unpublished.push({ seq: snapshot.seq, kind, payload })
    await commitAndPublish(a, snapshot, durable)
    return { epoch: a.epoch, seq: snapshot.seq }
  }

  /** LeaderContext.barrier: commits whatever the log holds beyond the last commit. */
  const barrier = async (): Promise<{ epoch: number, seq: number }> => {
    const a = acting
    if (a === undefined || !election.mayAct()) throw notActing()
    const snapshot = replicated.snapshot(election.voterSetId())
    // accept() of what the log already holds resolves once its pending writes are durable here.
    if ((a.committed?.seq ?? 0) < snapshot.seq) await commitAndPublish(a, snapshot, replicated.accept(snapshot).then(() => {}))
    return { epoch: a.epoch, seq: snapshot.seq }
  }

  /** Some other live agent follows this voter set (a lone --dev agent among others re-publishes nothing). */
  const followed = (): boolean => {
    const id = election.voterSetId()
    return mesh.peers().some(p => p.state !== 'dead' && p.record?.election?.voterSetId === id)
  }

  const startActing = (state: LeaderElectionState): void => {
    const controller = new AbortController()
    const resumed = lastLed !== undefined && lastLed.epoch === state.epoch && lastLed.committed !== undefined ? lastLed : undefined
    const a: Acting = { epoch: state.epoch, committed: resumed?.committed, recent: resumed?.recent ?? [], unpublished: resumed?.unpublished ?? [], controller, republish: setInterval(() => republish(), config.republishIntervalMs), tasksStarted: false, tookOver: Promise.withResolvers() }
    a.republish.unref()
    a.tookOver.promise.catch(() => {})
    acting = a
    lastLed = a
    log.info({ epoch: a.epoch, resumedAtSeq: resumed?.committed?.seq }, 'leader: acting')
    const republish = (): void => {
      const committed = a.committed
      if (acting !== a || committed === undefined || !election.mayAct() || !followed()) return
      void mesh.publish(stateBatch({ ...a, committed })).catch(err => log.warn({ err }, 'decision republish failed'))
    }
    void (async () => {
      if (resumed === undefined) {
        // etcd keeps the committed log: continue from it, not from this agent's own (possibly uncommitted) copy.
        const base = await election.committedBase(controller.signal)
        if (base !== undefined) await replicated.reset(base)
        await decide('leader', { leader: self, epoch: a.epoch, voters: election.voters() })
      }
      a.tookOver.resolve()
      // Bound to this acting: a task still starting when acting stopped registers nothing afterwards.
      const handleCalls = (method: string, handler: LeaderCallHandler): void => { calls.handle(method, handler, controller.signal) }
      handleCalls(stateCallMethod, async () => stateBatch({ ...a, committed: a.committed! }))
      const context: LeaderContext = { epoch: a.epoch, signal: controller.signal, decide, barrier, desiredState: () => replicated.snapshot(election.voterSetId()).entries, handleCalls }
      for (const task of components.leaderTasks) {
        if (controller.signal.aborted) return
        await Promise.resolve(task.start(context)).catch(err => log.error({ err, task: task.name }, 'leader task failed'))
      }
      a.tasksStarted = true
      leadershipChanged()
    })().catch(err => {
      log.warn({ err: (err as Error).message }, 'leader start-up decision failed')
      // Not acting half-way (no tasks, nothing committed in the epoch): the supervisor tries again.
      if (acting === a) stopActing('start-up decision failed')
    })
  }

  const stopActing = (why: string): void => {
    const a = acting
    if (a === undefined) return
    acting = undefined
    clearInterval(a.republish)
    a.controller.abort()
    a.tookOver.reject(notActing())
    log.info({ epoch: a.epoch, why }, 'leader: stopped acting')
    leadershipChanged()
  }

  /** Starts or stops acting as the election's state allows (evaluated on every change and every half heartbeat). */
  const supervise = (): void => {
    const state = election.state()
    if (state === undefined) { stopActing('not electing'); return }
    const position = decisionLog.position()
    const fenced = state.epoch > position.epoch || (state.epoch === position.epoch && (position.leader === null || position.leader === self))
    const mayAct = election.mayAct()
    if (acting !== undefined && (!mayAct || acting.epoch !== state.epoch)) stopActing(mayAct ? 'new epoch' : 'lease lost')
    if (acting === undefined && mayAct && fenced && performance.now() >= state.actAfterMs + config.viewGraceMs && !signal.aborted) startActing(state)
  }

  /** How long ago this agent heard from the leader it names: itself 0, voters by the election's heartbeats, others by decision batches. */
  const leaderHeardMsAgo = (state: LeaderElectionState | undefined, now: number): number | null => {
    const leaderId = state !== undefined ? state.leaderId : decisionLog.position().leader
    if (leaderId === null) return null
    if (leaderId === self) return 0
    const at = state?.leaderContactMs ?? (heard.batchFrom === leaderId ? heard.batchAtMs : undefined)
    return at === undefined || !Number.isFinite(at) ? null : Math.max(0, Math.round(now - at))
  }

  /** Live peers advertising a voter set other than this agent's (both known): two clusters on one mesh. */
  const otherVoterSets = (): LeaderView['otherVoterSets'] => {
    const own = election.voterSetId()
    if (own === '') return []
    const bySet = new Map<string, string[]>()
    for (const p of mesh.peers()) {
      const id = p.record?.election?.voterSetId
      if (p.state === 'dead' || id === undefined || id === '' || id === own) continue
      bySet.set(id, [...(bySet.get(id) ?? []), p.peerId])
    }
    return [...bySet].map(([voterSetId, agents]) => ({ voterSetId, agents: agents.sort() })).sort((a, b) => a.voterSetId < b.voterSetId ? -1 : 1)
  }

  const view = (): LeaderView => {
    const now = performance.now()
    const state = election.state()
    const position = decisionLog.position()
    const self_: SelfRole = state === undefined ? (config.server ? 'follower' : 'client') : state.role
    return {
      leaderId: state !== undefined ? state.leaderId : position.leader,
      epoch: state !== undefined ? state.epoch : position.epoch,
      backend: election.backend,
      voters: [...election.voters()],
      self: self_,
      selfId: self,
      voterSetId: election.voterSetId(),
      acting: acting?.committed !== undefined && election.mayAct(),
      applied: { epoch: position.epoch, seq: position.seq },
      commitSeq: acting !== undefined ? acting.committed?.seq ?? 0 : null,
      log: config.backend === 'embedded' && election.voters().includes(self) ? replicated.last(election.voterSetId()) : null,
      leaseRemainingMs: state?.role === 'leader' ? Math.max(0, Math.round(state.leaseUntilMs - now)) : null,
      leaderHeardMsAgo: leaderHeardMsAgo(state, now),
      otherVoterSets: otherVoterSets(),
      decisions: decisionLog.counts(),
    }
  }

  let stopped: Promise<void> | undefined
  return {
    async start (o) {
      signal = o.signal
      mesh.addAvailabilityContributor({
        name: 'election',
        collect: () => ({ election: { server: config.server, voterSetId: election.voterSetId(), voters: [...election.voters()] } }),
      })
      mesh.availabilityChanged()
      mesh.setDecisionHandler(batch => receive(batch))
      election.onChange(() => {
        supervise()
        mesh.availabilityChanged()
        leadershipChanged()
      })
      await calls.start()
      await election.start({ signal })
      supervisor = setInterval(() => { supervise(); pullIfSilent() }, Math.max(20, Math.floor((config.backend === 'etcd' ? config.etcdPollIntervalMs : config.heartbeatIntervalMs) / 2)))
      supervisor.unref()
    },
    stop () {
      stopped ??= (async () => {
        clearInterval(supervisor)
        stopActing('agent stopping')
        await election.stop()
        mesh.setDecisionHandler(undefined)
        await calls.stop()
        await decisionLog.flush()
        await replicated.close()
      })()
      return stopped
    },
    view,
    async decide (kind, payload) {
      const owned = ownedKinds.get(kind)
      if (owned !== undefined) throw new AgentError('ERR_FORBIDDEN', `decision kind ${JSON.stringify(kind)} belongs to ${owned.owner}: only it publishes ${kind} decisions`)
      const bytes = Buffer.byteLength(JSON.stringify(payload ?? null))
      if (bytes > maxExternalPayloadBytes) throw new AgentError('ERR_BODY_TOO_LARGE', `a decision payload of ${bytes} bytes; at most ${maxExternalPayloadBytes} (every agent keeps the latest payload of each kind)`)
      // Wait for the take-over of the epoch acting now (a newer one may begin while waiting).
      for (;;) {
        const a = acting
        if (a === undefined) throw notActing()
        await a.tookOver.promise
        if (acting === a) return await decide(kind, payload)
      }
    },
    decisions: () => decisionLog.entries(),
    callLeader: (method, body, options) => calls.call(method, body, options),
    desiredState: () => ({ ...desired }),
    onApplied (listener) { appliedListeners.add(listener); return () => appliedListeners.delete(listener) },
  }
}
