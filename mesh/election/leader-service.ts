/**
 * The leader subsystem: the voter set (bootstrap or adoption), the embedded
 * Raft election (raft-election.ts) over libp2p (election-rpc.ts), fenced
 * decisions over gossip (decision-log.ts), and the leader-only tasks.
 *
 * Voter set. A server started with bootstrapExpect N waits until it sees N
 * servers (itself included) that have no voter set yet; the N lowest peer ids
 * become the voter set, persisted with its id (SHA-256 of the sorted ids). All
 * N servers compute the same set, as long as exactly N servers start with
 * bootstrapExpect N (Consul's rule). An agent that sees a voter set in a
 * peer's record and has none adopts it (as a voter only if it is listed).
 * Clients (election.server = false) never vote; they follow decisions.
 *
 * Acting. The leader acts (decides, runs the leader-only tasks) only while
 * the election says it may (majority-renewed lease, previous lease waited
 * out) and after viewGraceMs more, during which it rebuilds its view of the
 * cluster from gossip: nothing it has not heard of yet is "dead" because it
 * just took over. The first decision of every epoch is kind "leader".
 * Acting stops the moment the lease is not renewed; tasks are aborted.
 *
 * Desired state. Every agent keeps the latest payload per decision kind as
 * applied; a new leader starts from its own copy. While acting, the leader
 * re-publishes the epoch's recent decisions and the full desired state every
 * republishIntervalMs, so an agent that missed a message catches up — when
 * some other live agent advertises the same voter set (nobody else needs it).
 */
import { createHash } from 'node:crypto'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { AgentError } from '../../agent/errors.ts'
import type { ElectionConfig } from './election-config.ts'
import type { Mesh } from '../mesh-service.ts'
import type { Decision, DecisionBatch } from '../mesh-messages.ts'
import { openElectionStore, type ElectionStore } from './election-store.ts'
import { createElectionRpc } from './election-rpc.ts'
import { createRaftElection, type ElectionState, type RaftElection } from './raft-election.ts'
import type { LeaderViewBody } from './leader-views.ts'
import { createLeaderCalls, type LeaderCallHandler, type LeaderCallOptions } from './leader-calls.ts'
import { createDecisionLog, type AppliedDecision, type DecisionLog, type DecisionLogEntry } from './decision-log.ts'

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
/** How long a leader call waits for an acting leader by default: covers a failover (lease + election + view grace). */
const leaderCallTimeoutMs = 10_000

export function voterSetIdOf (voters: readonly string[]): string {
  return createHash('sha256').update([...voters].sort().join('\n')).digest('hex').slice(0, 16)
}

export function validateElectionConfig (c: ElectionConfig): void {
  const problems: string[] = []
  if (c.electionTimeoutMaxMs < c.electionTimeoutMinMs) problems.push('election.electionTimeoutMaxMs must be >= election.electionTimeoutMinMs')
  if (c.leaseMs >= c.electionTimeoutMinMs) problems.push('election.leaseMs must be < election.electionTimeoutMinMs (a lease must end before any voter may vote again)')
  if (c.heartbeatIntervalMs * 2 > c.leaseMs) problems.push('election.heartbeatIntervalMs must be at most half of election.leaseMs (a lease must survive one lost heartbeat)')
  if (c.rpcTimeoutMs >= c.electionTimeoutMinMs) problems.push('election.rpcTimeoutMs must be < election.electionTimeoutMinMs')
  if (problems.length > 0) throw new AgentError('ERR_CONFIG_INVALID', problems.join('; '), { details: problems })
}

