/**
 * State sync, `/agentd/sync/1.0.0` (memberlist's push/pull, pull half): the
 * requester sends a digest of the records it holds (peer id → [incarnation,
 * seq]); the other agent answers with every record it holds, its own
 * included, that is newer than the digest says. The requester applies them
 * exactly as gossiped records (size, schema, signature, monotonic version:
 * `apply`), so sync can neither forge nor roll back a member's state.
 *
 * When:
 * - join: with the first agent this one is connected to after start; a
 *   joiner then knows the whole cluster at once instead of after every
 *   member's next heartbeat (33 s at 20 agents, availability-publisher.ts).
 *   A failed join sync is tried again with the next agent that connects and
 *   at the next pull.
 * - introduction: the agent joined through asks the joiner back and gossips
 *   the joiner's record itself, a flood publish to every peer it has, so to
 *   every other agent joining through it at the same time. Two agents that
 *   join through one seed at once then know each other a round trip after
 *   the seed knows them, instead of after gossipsub grafts them into its mesh
 *   (a heartbeat or more later).
 * - newcomer: after the join, a peer that connects and whose record this
 *   agent does not hold (it joined since, and found this agent in the records
 *   it synced) is asked at once: its answer holds its own record.
 * - anti-entropy: with a random live member, under lost messages; every
 *   agent pulling covers both directions. The period ramps up from start:
 *   the first pull after firstFollowUpMs, each next one twice as long after,
 *   up to intervalMs (all jittered ±10 %). The first pull after the join goes
 *   to the agent joined through, which by then asked the agents that joined
 *   through it at the same time.
 *
 * Nothing is pushed over this protocol: a record that arrived by sync is
 * stale when its gossip copy arrives, and gossipsub does not forward stale
 * messages, so a pushed record of a joiner would stop at the agent it synced
 * with. The joiner's record spreads by gossip: the agent it joined through
 * publishes it (introduction), and mesh-service.ts re-publishes a record no
 * peer heard.
 *
 * Records of members this agent holds dead are not handed out: a joiner
 * would take the dead member's last record for a live one.
 *
 * Wire (json-protocol.ts): request { digest: { [peerId]: [incarnation, seq] },
 * join?: true (the requester's first sync) };
 * answer { records: [base64 envelope] } (at most maxAnswerBytes of them; the
 * rest arrive with a later sync). A malformed request gets its stream aborted.
 */
import type { Logger } from 'pino'
import type { MeshLibp2p } from './libp2p-node.ts'
import { handleJson, requestJson } from './json-protocol.ts'

export const syncProtocol = '/agentd/sync/1.0.0'
const maxMessageBytes = 32 * 1024 * 1024
const maxAnswerBytes = 24 * 1024 * 1024
const maxDigestEntries = 100_000
const requestTimeoutMs = 5_000

/** A signed record an agent holds, with its version. */
export interface HeldRecord {
  peerId: string
  incarnation: number
  seq: number
  envelope: Uint8Array
}

export interface StateSyncOptions {
  /** Anti-entropy period, ms, once ramped up; 0 = sync only after start. */
  intervalMs: number
  /** The first pull after start, ms (then doubling up to intervalMs). Default 1000. */
  firstFollowUpMs?: number
}

export interface StateSyncComponents {
  node: MeshLibp2p
  /** This agent's latest published record, if any yet. */
  own(): HeldRecord | undefined
  /** The latest records of the members this agent holds alive or suspect. */
  held(): HeldRecord[]
  /** Live members to pick an anti-entropy partner from. */
  livePeers(): string[]
  /** Applies one received envelope like a gossiped one; true when it was news. */
  apply(envelope: Uint8Array): Promise<boolean>
  /** Sends `peer`'s held record to every peer on the gossip topic (it joined through this agent). */
  introduce(peer: string): void
  log: Logger
}

export interface StateSync {
  /** Registers the protocol handler (before the node starts). */
  register(): Promise<void>
  start(options: { signal: AbortSignal }): void
  stop(): Promise<void>
  /** Syncs with `peer` now; resolves with the number of records that were news. */
  syncWith(peer: string, signal?: AbortSignal): Promise<number>
  counts(): { syncs: number, failed: number, recordsApplied: number }
}

type Digest = Record<string, [number, number]>

