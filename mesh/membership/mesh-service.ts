/**
 * The mesh subsystem: this agent's libp2p node, its availability record, the
 * membership table and the failure detector, wired together.
 *
 *   received message → signed-envelope (size, schema, signature) → membership
 *   (monotonic version, SWIM precedence) → accepted ones are forwarded by
 *   gossipsub, stale ones ignored (but the first gossip copy of a record
 *   taken from a state sync is forwarded), invalid ones rejected and counted.
 *   own record published while no peer listened → again once one subscribes.
 *   join, and every syncIntervalMs → state sync with one member
 *   (state-sync.ts): the signed records it holds newer than ours, applied as above.
 *   membership claims about this agent → refute: raise the incarnation
 *   (persisted) and publish a record at once.
 *   bounded connections: a random partial view of at most mesh.maxPeers
 *   neighbors (peer-dialer.ts), over which gossip, probes and pings run.
 *   a neighbor's connection closed → probe that member now.
 *   connected peer without an outbound gossip stream → hang up, dial afresh
 *   (gossip-stream-watchdog.ts).
 *   event loop stalled longer than a probe timeout → refute pre-emptively:
 *   whoever suspected this agent meanwhile hears a higher incarnation.
 *   stop → publish "left" so peers mark this agent dead at once.
 *
 * Membership changes are events: `subscribe(listener)` (the leader election
 * subscribes to them), and each is logged at info level ("member state").
 */
import { networkInterfaces } from 'node:os'
import type { Logger } from 'pino'
import { TopicValidatorResult } from '@libp2p/gossipsub'
import type { MeshConfig } from './mesh-config.ts'
import { AgentError } from '../../core/errors.ts'
import { loadClusterKey, loadOrCreateDevClusterKey } from './cluster-key.ts'
import { loadOrCreateNodeKey } from './node-key.ts'
import { openIncarnationStore } from './incarnation.ts'
import { chooseAnnounceAddress } from './announce-address.ts'
import { createMeshNode, type MeshLibp2p } from './libp2p-node.ts'
import { createLibp2pProber } from './libp2p-prober.ts'
import { decodeEnvelope, encodeEnvelope, type InvalidReason } from './signed-envelope.ts'
import { meshTopic, type AvailabilityRecord, type DecisionBatch, type MembershipClaim, type MeshMessage } from './mesh-messages.ts'
import { createMembership, type Member, type MembershipEvent } from './membership.ts'
import { createLocalHealth } from './local-health.ts'
import { createFailureDetector } from './failure-detector.ts'
import { createPeerDialer } from './peer-dialer.ts'
import { createGossipStreamWatchdog } from './gossip-stream-watchdog.ts'
import { createAvailabilityPublisher, type AvailabilityContributor, type InventoryGpus } from './availability-publisher.ts'
import { createStateSync, type HeldRecord } from './state-sync.ts'
import { LatencyWindow, RateWindow } from './mesh-stats.ts'
import type { MeshInfo, MeshStatus, PeerView } from './mesh-views.ts'

export interface MeshOptions {
  config: MeshConfig
  dev: boolean
  /** Where the mesh key, incarnation and (--dev) cluster key live. */
  stateDir: string
  nodeName: string
  version: string
}

export interface MeshComponents {
  logger: Logger
  inventory(): InventoryGpus | undefined
}

export interface Mesh {
  start(options: { signal: AbortSignal }): Promise<void>
  /** Says "left", then stops every loop and the node; idempotent. */
  stop(): Promise<void>
  status(): MeshStatus
  info(): MeshInfo
  /** The other agents, sorted by node name. */
  peers(): PeerView[]
  /** Membership changes; returns the unsubscribe function. */
  subscribe(listener: (event: MembershipEvent) => void): () => void
  /** Subsystems add record sections here and call `availabilityChanged()` when they change. */
  addAvailabilityContributor(contributor: AvailabilityContributor): void
  availabilityChanged(): void
  /** The libp2p node, for subsystems with their own protocols (the election's RPC). */
  readonly node: MeshLibp2p
  /** Signs and publishes a message on the mesh topic. */
  publish(message: MeshMessage): Promise<void>
  /**
   * The one handler of received `decisions` messages (the election); its
   * answer decides whether gossipsub forwards the message: 'accepted' is
   * forwarded, 'stale' and 'ignored' are not. Without a handler they are ignored.
   */
  setDecisionHandler(handler: ((batch: DecisionBatch) => Promise<DecisionVerdict>) | undefined): void
}

