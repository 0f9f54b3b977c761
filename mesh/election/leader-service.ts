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
 * Desired state. Every agent keeps the latest payload per decision kind as
 * applied; a new leader starts from its own copy. While acting, the leader
 * re-publishes the epoch's recent decisions and the full desired state every
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
import { AgentError } from '../../agent/errors.ts'
import { validateElectionConfig, type ElectionConfig } from './election-config.ts'
import type { Mesh } from '../mesh-service.ts'
import { Value } from '@sinclair/typebox/value'
import { DecisionBatchSchema, type Decision, type DecisionBatch } from '../mesh-messages.ts'
import { openElectionStore, type ElectionStore } from './election-store.ts'
import type { LeaderElection, LeaderElectionState } from './leader-election.ts'
import { createEmbeddedElection } from './embedded-election.ts'
import { createEtcdElection } from './etcd-election.ts'
import type { LeaderViewBody } from './leader-views.ts'
import { createLeaderCalls, type LeaderCallHandler, type LeaderCallOptions } from './leader-calls.ts'
import { createDecisionLog, type AppliedDecision, type BatchVerdict, type DecisionLog, type DecisionLogEntry } from './decision-log.ts'

/** A leader-only subsystem (the cluster policies): runs while this agent acts as leader. */
export interface LeaderTask {
  name: string
  /** Starts the task; it must stop when `context.signal` aborts (leadership lost or agent stopping). */
  start(context: LeaderContext): Promise<void> | void
}

export interface LeaderContext {
  epoch: number
  signal: AbortSignal
  decide(kind: string, payload: unknown): Promise<{ epoch: number, seq: number }>
  desiredState(): Record<string, unknown>
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
  /** Publishes a decision; ERR_NOT_LEADER unless this agent acts as leader. */
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
  /**
   * Fault injection (tests): publishes a decision in the last epoch this agent
   * led, with the next seq, ignoring the lease — what a leader frozen between
   * its lease check and its publish would send. ERR_NOT_LEADER if it never led.
   */
  publishStaleDecision(kind: string, payload: unknown): Promise<{ epoch: number, seq: number }>
}

