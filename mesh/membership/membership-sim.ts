/**
 * The mesh's membership at cluster sizes no machine here can start as
 * processes (256 to 4096 agents), on the discrete-event engine
 * (core/event-queue.ts) with a simulated network. The protocol code is the
 * agent's own, on a simulated clock (core/clock.ts):
 *
 * - the membership table with SWIM's precedence, Lifeguard's suspicion and
 *   refutation by incarnation (membership.ts);
 * - the failure detector: one neighbor probed per period, indirect probes,
 *   every 8th period a member outside the neighbors (failure-detector.ts);
 * - the bounded partial view: outbound draws, inbound limits, priority asks,
 *   reservoir joins (neighbor-set.ts);
 * - the heartbeat period that grows with the cluster (heartbeat-period.ts).
 *
 * What stands in for libp2p, and how (each an approximation, stated):
 * - the network: every message takes a one-way latency drawn uniformly from
 *   `latencyMs` and is lost with probability `loss`, independently (TCP would
 *   retransmit: a loss here is the worst case of a late message);
 * - gossipsub: each agent keeps a mesh of `gossipD` of its neighbors (D = 4,
 *   at most Dhi = 6, links symmetric: GRAFT), topped up as neighbors change;
 *   the publisher sends to all its neighbors (flood publish), an agent that
 *   accepts a message it had not seen forwards it to its mesh peers (eager
 *   push), as mesh-service.ts's validator decides (stale messages are not
 *   forwarded); every second each agent sends IHAVE with the ids it saw in
 *   the last 3 s to Dlazy = 4 neighbors outside its mesh, which ask (IWANT)
 *   for the ones they lack (lazy gossip: what repairs a lost message);
 * - state sync (state-sync.ts): a joiner pulls every live record from its seed,
 *   the seed gossips the joiner's record (introduction), and every agent pulls
 *   from a random live member with a digest of what it holds, first after 1 s
 *   and doubling up to `syncIntervalMs`;
 * - peer-dialer.ts: every `checkIntervalMs` a missing outbound neighbor is
 *   asked (join, with priority when it has none), a lost one replaced; the
 *   neighbors of a killed agent see its connection close one latency later
 *   and probe it at once (its port refuses: `refused`, as a SIGKILLed agent's does);
 * - message sizes are fixed per kind (`bytes`), taken from the wire: a signed
 *   record as an idle agent sends it, a claim, a ping, a sync digest entry.
 */
import { createEventQueue, type SimEvent, type SimulationQueue } from '../../core/event-queue.ts'
import { createSeededRandom, type SeededRandom } from '../../core/seeded-random.ts'
import type { Clock } from '../../core/clock.ts'
import { createMembership, type Membership, type MembershipEvent } from './membership.ts'
import { createFailureDetector, type FailureDetector, type ProbeOutcome } from './failure-detector.ts'
import { createNeighborSet, type NeighborSet } from './neighbor-set.ts'
import { heartbeatPeriodMs } from './heartbeat-period.ts'
import { defaultMeshConfig } from './mesh-config.ts'
import type { LocalHealth } from './local-health.ts'
import type { AvailabilityRecord, MembershipClaim } from './mesh-messages.ts'

export interface MembershipSimOptions {
  nodes: number
  seed: number
  /** One-way latency, ms, uniform in [min, max]. Default [0.2, 2] (one rack to a few switches). */
  latencyMs?: [number, number]
  /** Probability that one message is lost. Default 0. */
  loss?: number
  /** Agents start uniformly over this window, joining through agent 0, s. Default 10. */
  joinSpreadS?: number
  /** Steady state measured after the last join, before the kill, s. Default 30. */
  steadyS?: number
  /** Agents stopped at the end of the steady state. Default 1. */
  kill?: number
  /**
   * How they stop: 'sigkill' (the process is gone, its port refuses and its
   * connections close) or 'silent' (SIGSTOP, a host or link down: nothing
   * answers, nothing closes; only the suspicion path finds it). Default 'sigkill'.
   */
  killMode?: 'sigkill' | 'silent'
  /** Run after the kill, s. Default 20. */
  afterKillS?: number
  /** The mesh settings (mesh-config.ts defaults). */
  mesh?: Partial<SimMeshSettings>
  /** Eager-push degree. Default 4. */
  gossipD?: number
  /** Wire sizes, bytes. */
  bytes?: Partial<SimWireBytes>
}