export async function createLeaderService (options: LeaderServiceOptions, components: LeaderServiceComponents): Promise<LeaderService> {
  const { config } = options
  validateElectionConfig(config)
  const log = components.logger
  const mesh = components.mesh
  const self = mesh.status().peerId
  const store: ElectionStore = await openElectionStore(options.stateDir)
  const rpc = createElectionRpc(mesh.node)
  const calls = createLeaderCalls({
    node: mesh.node,
    self,
    leadership: () => { const v = view(); return { leaderId: v.leaderId, acting: v.acting } },
    actingSinceMs: () => actingSinceMs,
    logger: log,
    defaultTimeoutMs: leaderCallTimeoutMs,
  })
  let election: RaftElection | undefined
  /** When this agent last began to act (its leader tasks start after the epoch's first decision). */
  let actingSinceMs = -Infinity
  let signal: AbortSignal = AbortSignal.abort()
  let desired: Record<string, unknown> = {}
  const appliedListeners = new Set<(d: AppliedDecision) => void>()

  const decisionLog: DecisionLog = createDecisionLog({ file: join(options.stateDir, 'decisions.jsonl'), memoryEntries: 10_000 }, {
    voterSetId: () => store.current().voterSetId,
    voters: () => store.current().voters,
    persisted: () => { const p = store.current(); return { epoch: p.highestEpoch, leader: p.epochLeader, seq: p.appliedSeq } },
    persist: p => store.save({ highestEpoch: p.epoch, epochLeader: p.leader, appliedSeq: p.seq }),
    apply (d) {
      desired[d.kind] = d.payload
      for (const l of appliedListeners) {
        try { l(d) } catch (err) { log.warn({ err, kind: d.kind }, 'decision listener failed') }
      }
    },
    adoptState (epoch, leader, entries) {
      desired = { ...entries }
      log.info({ epoch, leader }, 'adopted the desired state from a snapshot')
    },
  })

  // Leader side of the current epoch.
  /**
   * The last epoch this agent acted in, its last seq and recent decisions. A
   * lease that lapsed and was renewed by a late majority acknowledgement
   * resumes acting in the same epoch: the sequence continues (a seq is never
   * given to two decisions). publishStaleDecision publishes in it.
   */
  let lastLed: { epoch: number, seq: number, recent: Decision[] } | undefined
  let acting: { epoch: number, seq: number, recent: Decision[], controller: AbortController, republish: NodeJS.Timeout } | undefined
  let supervisor: NodeJS.Timeout | undefined
  let bootstrapTimer: NodeJS.Timeout | undefined

  const publishBatch = async (batch: DecisionBatch): Promise<void> => {
    await mesh.publish(batch)
  }

  const decide = async (kind: string, payload: unknown): Promise<{ epoch: number, seq: number }> => {
    const a = acting
    if (a === undefined || election === undefined || !election.mayAct()) {
      const v = view()
      throw new AgentError('ERR_NOT_LEADER', `this agent is not the acting leader (self: ${v.self}, leader: ${v.leaderId ?? 'unknown'}, epoch ${v.epoch})`, { details: { leaderId: v.leaderId, epoch: v.epoch } })
    }
    const decision: Decision = { seq: ++a.seq, kind, payload }
    lastLed = { epoch: a.epoch, seq: a.seq, recent: a.recent }
    a.recent.push(decision)
    if (a.recent.length > recentDecisions) a.recent.shift()
    const batch: DecisionBatch = { kind: 'decisions', from: self, voterSetId: store.current().voterSetId, epoch: a.epoch, decisions: [decision], sentAtMs: Date.now() }
    await decisionLog.receive(batch)
    // Checked again right before it leaves: the lease may have lapsed meanwhile.
    if (!election.mayAct() || acting !== a) throw new AgentError('ERR_NOT_LEADER', `lost the lease before decision ${a.epoch}/${decision.seq} was published`)
    await publishBatch(batch)
    return { epoch: a.epoch, seq: decision.seq }
  }

  /**
   * A voter whose heartbeat answers show it behind the acting leader's
   * decisions for catchUpAfterAnswers answers in a row gets the epoch's recent
   * decisions and the desired state directly, over the election protocol.
   */
  const lagging = new Map<string, number>()
  const catchUpAfterAnswers = 5
  const catchUp = (peer: string, applied: { epoch: number, seq: number } | undefined): void => {
    const a = acting
    if (a === undefined || applied === undefined || a.seq === 0) return
    const behind = applied.epoch < a.epoch || (applied.epoch === a.epoch && applied.seq < a.seq)
    const count = behind ? (lagging.get(peer) ?? 0) + 1 : 0
    lagging.set(peer, count >= catchUpAfterAnswers ? 0 : count)
    if (count < catchUpAfterAnswers || election?.mayAct() !== true) return
    const batch: DecisionBatch = { kind: 'decisions', from: self, voterSetId: store.current().voterSetId, epoch: a.epoch, decisions: [...a.recent], state: { seq: a.seq, entries: { ...desired } }, sentAtMs: Date.now() }
    log.info({ peer, applied, epoch: a.epoch, seq: a.seq }, 'voter lags behind the decisions: sending them directly')
    void rpc.request(peer, { type: 'decisions', batch }, AbortSignal.timeout(config.rpcTimeoutMs * 3)).catch(err => log.debug({ peer, err: (err as Error).message }, 'direct catch-up failed'))
  }

  /** Some other live agent follows this voter set (a lone --dev agent among others re-publishes nothing). */
  const followed = (): boolean => {
    const id = store.current().voterSetId
    return mesh.peers().some(p => p.state !== 'dead' && p.record?.election?.voterSetId === id)
  }

  const startActing = (state: ElectionState): void => {
    const controller = new AbortController()
    const resumed = lastLed !== undefined && lastLed.epoch === state.term ? lastLed : undefined
    const a = { epoch: state.term, seq: resumed?.seq ?? 0, recent: resumed?.recent ?? [] as Decision[], controller, republish: setInterval(() => republish(), config.republishIntervalMs) }
    a.republish.unref()
    acting = a
    actingSinceMs = performance.now()
    lastLed = { epoch: a.epoch, seq: a.seq, recent: a.recent }
    log.info({ epoch: a.epoch, resumedAtSeq: resumed?.seq }, 'leader: acting')
    const republish = (): void => {
      if (acting !== a || election?.mayAct() !== true || !followed()) return
      const batch: DecisionBatch = { kind: 'decisions', from: self, voterSetId: store.current().voterSetId, epoch: a.epoch, decisions: [...a.recent], state: { seq: a.seq, entries: { ...desired } }, sentAtMs: Date.now() }
      void publishBatch(batch).catch(err => log.warn({ err }, 'decision republish failed'))
    }
    void (async () => {
      if (resumed === undefined) await decide('leader', { leader: self, epoch: a.epoch, voters: store.current().voters })
      const handleCalls = (method: string, handler: LeaderCallHandler): void => {
        const unregister = calls.handle(method, handler)
        controller.signal.addEventListener('abort', unregister, { once: true })
      }
      const context: LeaderContext = { epoch: a.epoch, signal: controller.signal, decide, desiredState: () => ({ ...desired }), handleCalls }
      for (const task of components.leaderTasks) {
        if (controller.signal.aborted) return
        await Promise.resolve(task.start(context)).catch(err => log.error({ err, task: task.name }, 'leader task failed'))
      }
    })().catch(err => log.warn({ err: (err as Error).message }, 'leader start-up decision failed'))
  }

  const stopActing = (why: string): void => {
    const a = acting
    if (a === undefined) return
    acting = undefined
    clearInterval(a.republish)
    a.controller.abort()
    log.info({ epoch: a.epoch, why }, 'leader: stopped acting')
  }

  /** Starts or stops acting as the election's state allows (evaluated on every change and every heartbeat). */
  const supervise = (): void => {
    if (election === undefined) return
    const state = election.state()
    const position = decisionLog.position()
    const fenced = state.term > position.epoch || (state.term === position.epoch && (position.leader === null || position.leader === self))
    const may = election.mayAct() && fenced && performance.now() >= state.actAfterMs + config.viewGraceMs
    if (acting !== undefined && (!election.mayAct() || acting.epoch !== state.term)) stopActing(election.mayAct() ? 'new term' : 'lease lost')
    if (acting === undefined && may && !signal.aborted) startActing(state)
  }

  const startElection = (): void => {
    const persisted = store.current()
    election = createRaftElection({
      self,
      voters: persisted.voters,
      voterSetId: persisted.voterSetId,
      heartbeatIntervalMs: config.heartbeatIntervalMs,
      electionTimeoutMinMs: config.electionTimeoutMinMs,
      electionTimeoutMaxMs: config.electionTimeoutMaxMs,
      leaseMs: config.leaseMs,
      rpcTimeoutMs: config.rpcTimeoutMs,
    }, {
      transport: rpc,
      storage: store,
      log,
      appliedPosition: () => { const p = decisionLog.position(); return { epoch: p.epoch, seq: p.seq } },
      onHeartbeatAnswer: (peer, r) => catchUp(peer, r.applied),
    })
    election.onChange(() => supervise())
    election.start({ signal })
    supervisor = setInterval(supervise, Math.max(20, Math.floor(config.heartbeatIntervalMs / 2)))
    supervisor.unref()
    log.info({ voters: persisted.voters, voterSetId: persisted.voterSetId, voting: persisted.voters.includes(self) }, 'election started')
  }

  const adoptVoters = async (voters: string[], why: string): Promise<void> => {
    const sorted = [...voters].sort()
    await store.save({ voters: sorted, voterSetId: voterSetIdOf(sorted) })
    log.info({ voters: sorted, why }, 'voter set fixed')
    mesh.availabilityChanged()
    if (!signal.aborted) startElection()
  }

  /** Until a voter set is known: adopt one a peer advertises, or bootstrap one. */
  let settling = false
  const settleVoters = async (): Promise<void> => {
    if (settling || store.current().voters.length > 0 || signal.aborted) return
    settling = true
    try {
      const alive = mesh.peers().filter(p => p.state === 'alive' && p.record?.election !== undefined)
      const advertised = alive.find(p => p.record!.election!.voterSetId !== '')?.record?.election
      if (advertised !== undefined) { await adoptVoters(advertised.voters, `adopted from a peer (${advertised.voterSetId})`); return }
      if (!config.server || config.bootstrapExpect === 0) return
      const servers = [self, ...alive.filter(p => p.record!.election!.server).map(p => p.peerId)].sort()
      if (servers.length < config.bootstrapExpect) return
      const voters = servers.slice(0, config.bootstrapExpect)
      if (voters.includes(self)) await adoptVoters(voters, `bootstrapped: ${config.bootstrapExpect} servers see each other`)
    } finally {
      settling = false
    }
  }

  const view = (): LeaderView => {
    const persisted = store.current()
    const state = election?.state()
    const position = decisionLog.position()
    const voting = persisted.voters.includes(self)
    const self_: SelfRole = !voting || state === undefined ? (config.server ? 'follower' : 'client') : state.role
    return {
      leaderId: voting && state !== undefined ? state.leaderId : position.leader,
      epoch: voting && state !== undefined ? state.term : position.epoch,
      backend: 'embedded',
      voters: persisted.voters,
      self: self_,
      selfId: self,
      voterSetId: persisted.voterSetId,
      acting: acting !== undefined && election?.mayAct() === true,
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
        collect: () => { const p = store.current(); return { election: { server: config.server, voterSetId: p.voterSetId, voters: p.voters } } },
      })
      mesh.availabilityChanged()
      mesh.setDecisionHandler(batch => decisionLog.receive(batch))
      await rpc.register(async (from, request) => {
        if (request.type === 'decisions') {
          if (request.batch.from !== from) return { term: store.current().term, granted: false, reason: 'sender is not the batch\'s leader' }
          return { term: store.current().term, granted: await decisionLog.receive(request.batch) === 'accepted' }
        }
        return election !== undefined
          ? election.handle(from, request)
          : { term: store.current().term, granted: false, reason: 'no voter set yet' }
      })
      await calls.start()
      if (store.current().voters.length > 0) {
        startElection()
      } else {
        bootstrapTimer = setInterval(() => {
          if (store.current().voters.length > 0) { clearInterval(bootstrapTimer); return }
          void settleVoters().catch(err => log.error({ err }, 'voter set bootstrap failed'))
        }, 100)
        bootstrapTimer.unref()
        await settleVoters()
      }
    },
    stop () {
      stopped ??= (async () => {
        clearInterval(bootstrapTimer)
        clearInterval(supervisor)
        stopActing('agent stopping')
        election?.stop()
        mesh.setDecisionHandler(undefined)
        await rpc.unregister()
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
      await publishBatch({ kind: 'decisions', from: self, voterSetId: store.current().voterSetId, epoch: lastLed.epoch, decisions: [{ seq, kind, payload }], sentAtMs: Date.now() })
      return { epoch: lastLed.epoch, seq }
    },
  }
}