export function createStateSync (options: StateSyncOptions, c: StateSyncComponents): StateSync {
  const protocol = { protocol: syncProtocol, maxMessageBytes }
  const counts = { syncs: 0, failed: 0, recordsApplied: 0 }
  let joined = false
  /** The agent joined through: the first pull after the join goes to it, as it asked every agent that joined since. */
  let followUpWith: string | undefined
  /** The join sync in flight, and with whom. */
  let joining: { peer: string, done: Promise<void> } | undefined
  let timer: NodeJS.Timeout | undefined
  let stopped = false

  const applyAll = async (records: string[]): Promise<number> => {
    let news = 0
    for (const r of records) if (await c.apply(Buffer.from(r, 'base64'))) news++
    counts.recordsApplied += news
    return news
  }

  async function syncWith (peer: string, signal?: AbortSignal, join = false): Promise<number> {
    const digest: Digest = {}
    for (const h of c.held()) digest[h.peerId] = [h.incarnation, h.seq]
    const deadline = AbortSignal.any([AbortSignal.timeout(requestTimeoutMs), ...(signal !== undefined ? [signal] : [])])
    try {
      const reply = await requestJson(c.node, peer, protocol, join ? { digest, join } : { digest }, deadline)
      const records = (reply as { records?: unknown } | null)?.records
      if (!isStringArray(records)) throw new Error('malformed sync answer')
      const news = await applyAll(records)
      counts.syncs++
      return news
    } catch (err) {
      counts.failed++
      throw err
    }
  }

  const joinSync = (peer: string): void => {
    if (joined || joining !== undefined || stopped) return
    const done = syncWith(peer, undefined, true)
      .then(news => { joined = true; followUpWith = peer; c.log.debug({ peer, news }, 'joined: state synced') })
      .catch(err => c.log.debug({ peer, err: (err as Error).message }, 'join sync failed'))
      .finally(() => { joining = undefined })
    joining = { peer, done }
  }
  /** Newcomers being asked, one pull each at a time. */
  const askingNewcomers = new Map<string, Promise<void>>()
  /** A peer whose record this agent lacks (it joined since) connected: ask it at once. */
  const askNewcomer = (peer: string): Promise<void> => {
    const asking = askingNewcomers.get(peer) ?? (joining?.peer === peer ? joining.done : undefined)
    if (asking !== undefined) return asking
    if (stopped || c.held().some(h => h.peerId === peer)) return Promise.resolve()
    const asked = syncWith(peer)
      .then(news => c.log.debug({ peer, news }, 'newcomer asked'))
      .catch(err => c.log.debug({ peer, err: (err as Error).message }, 'newcomer sync failed'))
      .finally(() => askingNewcomers.delete(peer))
    askingNewcomers.set(peer, asked)
    return asked
  }
  /** A peer joined through this agent: ask it (unless its record is here already) and introduce its record. */
  const introduceJoiner = (peer: string): void => {
    void askNewcomer(peer).then(() => { if (!stopped && c.held().some(h => h.peerId === peer)) c.introduce(peer) })
  }
  const onConnect = (event: CustomEvent<{ toString(): string }>): void => {
    const peer = event.detail.toString()
    if (joined) void askNewcomer(peer)
    else joinSync(peer)
  }

  /** One sync with a random live member (the join sync while none has succeeded yet; the first after it with the agent joined through). */
  const antiEntropy = async (): Promise<void> => {
    const peers = c.livePeers()
    const peer = followUpWith ?? peers[Math.floor(Math.random() * peers.length)]
    followUpWith = undefined
    if (peer === undefined) return
    if (!joined) return joinSync(peer)
    await syncWith(peer).catch(err => c.log.debug({ peer, err: (err as Error).message }, 'anti-entropy sync failed'))
  }
  let period = Math.min(options.firstFollowUpMs ?? 1000, options.intervalMs)
  const schedule = (): void => {
    if (options.intervalMs <= 0 || stopped) return
    timer = setTimeout(() => { void antiEntropy().finally(schedule) }, period * (0.9 + 0.2 * Math.random()))
    timer.unref()
    period = Math.min(period * 2, options.intervalMs)
  }

  return {
    async register () {
      await handleJson(c.node, { ...protocol, handlerTimeoutMs: requestTimeoutMs }, async (from, message) => {
        const { digest, join } = (message ?? {}) as { digest?: unknown, join?: unknown }
        if (!isDigest(digest) || (join !== undefined && join !== true)) throw new Error('malformed sync request')
        const theirs = new Map(Object.entries(digest))
        const records: string[] = []
        let bytes = 0
        const own = c.own()
        for (const h of [...(own !== undefined ? [own] : []), ...c.held()]) {
          if (h.peerId === from || !newer(h, theirs.get(h.peerId))) continue
          const encoded = base64(h.envelope)
          if (bytes + encoded.length > maxAnswerBytes) break
          bytes += encoded.length
          records.push(encoded)
        }
        if (join === true) queueMicrotask(() => introduceJoiner(from))
        return { records }
      })
    },
    start ({ signal }) {
      c.node.addEventListener('peer:connect', onConnect)
      for (const connection of c.node.getConnections()) joinSync(connection.remotePeer.toString())
      schedule()
      signal.addEventListener('abort', () => { void this.stop() }, { once: true })
    },
    async stop () {
      stopped = true
      clearTimeout(timer)
      c.node.removeEventListener('peer:connect', onConnect)
      await c.node.unhandle(syncProtocol).catch(() => {})
    },
    syncWith,
    counts: () => ({ ...counts }),
  }
}

const base64 = (bytes: Uint8Array): string => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64')

function newer (h: HeldRecord, theirs: [number, number] | undefined): boolean {
  return theirs === undefined || h.incarnation > theirs[0] || (h.incarnation === theirs[0] && h.seq > theirs[1])
}

function isStringArray (x: unknown): x is string[] {
  return Array.isArray(x) && x.every(r => typeof r === 'string')
}

function isDigest (x: unknown): x is Digest {
  if (x === null || typeof x !== 'object' || Array.isArray(x)) return false
  const entries = Object.entries(x)
  return entries.length <= maxDigestEntries && entries.every(([, v]) => Array.isArray(v) && v.length === 2 && v.every(n => Number.isSafeInteger(n) && n >= 0))
}