export interface SimMeshSettings {
  probeIntervalMs: number
  probeTimeoutMs: number
  indirectProbes: number
  suspicionMult: number
  suspicionMaxTimeoutMult: number
  deadRetentionMs: number
  heartbeatIntervalMs: number
  syncIntervalMs: number
  maxPeers: number
  checkIntervalMs: number
}

export interface SimWireBytes {
  record: number
  claim: number
  ping: number
  pingReq: number
  neighborAsk: number
  /** Per member listed in a sync digest. */
  digestEntry: number
}

/** The agent's own defaults (mesh-config.ts), and the peer dialer's check period. */
export const defaultSimMesh: SimMeshSettings = (() => {
  const m = defaultMeshConfig()
  return {
    probeIntervalMs: m.probeIntervalMs, probeTimeoutMs: m.probeTimeoutMs, indirectProbes: m.indirectProbes, suspicionMult: m.suspicionMult,
    suspicionMaxTimeoutMult: m.suspicionMaxTimeoutMult, deadRetentionMs: m.deadRetentionMs, heartbeatIntervalMs: m.heartbeatIntervalMs,
    syncIntervalMs: m.syncIntervalMs, maxPeers: m.maxPeers, checkIntervalMs: 250,
  }
})()

/** Sizes on the wire as an idle agent sends them (signed envelope, JSON, noise and yamux framing included, rounded up). */
export const defaultWireBytes: SimWireBytes = { record: 1200, claim: 400, ping: 120, pingReq: 250, neighborAsk: 200, digestEntry: 70 }

export interface MembershipSimResult {
  nodes: number
  /** From the last agent's start until every agent had learned every other, s (null: not within the steady window). */
  convergenceS: number | null
  /** During the steady window, per agent per second (median and max over agents). */
  perAgent: { messagesSentPerS: Spread, bytesSentPerS: Spread, neighbors: Spread }
  /** The kill: from the stop until the first and until every running agent held each victim dead, s. */
  detection: { firstS: number | null, allS: number | null, missed: number }
  /** Suspicions of running agents raised by a failed probe (each one agent's accusation, however far it spread), over the whole run. */
  falseSuspicions: number
  /** Times an agent held a running agent dead (per holder), over the whole run. */
  falseDeaths: number
  /** Simulated events run, and the wall time they took, s. */
  events: number
  wallS: number
}

export interface Spread { median: number, max: number }

interface Message { id: number, body: AvailabilityRecord | MembershipClaim, bytes: number }

interface Agent {
  id: string
  index: number
  up: boolean
  /** Stopped without a trace on the network (killMode 'silent'). */
  silent: boolean
  startedAtS: number
  incarnation: number
  seq: number
  membership: Membership
  detector: FailureDetector
  neighbors: NeighborSet
  asking: Set<string>
  preferred: Set<string>
  /** Gossipsub mesh peers (a subset of the neighbors). */
  gossipMesh: Set<string>
  /** Messages seen in the last 3 s (gossipsub's message cache), newest last. */
  recent: Array<{ atS: number, m: Message }>
  backoffUntilMs: Map<string, number>
  /** Gossip message ids seen (a bitset over the run's message counter). */
  seen: Uint8Array
  /** Records held, by member (latest accepted), for sync answers. */
  learned: number
  learnedAtS: number | null
  sent: { messages: number, bytes: number }
  timers: Set<SimEvent>
  controller: AbortController
}

const healthy: LocalHealth = {
  start () {}, stop () {}, healthy: () => true, stalledSince: () => false, scale: ms => ms,
  probeSucceeded () {}, probeFailedEverywhere () {}, onStall () {}, score: 0,
}
const silentLog = { debug () {} }

