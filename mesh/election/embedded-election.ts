/**
 * The embedded election backend: the voter set (bootstrap or adoption) and
 * the election part of Raft (raft-election.ts) over the mesh's libp2p node
 * (election-rpc.ts).
 *
 * Voter set. A server started with bootstrapExpect N waits until it sees N
 * servers (itself included) that have no voter set yet; the N lowest peer ids
 * become the voter set, persisted with its id (SHA-256 of the sorted ids). All
 * N servers compute the same set, as long as exactly N servers start with
 * bootstrapExpect N (Consul's rule). An agent that sees a voter set in a
 * peer's record and has none adopts it (as a voter only if it is listed).
 * Clients (election.server = false) never vote; they follow decisions.
 *
 * The protocol also carries the leader's direct catch-up of a lagging voter
 * (`decisions` requests, answered through components.receiveDecisions).
 */
import { createHash } from 'node:crypto'
import { AgentError } from '../../core/errors.ts'
import type { Logger } from 'pino'
import type { ElectionConfig } from './election-config.ts'
import type { Mesh } from '../membership/mesh-service.ts'
import type { DecisionBatch } from '../membership/mesh-messages.ts'
import type { ElectionStore } from './election-store.ts'
import type { BatchVerdict } from './decision-log.ts'
import { createElectionRpc } from './election-rpc.ts'
import { createRaftElection, type ElectionResponse, type RaftElection } from './raft-election.ts'
import type { LeaderElection } from './leader-election.ts'
import type { ReplicatedLog } from './replicated-log.ts'

export function voterSetIdOf (voters: readonly string[]): string {
  return createHash('sha256').update([...voters].sort().join('\n')).digest('hex').slice(0, 16)
}

export interface EmbeddedElectionComponents {
  self: string
  logger: Logger
  mesh: Pick<Mesh, 'node' | 'peers' | 'availabilityChanged'>
  store: ElectionStore
  /** Follower side: the highest decision applied here, reported in heartbeat answers. */
  appliedPosition(): { epoch: number, seq: number }
  /** Leader side: every heartbeat answer (the leader service catches lagging voters up). */
  onHeartbeatAnswer(peer: string, response: ElectionResponse): void
  /** A direct catch-up batch from the leader. */
  receiveDecisions(batch: DecisionBatch): Promise<BatchVerdict>
  /** This agent's durable copy of the decision log, replicated by the leader (raft-election.ts). */
  log: ReplicatedLog
}

export function createEmbeddedElection (config: ElectionConfig, components: EmbeddedElectionComponents): LeaderElection {
  const { self, store, mesh } = components
  const log = components.logger
  const rpc = createElectionRpc(mesh.node)
  const listeners = new Set<() => void>()
  let raft: RaftElection | undefined
  let signal: AbortSignal = AbortSignal.abort()
  let bootstrapTimer: NodeJS.Timeout | undefined

  const startRaft = (): void => {
    const persisted = store.current()
    raft = createRaftElection({
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
      appliedPosition: components.appliedPosition,
      onHeartbeatAnswer: components.onHeartbeatAnswer,
      replica: {
        last: () => components.log.last(persisted.voterSetId),
        snapshot: () => components.log.snapshot(persisted.voterSetId),
        accept: s => components.log.accept(s),
      },
    })
    raft.onChange(() => { for (const l of listeners) l() })
    raft.start({ signal })
    log.info({ voters: persisted.voters, voterSetId: persisted.voterSetId, voting: persisted.voters.includes(self) }, 'election started')
    for (const l of listeners) l()
  }

  const adoptVoters = async (voters: string[], why: string): Promise<void> => {
    const sorted = [...voters].sort()
    await store.save({ voters: sorted, voterSetId: voterSetIdOf(sorted) })
    log.info({ voters: sorted, why }, 'voter set fixed')
    mesh.availabilityChanged()
    if (!signal.aborted) startRaft()
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

  let stopped: Promise<void> | undefined
  return {
    backend: 'embedded',
    async start (o) {
      signal = o.signal
      await rpc.register(async (from, request) => {
        if (request.type === 'decisions') {
          if (request.batch.from !== from) return { term: store.current().term, granted: false, reason: 'sender is not the batch\'s leader' }
          return { term: store.current().term, granted: await components.receiveDecisions(request.batch) === 'accepted' }
        }
        return raft !== undefined
          ? raft.handle(from, request)
          : { term: store.current().term, granted: false, reason: 'no voter set yet' }
      })
      if (store.current().voters.length > 0) {
        startRaft()
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
        raft?.stop()
        await rpc.unregister()
      })()
      return stopped
    },
    voterSetId: () => store.current().voterSetId,
    voters: () => store.current().voters,
    mayDecide: peer => store.current().voters.includes(peer),
    state () {
      if (raft === undefined || !store.current().voters.includes(self)) return undefined
      const s = raft.state()
      return { role: s.role, epoch: s.term, leaderId: s.leaderId, actAfterMs: s.actAfterMs, leaseUntilMs: s.leaseUntilMs, leaderContactMs: s.lastLeaderContactMs }
    },
    mayAct: () => raft?.mayAct() === true,
    commit (snapshot, s) {
      if (raft === undefined) return Promise.reject(new AgentError('ERR_NOT_COMMITTED', `decision ${snapshot.seq} not committed: no voter set yet`))
      return raft.commit(snapshot.seq, s)
    },
    committedBase: async () => undefined,
    onChange (listener) { listeners.add(listener); return () => listeners.delete(listener) },
    async sendDecisions (peer, batch, s) {
      await rpc.request(peer, { type: 'decisions', batch }, s)
    },
  }
}