const recentDecisions = 32
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

  /** A batch of the desired state and the newest recent decisions that fit in one mesh message with it. */
  const stateBatch = ({ epoch, seq, recent }: { epoch: number, seq: number, recent: readonly Decision[] }): DecisionBatch => {
    const entries = { ...desired }
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
    persisted: () => { const p = store.current(); return { epoch: p.highestEpoch, leader: p.epochLeader, seq: p.appliedSeq } },
    persist: p => store.save({ highestEpoch: p.epoch, epochLeader: p.leader, appliedSeq: p.seq }),
    apply (d) {
      desired[d.kind] = d.payload
      if (d.kind === 'leader') leadershipChanged()
      for (const l of appliedListeners) {
        try { l(d) } catch (err) { log.warn({ err, kind: d.kind }, 'decision listener failed') }
      }
    },
    adoptState (epoch, leader, entries) {
      desired = { ...entries }
      log.info({ epoch, leader }, 'adopted the desired state from a snapshot')
    },
  })

  /**
   * A voter whose heartbeat answers show it behind the acting leader's
   * decisions for catchUpAfterAnswers answers in a row gets the epoch's recent
   * decisions and the desired state directly, over the election protocol
   * (backends that have one: election.sendDecisions).
   */
  const lagging = new Map<string, number>()
  const catchUpAfterAnswers = 5
  const catchUp = (peer: string, applied: { epoch: number, seq: number } | undefined): void => {
    const a = acting
    if (a === undefined || applied === undefined || a.seq === 0 || election.sendDecisions === undefined) return
    const behind = applied.epoch < a.epoch || (applied.epoch === a.epoch && applied.seq < a.seq)
    const count = behind ? (lagging.get(peer) ?? 0) + 1 : 0
    lagging.set(peer, count >= catchUpAfterAnswers ? 0 : count)
    if (count < catchUpAfterAnswers || !election.mayAct()) return
    const batch = stateBatch(a)
    log.info({ peer, applied, epoch: a.epoch, seq: a.seq }, 'voter lags behind the decisions: sending them directly')
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
    })

  /**
   * Follower side: when a batch of the leader this agent follows was last
   * accepted, or that leader first seen (monotonic ms), and whether a pull runs.
   */
  const heard = { leaderId: null as string | null, atMs: 0, pulling: false }
  const receive = async (batch: DecisionBatch): Promise<BatchVerdict> => {
    const verdict = await decisionLog.receive(batch)
    if (verdict === 'accepted' && batch.from === heard.leaderId) heard.atMs = performance.now()
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
   * The last epoch this agent acted in, its last seq and recent decisions. A
   * lease that lapsed and was renewed in time (a late majority acknowledgement,
   * a late etcd keep-alive answer) resumes acting in the same epoch: the
   * sequence continues (a seq is never given to two decisions).
   * publishStaleDecision publishes in it.
   */
  let lastLed: { epoch: number, seq: number, recent: Decision[] } | undefined
  /** tasksStarted: the leader tasks of this epoch have started (leader calls are answered from then on). */
  let acting: { epoch: number, seq: number, recent: Decision[], controller: AbortController, republish: NodeJS.Timeout, tasksStarted: boolean } | undefined
  let supervisor: NodeJS.Timeout | undefined

  const decide = async (kind: string, payload: unknown): Promise<{ epoch: number, seq: number }> => {
    const a = acting
    if (a === undefined || !election.mayAct()) {
      const v = view()
      throw new AgentError('ERR_NOT_LEADER', `this agent is not the acting leader (self: ${v.self}, leader: ${v.leaderId ?? 'unknown'}, epoch ${v.epoch})`, { details: { leaderId: v.leaderId, epoch: v.epoch } })
    }
    const decision: Decision = { seq: ++a.seq, kind, payload }
    lastLed = { epoch: a.epoch, seq: a.seq, recent: a.recent }
    a.recent.push(decision)
    if (a.recent.length > recentDecisions) a.recent.shift()
    const batch: DecisionBatch = { kind: 'decisions', from: self, voterSetId: election.voterSetId(), epoch: a.epoch, decisions: [decision], sentAtMs: Date.now() }
    await decisionLog.receive(batch)
    // Checked again right before it leaves: the lease may have lapsed meanwhile.
    if (!election.mayAct() || acting !== a) throw new AgentError('ERR_NOT_LEADER', `lost the lease before decision ${a.epoch}/${decision.seq} was published`)
    await mesh.publish(batch)
    return { epoch: a.epoch, seq: decision.seq }
  }

  /** Some other live agent follows this voter set (a lone --dev agent among others re-publishes nothing). */
  const followed = (): boolean => {
    const id = election.voterSetId()
    return mesh.peers().some(p => p.state !== 'dead' && p.record?.election?.voterSetId === id)
  }

  const startActing = (state: LeaderElectionState): void => {
    const controller = new AbortController()
    const resumed = lastLed !== undefined && lastLed.epoch === state.epoch ? lastLed : undefined
    const a = { epoch: state.epoch, seq: resumed?.seq ?? 0, recent: resumed?.recent ?? [] as Decision[], controller, republish: setInterval(() => republish(), config.republishIntervalMs), tasksStarted: false }
    a.republish.unref()
    acting = a
    lastLed = { epoch: a.epoch, seq: a.seq, recent: a.recent }
    log.info({ epoch: a.epoch, resumedAtSeq: resumed?.seq }, 'leader: acting')
    const republish = (): void => {
      if (acting !== a || !election.mayAct() || !followed()) return
      void mesh.publish(stateBatch(a)).catch(err => log.warn({ err }, 'decision republish failed'))
    }
    void (async () => {
      if (resumed === undefined) await decide('leader', { leader: self, epoch: a.epoch, voters: election.voters() })
      const handleCalls = (method: string, handler: LeaderCallHandler): void => {
        const unregister = calls.handle(method, handler)
        controller.signal.addEventListener('abort', unregister, { once: true })
      }
      handleCalls(stateCallMethod, async () => stateBatch(a))
      const context: LeaderContext = { epoch: a.epoch, signal: controller.signal, decide, desiredState: () => ({ ...desired }), handleCalls }
      for (const task of components.leaderTasks) {
        if (controller.signal.aborted) return
        await Promise.resolve(task.start(context)).catch(err => log.error({ err, task: task.name }, 'leader task failed'))
      }
      a.tasksStarted = true
      leadershipChanged()
    })().catch(err => log.warn({ err: (err as Error).message }, 'leader start-up decision failed'))
  }

  const stopActing = (why: string): void => {
    const a = acting
    if (a === undefined) return
    acting = undefined
    clearInterval(a.republish)
    a.controller.abort()
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

  const view = (): LeaderView => {
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
      acting: acting !== undefined && election.mayAct(),
      applied: { epoch: position.epoch, seq: position.seq },
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
      })()
      return stopped
    },
    view,
    decide,
    decisions: () => decisionLog.entries(),
    callLeader: (method, body, options) => calls.call(method, body, options),
    desiredState: () => ({ ...desired }),
    onApplied (listener) { appliedListeners.add(listener); return () => appliedListeners.delete(listener) },
    async publishStaleDecision (kind, payload) {
      if (lastLed === undefined) throw new AgentError('ERR_NOT_LEADER', 'this agent never led: no epoch to publish in')
      const seq = ++lastLed.seq
      log.warn({ epoch: lastLed.epoch, seq, kind }, 'fault injection: publishing a decision without a lease')
      await mesh.publish({ kind: 'decisions', from: self, voterSetId: election.voterSetId(), epoch: lastLed.epoch, decisions: [{ seq, kind, payload }], sentAtMs: Date.now() })
      return { epoch: lastLed.epoch, seq }
    },
  }
}