export type DecisionVerdict = 'accepted' | 'stale' | 'ignored'

export async function createMesh (options: MeshOptions, components: MeshComponents): Promise<Mesh> {
  const { config } = options
  const log = components.logger
  const cluster = config.clusterKeyFile === '' && options.dev
    ? await loadOrCreateDevClusterKey(options.stateDir)
    : { file: config.clusterKeyFile, key: await loadClusterKey(config.clusterKeyFile) }
  if (config.clusterKeyFile === '' && !options.dev) throw new AgentError('ERR_CLUSTER_KEY_INVALID', 'mesh.clusterKeyFile is empty; only --dev generates a key')
  const privateKey = await loadOrCreateNodeKey(options.stateDir)
  const incarnation = await openIncarnationStore(options.stateDir)
  const announce = chooseAnnounceAddress({ configured: config.announceAddress, dev: options.dev, interfaces: networkInterfaces() })
  const node = await createMeshNode({
    privateKey,
    clusterKey: cluster.key,
    listen: config.listen,
    announce,
    trustedCidrs: config.trustedCidrs,
    connectionPingIntervalMs: config.connectionPingIntervalMs,
    maxConnections: config.maxConnections,
    maxMessageDataBytes: 4 * config.maxRecordBytes,
    userAgent: `agentd/${options.version}`,
  })
  const self = node.peerId.toString()
  const pubsub = node.services.pubsub
  const prober = createLibp2pProber(node)

  const stats = {
    published: new RateWindow(),
    received: new RateWindow(),
    stale: 0,
    invalid: { oversized: 0, malformed: 0, schema: 0, signature: 0 } satisfies Record<InvalidReason, number>,
    dissemination: new LatencyWindow(),
  }

  // The latest accepted record envelope of each member, and this agent's own: what state sync hands out.
  const envelopes = new Map<string, HeldRecord>()
  let ownRecord: HeldRecord | undefined
  // The latest own record reached no peer (published before any connection, e.g. at start): sent again when one subscribes.
  let ownRecordUnsent = false
  const heldRecord = (record: AvailabilityRecord, envelope: Uint8Array): HeldRecord => ({ peerId: record.from, incarnation: record.incarnation, seq: record.seq, envelope })
  const publishMessage = async (message: MeshMessage): Promise<void> => {
    const data = await encodeEnvelope(message, privateKey)
    if (message.kind === 'record') ownRecord = heldRecord(message, data)
    stats.published.add()
    const { recipients } = await pubsub.publish(meshTopic, data)
    if (message.kind === 'record') ownRecordUnsent = recipients.length === 0
  }
  const say = (message: MeshMessage): void => {
    void publishMessage(message).catch(err => log.warn({ err, kind: message.kind }, 'mesh publish failed'))
  }

  const health = createLocalHealth({ lagThresholdMs: Math.max(50, config.probeTimeoutMs / 2), recoverMs: 2 * config.probeIntervalMs })
  let refuting: Promise<void> | undefined
  /**
   * Set when stop() begins: a leaving agent refutes nothing more. A refutation
   * raised the incarnation above the goodbye's and made every observer drop the
   * goodbye as stale (the agent was then seen dead for a refused connection
   * instead of "left").
   */
  let leaving = false
  const refute = (atLeast: number, why: string): void => {
    if (leaving || refuting !== undefined || atLeast < incarnation.current) return
    refuting = (async () => {
      const next = await incarnation.raiseAbove(atLeast)
      log.info({ incarnation: next, why }, 'refuting with a higher incarnation')
      await publisher.publishNow()
    })().catch(err => log.error({ err }, 'refutation failed')).finally(() => { refuting = undefined })
  }

  const membership = createMembership({
    self,
    probeIntervalMs: config.probeIntervalMs,
    suspicionMult: config.suspicionMult,
    suspicionMaxTimeoutMult: config.suspicionMaxTimeoutMult,
    deadRetentionMs: config.deadRetentionMs,
  }, {
    health,
    broadcast: claim => say({ ...claim, from: self, sentAtMs: Date.now() }),
    onRefute: (claimIncarnation, claim) => refute(claimIncarnation, `${claim.kind} claim by ${claim.from}`),
  })
  membership.subscribe(e => {
    log.info({ peer: e.peerId, node: e.node, from: e.from, to: e.to, incarnation: e.incarnation, reason: e.reason }, 'member state')
    if (e.to === 'alive' && (e.from === null || e.from === 'dead')) dialer.memberJoined(e.peerId)
    if (e.to === 'dead' || e.to === 'forgotten') dialer.memberLost(e.peerId)
    if (e.to === 'alive') dialer.kick()
  })

  const detector = createFailureDetector({
    probeIntervalMs: config.probeIntervalMs,
    probeTimeoutMs: config.probeTimeoutMs,
    indirectProbes: config.indirectProbes,
  }, { membership, prober, health, log, targets: () => dialer.neighbors(), probedOutside: peer => dialer.closeWhenIdle(peer) })

  const dialer = createPeerDialer({ seeds: config.join, maxPeers: config.maxPeers, idleConnectionMs: config.idleConnectionMs }, {
    node,
    members: () => membership.members().map(m => ({ peerId: m.peerId, state: m.state, addresses: m.record?.addresses.mesh ?? [] })),
    unreachable: peer => detector.probeNow(peer),
    log,
  })

  const gossipWatchdog = createGossipStreamWatchdog({}, { node, log })

  const announced = (): string[] => node.getMultiaddrs().map(String)
  const publisher = createAvailabilityPublisher({
    node: options.nodeName,
    preemptible: config.preemptible,
    heartbeatIntervalMs: config.heartbeatIntervalMs,
    publishDebounceMs: config.publishDebounceMs,
    maxRecordBytes: config.maxRecordBytes,
  }, {
    self,
    liveMembers: () => membership.liveCount(),
    addresses: announced,
    incarnation: () => incarnation.current,
    inventory: components.inventory,
    publish: record => publishMessage(record),
    log,
  })

  /** Record versions ("peer/incarnation/seq") taken from a state sync whose gossip copy has not come yet (bounded; oldest dropped first). */
  const syncedUnforwarded = new Set<string>()
  const versionKey = (r: AvailabilityRecord): string => `${r.from}/${r.incarnation}/${r.seq}`
  const rememberSynced = (r: AvailabilityRecord): void => {
    syncedUnforwarded.add(versionKey(r))
    if (syncedUnforwarded.size > 4096) syncedUnforwarded.delete(syncedUnforwarded.values().next().value!)
  }

  let decisionHandler: ((batch: DecisionBatch) => Promise<DecisionVerdict>) | undefined
  /** Gossip's validator, and state sync's (`via: 'sync'`: records only, not counted as received messages). */
  const validate = async (data: Uint8Array, via: 'gossip' | 'sync' = 'gossip'): Promise<TopicValidatorResult> => {
    if (via === 'gossip') stats.received.add()
    const decoded = await decodeEnvelope(data, config.maxRecordBytes)
    if (!decoded.ok) {
      stats.invalid[decoded.reason]++
      log.debug({ reason: decoded.reason, detail: decoded.detail }, 'mesh message dropped')
      return TopicValidatorResult.Reject
    }
    const message = decoded.message
    if (via === 'sync' && message.kind !== 'record') return TopicValidatorResult.Ignore
    if (message.kind === 'decisions') {
      const verdict = decisionHandler === undefined ? 'ignored' : await decisionHandler(message)
      if (verdict === 'stale') stats.stale++
      return verdict === 'accepted' ? TopicValidatorResult.Accept : TopicValidatorResult.Ignore
    }
    const result = message.kind === 'record' ? membership.applyRecord(message) : membership.applyClaim(message)
    if (result === 'stale') {
      // The gossip copy of a record this agent took from a state sync: forwarded once all the same. With a
      // bounded view the agents that synced with a joiner sit on the gossip paths to the rest, and a copy
      // they dropped reached the others only with their next anti-entropy pull (20 s to converge at 25 agents).
      if (message.kind === 'record' && via === 'gossip' && syncedUnforwarded.delete(versionKey(message))) return TopicValidatorResult.Accept
      stats.stale++
      return TopicValidatorResult.Ignore
    }
    if (message.kind === 'record' && via === 'sync') rememberSynced(message)
    if (message.kind === 'record' && message.from !== self) envelopes.set(message.from, heldRecord(message, data))
    if (message.kind === 'record' && via === 'gossip') stats.dissemination.add(Math.max(0, Date.now() - message.publishedAtMs))
    return TopicValidatorResult.Accept
  }

  const sync = createStateSync({ intervalMs: config.syncIntervalMs }, {
    node,
    own: () => ownRecord,
    held () {
      const listed = new Map(membership.members().map(m => [m.peerId, m.state]))
      const out: HeldRecord[] = []
      for (const [peer, held] of envelopes) {
        const state = listed.get(peer)
        if (state === undefined) envelopes.delete(peer) // forgotten after its retention
        else if (state !== 'dead') out.push(held)
      }
      return out
    },
    livePeers: () => membership.members().filter(m => m.state === 'alive').map(m => m.peerId),
    apply: async envelope => await validate(envelope, 'sync') === TopicValidatorResult.Accept,
    introduce (peer) {
      const held = envelopes.get(peer)
      if (held === undefined) return
      // Message ids are the data's hash: where the joiner's own publish arrived first, this one is a duplicate and not sent.
      void pubsub.publish(meshTopic, held.envelope)
        .then(() => stats.published.add())
        .catch(err => log.debug({ peer, err: (err as Error).message }, 'introduction not published'))
    },
    log,
  })

  const onSubscriptionChange = (event: CustomEvent<{ subscriptions: Array<{ topic: string, subscribe: boolean }> }>): void => {
    if (ownRecordUnsent && event.detail.subscriptions.some(s => s.topic === meshTopic && s.subscribe)) publisher.changed()
  }
  // A neighbor's link closing is news (a killed agent's port now refuses: dead in milliseconds); an idle link closed on purpose is not.
  const onDisconnect = (event: CustomEvent<{ toString(): string }>): void => {
    const peer = event.detail.toString()
    if (dialer.disconnected(peer)) detector.probeNow(peer)
  }
  let stopped: Promise<void> | undefined
  let started = false

  return {
    async start ({ signal }) {
      await prober.register()
      await sync.register()
      await dialer.register()
      pubsub.topicValidators.set(meshTopic, (_peer, message) => validate(message.data))
      node.addEventListener('peer:disconnect', onDisconnect)
      pubsub.addEventListener('subscription-change', onSubscriptionChange)
      await node.start()
      started = true
      pubsub.subscribe(meshTopic)
      health.onStall(stallMs => {
        // Only a member others know could have been suspected meanwhile.
        if (stallMs > config.probeTimeoutMs && membership.liveCount() > 1) refute(incarnation.current, `event loop stalled ${Math.round(stallMs)} ms`)
      })
      health.start({ signal })
      publisher.start({ signal })
      dialer.start({ signal })
      gossipWatchdog.start({ signal })
      detector.start({ signal })
      sync.start({ signal })
      log.info({ peerId: self, addresses: announced(), announce: announce.source, incarnation: incarnation.current, seeds: config.join, clusterKey: cluster.file }, 'mesh started')
    },

    stop () {
      stopped ??= (async () => {
        leaving = true
        detector.stop()
        await sync.stop()
        await dialer.stop()
        gossipWatchdog.stop()
        publisher.stop()
        health.stop()
        if (started) {
          // The goodbye carries the incarnation of everything this agent published: a refutation in flight settles first.
          await refuting
          await publishMessage({ kind: 'dead', from: self, subject: self, incarnation: incarnation.current, reason: 'left', sentAtMs: Date.now() })
            .then(() => new Promise(resolve => setTimeout(resolve, 200)))
            .catch(() => {})
        }
        node.removeEventListener('peer:disconnect', onDisconnect)
        pubsub.removeEventListener('subscription-change', onSubscriptionChange)
        membership.stop()
        await prober.unregister()
        await node.stop()
      })()
      return stopped
    },

    status: () => ({ peerId: self, addresses: announced() }),

    info () {
      const counts = { alive: 0, suspect: 0, dead: 0 }
      for (const m of membership.members()) counts[m.state]++
      const meshPeers = (pubsub as unknown as { getMeshPeers?(topic: string): string[] }).getMeshPeers?.(meshTopic) ?? []
      return {
        peerId: self,
        node: options.nodeName,
        incarnation: incarnation.current,
        addresses: announced(),
        announce: { ip: announce.ip, source: announce.source },
        listen: boundListen(config.listen, announced()),
        clusterKeyFile: cluster.file,
        connections: node.getConnections().length,
        topicPeers: pubsub.getSubscribers(meshTopic).length,
        meshPeers: meshPeers.length,
        seeds: dialer.seeds(),
        neighbors: dialer.view(),
        members: counts,
        messages: {
          published: { total: stats.published.total, perSecond: round(stats.published.perSecond()) },
          received: { total: stats.received.total, perSecond: round(stats.received.perSecond()) },
          stale: stats.stale,
          invalid: { ...stats.invalid },
        },
        dissemination: stats.dissemination.summary(),
        sync: sync.counts(),
        probes: { ...detector.probes },
        health: { score: health.score, healthy: health.healthy() },
      }
    },

    peers: () => membership.members().map(peerView).sort((a, b) => a.node.localeCompare(b.node) || a.peerId.localeCompare(b.peerId)),
    subscribe: listener => membership.subscribe(listener),
    addAvailabilityContributor: c => publisher.addContributor(c),
    availabilityChanged: () => publisher.changed(),
    node,
    publish: publishMessage,
    setDecisionHandler (handler) { decisionHandler = handler },
  }
}