export async function runMembershipSim (options: MembershipSimOptions): Promise<MembershipSimResult> {
  if (!Number.isInteger(options.nodes) || options.nodes < 2) throw new RangeError(`nodes must be an integer >= 2, got ${options.nodes}`)
  const mesh: SimMeshSettings = { ...defaultSimMesh, ...options.mesh }
  const bytes: SimWireBytes = { ...defaultWireBytes, ...options.bytes }
  const [latMin, latMax] = options.latencyMs ?? [0.2, 2]
  const loss = options.loss ?? 0
  if (!(latMin >= 0 && latMax >= latMin)) throw new RangeError(`latencyMs must be [min, max] with 0 <= min <= max, got [${latMin}, ${latMax}]`)
  if (!(loss >= 0 && loss < 1)) throw new RangeError(`loss must be in [0, 1), got ${loss}`)
  const joinSpreadS = options.joinSpreadS ?? 10
  const steadyS = options.steadyS ?? 30
  const killCount = options.kill ?? 1
  if (!Number.isInteger(killCount) || killCount < 0 || killCount >= options.nodes - 1) throw new RangeError(`kill must be an integer in [0, nodes - 2], got ${killCount}`)
  const afterKillS = options.afterKillS ?? 20
  const killMode = options.killMode ?? 'sigkill'
  if (killMode !== 'sigkill' && killMode !== 'silent') throw new RangeError(`killMode must be 'sigkill' or 'silent', got ${String(killMode)}`)
  const gossipD = options.gossipD ?? 4
  const random: SeededRandom = createSeededRandom(options.seed)
  const queue: SimulationQueue = createEventQueue()
  const epochMs = 1_800_000_000_000
  const wallBegan = performance.now()

  const agents: Agent[] = []
  const byId = new Map<string, Agent>()
  let messageCount = 0
  let events = 0
  let asyncSettled = false
  const counting = { on: false }
  const result = { falseSuspicions: 0, falseDeaths: 0 }

  const latencyS = (): number => random.uniform(latMin, latMax) / 1000
  const lost = (): boolean => loss > 0 && random.next() < loss

  /** `a`'s clock: the engine's, with its timers tracked so a killed agent's stop. */
  const clockOf = (a: Agent): Clock => ({
    now: () => epochMs + queue.nowS * 1000,
    monotonic: () => queue.nowS * 1000,
    setTimeout (fn, ms) {
      const event = queue.after(Math.max(0, ms) / 1000, () => { a.timers.delete(event); fn() })
      a.timers.add(event)
      return event
    },
    clearTimeout (timer) {
      if (timer === undefined) return
      queue.cancel(timer as SimEvent)
      a.timers.delete(timer as SimEvent)
    },
  })

  /** Sends `bytes` from `from` to `to`: `deliver` runs at `to` one latency later unless the message is lost or `to` is down. */
  const send = (from: Agent, to: Agent, size: number, deliver: () => void): void => {
    if (counting.on) { from.sent.messages++; from.sent.bytes += size }
    if (lost()) return
    queue.after(latencyS(), () => { if (to.up) deliver() })
  }

  const hasSeen = (a: Agent, id: number): boolean => id < a.seen.length * 8 && (a.seen[id >> 3]! & (1 << (id & 7))) !== 0
  const markSeen = (a: Agent, id: number): boolean => {
    if (id >= a.seen.length * 8) {
      const grown = new Uint8Array(Math.max(a.seen.length * 2, (id >> 3) + 1))
      grown.set(a.seen)
      a.seen = grown
    }
    const bit = 1 << (id & 7)
    if ((a.seen[id >> 3]! & bit) !== 0) return false
    a.seen[id >> 3]! |= bit
    return true
  }

  const meshHigh = Math.max(gossipD, Math.round(gossipD * 1.5))
  const dLazy = 4
  const cacheS = 3
  /** Gossipsub's heartbeat, mesh half: drop mesh peers that are no longer neighbors, GRAFT neighbors up to D. */
  const maintainMesh = (a: Agent): void => {
    for (const p of a.gossipMesh) if (!a.neighbors.has(p)) a.gossipMesh.delete(p)
    if (a.gossipMesh.size >= gossipD) return
    for (const p of random.shuffled(a.neighbors.list())) {
      if (a.gossipMesh.size >= gossipD) break
      const b = byId.get(p)!
      if (a.gossipMesh.has(p) || !b.up || b.gossipMesh.size >= meshHigh) continue
      a.gossipMesh.add(p)
      b.gossipMesh.add(a.id)
    }
  }
  /** Gossipsub's heartbeat, gossip half: IHAVE to Dlazy non-mesh neighbors; they IWANT what they lack. */
  const lazyGossip = (a: Agent): void => {
    while (a.recent.length > 0 && a.recent[0]!.atS < queue.nowS - cacheS) a.recent.shift()
    if (a.recent.length === 0) return
    const ids = a.recent.map(r => r.m)
    const others = a.neighbors.list().filter(p => !a.gossipMesh.has(p))
    for (const p of random.shuffled(others).slice(0, dLazy)) {
      const b = byId.get(p)!
      send(a, b, 40 + 24 * ids.length, () => {
        const wanted = ids.filter(m => !hasSeen(b, m.id))
        if (wanted.length === 0) return
        send(b, a, 40 + 24 * wanted.length, () => {
          for (const m of wanted) send(a, b, m.bytes, () => receive(b, m, a))
        })
      })
    }
  }

  /** Applies a gossiped message as mesh-service.ts's validator does; true = accepted (forward it). */
  const apply = (a: Agent, m: Message): boolean => {
    const body = m.body
    const r = body.kind === 'record' ? a.membership.applyRecord(body) : a.membership.applyClaim(body)
    return r === 'accepted'
  }

  /** `a` sends `m` on: to every neighbor when it publishes (flood publish), to its mesh peers when it forwards. */
  const gossip = (a: Agent, m: Message, from: Agent | undefined): void => {
    a.recent.push({ atS: queue.nowS, m })
    const targets = from === undefined ? a.neighbors.list() : [...a.gossipMesh].filter(p => p !== from.id)
    for (const p of targets) {
      const t = byId.get(p)!
      send(a, t, m.bytes, () => receive(t, m, a))
    }
  }
  const receive = (t: Agent, m: Message, from: Agent): void => {
    if (!markSeen(t, m.id)) return
    if (apply(t, m)) gossip(t, m, from)
  }

  const publish = (a: Agent, body: AvailabilityRecord | MembershipClaim): void => {
    const m: Message = { id: messageCount++, body, bytes: body.kind === 'record' ? bytes.record : bytes.claim }
    markSeen(a, m.id)
    gossip(a, m, undefined)
  }

  const recordOf = (a: Agent): AvailabilityRecord => ({
    kind: 'record', from: a.id, node: `node-${a.index}`, incarnation: a.incarnation, seq: a.seq++, publishedAtMs: Math.round(epochMs + queue.nowS * 1000),
    addresses: { mesh: [`/ip4/10.0.${a.index >> 8}.${a.index & 255}/tcp/4001`] }, preemptible: false,
    cpu: { cores: 64, loadAvg1: 0 }, memory: { totalBytes: 2 ** 40, availableBytes: 2 ** 39 }, gpus: [],
  } as AvailabilityRecord)

  /** The records `a` holds of live members, its own included, that `digest` lacks or holds older (state-sync.ts's answer). */
  const newerThan = (a: Agent, digest: Map<string, [number, number]>): AvailabilityRecord[] => {
    const newer = (r: AvailabilityRecord): boolean => {
      const held = digest.get(r.from)
      return held === undefined || held[0] < r.incarnation || (held[0] === r.incarnation && held[1] < r.seq)
    }
    const out: AvailabilityRecord[] = []
    for (const m of a.membership.members()) if (m.state !== 'dead' && m.record !== undefined && newer(m.record)) out.push(m.record)
    const own = ownRecord.get(a.id)
    if (own !== undefined && newer(own)) out.push(own)
    return out
  }
  /** Each agent's last published record (what a sync hands out for it). */
  const ownRecord = new Map<string, AvailabilityRecord>()
  const publishRecord = (a: Agent): void => {
    const r = recordOf(a)
    ownRecord.set(a.id, r)
    publish(a, r)
  }

  /** `a` pulls from `b`: digest there, newer records back, applied as a sync (not forwarded). */
  const pull = (a: Agent, b: Agent, join: boolean): void => {
    const digest = new Map<string, [number, number]>()
    if (!join) for (const m of a.membership.members()) if (m.record !== undefined) digest.set(m.peerId, [m.record.incarnation, m.record.seq])
    send(a, b, 64 + digest.size * bytes.digestEntry, () => {
      if (join) {
        // Introduction: the seed takes the joiner's record and gossips it.
        const joiner = ownRecord.get(a.id)
        if (joiner !== undefined && b.membership.applyRecord(joiner) === 'accepted') publish(b, joiner)
      }
      const records = newerThan(b, digest)
      send(b, a, 64 + records.length * bytes.record, () => { for (const r of records) a.membership.applyRecord(r) })
    })
  }

  const prober = (a: Agent): { ping: (target: string, timeoutMs: number, signal: AbortSignal) => Promise<ProbeOutcome>, pingReq: (helper: string, target: string, timeoutMs: number, signal: AbortSignal) => Promise<ProbeOutcome> } => {
    /** A request from `from` to `to` answered by `answer` at `to`; settles with 'timeout' after timeoutMs without an answer. */
    const exchange = (from: Agent, to: Agent, size: number, timeoutMs: number, refusedWhenDown: boolean, answer: (done: (o: ProbeOutcome) => void) => void): Promise<ProbeOutcome> => new Promise(resolve => {
      let settled = false
      const settle = (o: ProbeOutcome): void => { if (!settled) { settled = true; asyncSettled = true; queue.cancel(timer); resolve(o) } }
      const timer = queue.after(timeoutMs / 1000, () => settle('timeout'))
      if (counting.on) { from.sent.messages++; from.sent.bytes += size }
      if (lost()) return
      queue.after(latencyS(), () => {
        // A killed agent's port refuses: the kernel answers, one latency back. A ping-req to a killed
        // helper fails in transport, which the prober reports as 'timeout' (libp2p-prober.ts).
        if (!to.up) { if (!to.silent) queue.after(latencyS(), () => settle(refusedWhenDown ? 'refused' : 'timeout')); return }
        answer(o => send(to, from, size, () => settle(o)))
      })
    })
    return {
      ping: async (target, timeoutMs) => exchange(a, byId.get(target)!, bytes.ping, timeoutMs, true, done => done('ack')),
      pingReq: async (helper, target, timeoutMs) => exchange(a, byId.get(helper)!, bytes.pingReq, timeoutMs * 2, false, done => {
        void exchange(byId.get(helper)!, byId.get(target)!, bytes.ping, timeoutMs, true, d => d('ack')).then(done)
      }),
    }
  }

  /** peer-dialer.ts's check: prune, then ask for missing outbound neighbors. */
  const check = (a: Agent): void => {
    const nowMs = queue.nowS * 1000
    for (const p of a.neighbors.outbound()) {
      const m = a.membership.get(p)
      if (m === undefined || m.state === 'dead') a.neighbors.remove(p)
    }
    const liveOthers = a.membership.liveCount() - 1
    let missing = a.neighbors.missing(liveOthers, a.asking.size)
    if (missing <= 0) return
    const eligible = (p: string): boolean => {
      const m = a.membership.get(p)
      return m !== undefined && m.state === 'alive' && !a.asking.has(p) && !a.neighbors.has(p) && (a.backoffUntilMs.get(p) ?? 0) <= nowMs
    }
    const picks = a.neighbors.draw([...a.preferred].filter(eligible), missing)
    for (const p of a.preferred) if (picks.includes(p) || a.membership.get(p)?.state !== 'alive') a.preferred.delete(p)
    missing -= picks.length
    if (missing > 0) picks.push(...a.neighbors.draw(a.membership.livePeerIds().filter(p => eligible(p) && !picks.includes(p)), missing))
    for (const p of picks) ask(a, byId.get(p)!)
  }

  const ask = (a: Agent, b: Agent): void => {
    a.asking.add(b.id)
    const priority = a.neighbors.list().length === 0
    const timeout = queue.after(5, () => { a.asking.delete(b.id); a.backoffUntilMs.set(b.id, queue.nowS * 1000 + 1000); a.detector.probeNow(b.id) })
    send(a, b, bytes.neighborAsk, () => {
      const { accepted, evicted } = b.neighbors.acceptInbound(a.id, priority)
      if (evicted !== undefined) closeLink(b, byId.get(evicted)!)
      send(b, a, bytes.neighborAsk, () => {
        queue.cancel(timeout)
        a.asking.delete(b.id)
        if (accepted) a.neighbors.addOutbound(b.id)
        else a.backoffUntilMs.set(b.id, queue.nowS * 1000 + 30_000)
      })
    })
  }

  /** `a` closes its link to `b`: `b` sees the connection close one latency later. */
  const closeLink = (a: Agent, b: Agent): void => {
    a.neighbors.remove(b.id)
    queue.after(latencyS(), () => { if (b.up) b.neighbors.remove(a.id) })
  }

  const every = (a: Agent, periodMs: () => number, run: () => void): void => {
    const clock = clockOf(a)
    const loop = (): void => { if (!a.up) return; run(); clock.setTimeout(loop, periodMs()) }
    clock.setTimeout(loop, periodMs() * random.uniform(0.1, 1))
  }

  const start = (a: Agent): void => {
    a.up = true
    a.startedAtS = queue.nowS
    const clock = clockOf(a)
    a.membership = createMembership({ self: a.id, probeIntervalMs: mesh.probeIntervalMs, suspicionMult: mesh.suspicionMult, suspicionMaxTimeoutMult: mesh.suspicionMaxTimeoutMult, deadRetentionMs: mesh.deadRetentionMs }, {
      health: healthy,
      clock,
      broadcast: claim => {
        if (claim.kind === 'suspect' && byId.get(claim.subject)!.up) result.falseSuspicions++
        publish(a, { ...claim, from: a.id, sentAtMs: Math.round(clock.now()) } as MembershipClaim)
      },
      onRefute: incarnation => {
        if (incarnation < a.incarnation) return
        a.incarnation = incarnation + 1
        publishRecord(a)
      },
    })
    a.membership.subscribe(e => onEvent(a, e))
    a.detector = createFailureDetector({ probeIntervalMs: mesh.probeIntervalMs, probeTimeoutMs: mesh.probeTimeoutMs, indirectProbes: mesh.indirectProbes }, {
      membership: a.membership, prober: prober(a), health: healthy, log: silentLog, clock,
      targets: () => a.neighbors.list(), random: () => random.next(),
    })
    a.detector.start({ signal: a.controller.signal })
    publishRecord(a)
    if (a.index !== 0) pull(a, agents[0]!, true)
    every(a, () => mesh.checkIntervalMs, () => check(a))
    every(a, () => 1000, () => { maintainMesh(a); lazyGossip(a) })
    every(a, () => heartbeatPeriodMs(mesh.heartbeatIntervalMs, a.membership.liveCount()), () => publishRecord(a))
    let syncPeriodMs = 1000
    every(a, () => { const p = syncPeriodMs; syncPeriodMs = Math.min(mesh.syncIntervalMs, syncPeriodMs * 2); return p * random.uniform(0.9, 1.1) }, () => {
      // Knowing nobody (the join sync was lost), it syncs with its seed again, as peer-dialer.ts dials seeds while it has no neighbor.
      const live = a.membership.livePeerIds()
      if (live.length > 0) pull(a, byId.get(random.pick(live))!, false)
      else if (a.index !== 0) pull(a, agents[0]!, true)
    })
  }

  const onEvent = (a: Agent, e: MembershipEvent): void => {
    const subject = byId.get(e.peerId)!
    if (e.to === 'alive' && (e.from === null || e.from === 'dead')) {
      if (e.from === null) {
        a.learned++
        if (a.learned === agents.length - 1) a.learnedAtS = queue.nowS
      }
      const { take, replace } = a.neighbors.onJoin(e.peerId, a.membership.liveCount() - 1)
      if (take) { a.preferred.add(e.peerId); if (replace !== undefined) closeLink(a, byId.get(replace)!) }
    }
    if (e.to === 'dead' || e.to === 'forgotten') { a.neighbors.remove(e.peerId); a.preferred.delete(e.peerId) }
    if (subject.up) {
      if (e.to === 'dead') result.falseDeaths++
    } else if (e.to === 'dead' && !deadAt.has(`${a.id}>${e.peerId}`)) {
      deadAt.set(`${a.id}>${e.peerId}`, queue.nowS)
    }
  }
  const deadAt = new Map<string, number>()

  for (let i = 0; i < options.nodes; i++) {
    const a = {
      id: `sim-${String(i).padStart(5, '0')}`, index: i, up: false, silent: false, startedAtS: 0, incarnation: 1, seq: 0,
      neighbors: createNeighborSet({ maxPeers: mesh.maxPeers, random: () => random.next(), now: () => queue.nowS * 1000 }),
      asking: new Set<string>(), preferred: new Set<string>(), gossipMesh: new Set<string>(), recent: [], backoffUntilMs: new Map<string, number>(), seen: new Uint8Array(1024),
      learned: 0, learnedAtS: null, sent: { messages: 0, bytes: 0 }, timers: new Set<SimEvent>(), controller: new AbortController(),
    } as unknown as Agent
    agents.push(a)
    byId.set(a.id, a)
    queue.at(i === 0 ? 0 : random.uniform(0, joinSpreadS), () => start(a))
  }

  /** Runs the engine to `untilS`, letting the protocol code's promise continuations run before time moves on. */
  const runTo = async (untilS: number): Promise<void> => {
    for (let next = queue.nextAtS; next !== undefined && next <= untilS; next = queue.nextAtS) {
      events += queue.runUntil(next)
      if (asyncSettled) { asyncSettled = false; await new Promise(resolve => setImmediate(resolve)) }
    }
    queue.runUntil(untilS)
  }

  await runTo(joinSpreadS)
  const lastStartS = Math.max(...agents.map(a => a.startedAtS))
  await runTo(lastStartS + 5)
  counting.on = true
  const steadyFromS = queue.nowS
  for (const a of agents) a.sent = { messages: 0, bytes: 0 }
  const neighborCounts: number[] = []
  await runTo(steadyFromS + steadyS)
  for (const a of agents) neighborCounts.push(a.neighbors.list().length)
  const steadySeconds = queue.nowS - steadyFromS
  const messagesPerS = agents.map(a => a.sent.messages / steadySeconds)
  const bytesPerS = agents.map(a => a.sent.bytes / steadySeconds)
  counting.on = false

  const converged = agents.every(a => a.learnedAtS !== null)
  const convergenceS = converged ? Math.max(0, Math.max(...agents.map(a => a.learnedAtS!)) - lastStartS) : null

  const killAtS = queue.nowS
  const victims = random.shuffled(agents.slice(1)).slice(0, killCount)
  for (const v of victims) {
    v.up = false
    v.silent = killMode === 'silent'
    v.detector.stop()
    v.membership.stop()
    for (const t of v.timers) queue.cancel(t)
    v.timers.clear()
    // Killed, its connections close: each neighbor sees it one latency later and probes it (mesh-service.ts disconnected → probeNow).
    if (v.silent) continue
    for (const n of v.neighbors.list()) {
      const b = byId.get(n)!
      queue.after(latencyS(), () => { if (b.up && b.neighbors.remove(v.id)) b.detector.probeNow(v.id) })
    }
  }
  await runTo(killAtS + afterKillS)
  const survivors = agents.filter(a => a.up)
  const detections: number[] = []
  let missed = 0
  for (const v of victims) for (const s of survivors) {
    const t = deadAt.get(`${s.id}>${v.id}`)
    if (t === undefined) missed++
    else detections.push(t - killAtS)
  }
  for (const a of agents) if (a.up) { a.detector.stop(); a.membership.stop() }

  return {
    nodes: options.nodes,
    convergenceS,
    perAgent: { messagesSentPerS: spread(messagesPerS), bytesSentPerS: spread(bytesPerS), neighbors: spread(neighborCounts) },
    detection: {
      firstS: detections.length > 0 ? Math.min(...detections) : null,
      allS: victims.length > 0 && missed === 0 ? Math.max(...detections) : null,
      missed,
    },
    falseSuspicions: result.falseSuspicions,
    falseDeaths: result.falseDeaths,
    events,
    wallS: (performance.now() - wallBegan) / 1000,
  }
}

function spread (xs: number[]): Spread {
  const sorted = [...xs].sort((a, b) => a - b)
  return { median: sorted[Math.floor(sorted.length / 2)] ?? 0, max: sorted.at(-1) ?? 0 }
}