function peerView (m: Member): PeerView {
  const r: AvailabilityRecord | undefined = m.record
  const gpus = r?.gpus ?? []
  const view: PeerView = {
    peerId: m.peerId,
    node: m.node,
    state: m.state,
    incarnation: m.incarnation,
    stateSinceMs: m.stateSinceMs,
    lastHeardMs: m.lastHeardMs,
    addresses: r?.addresses.mesh ?? [],
    gpus: { total: gpus.length, free: gpus.some(g => g.inUse === null) ? null : gpus.filter(g => g.inUse === false).length },
    hostPoolFreeBytes: r?.hostPool?.freeBytes ?? null,
    nvmeFreeBytes: r?.nvme?.freeBytes ?? null,
    preemptible: r?.preemptible ?? null,
    record: r ?? null,
  }
  if (m.reason !== undefined) view.reason = m.reason
  return view
}

const round = (x: number): number => Math.round(x * 100) / 100

export type { MembershipEvent, MembershipClaim }

/** The configured listen addresses with a wildcard port (`/tcp/0`, --dev) shown as the port bound at start (the announced addresses carry it). */
export function boundListen (listen: readonly string[], announced: readonly string[]): string[] {
  const port = announced.map(a => /\/tcp\/(\d+)/.exec(a)?.[1]).find(p => p !== undefined && p !== '0')
  return listen.map(a => port !== undefined && /\/tcp\/0$/.test(a) ? a.replace(/\/tcp\/0$/, `/tcp/${port}`) : a)
}
