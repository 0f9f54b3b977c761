/**
 * State sync, `/agentd/sync/1.0.0` (memberlist's push/pull, pull half): the
 * requester sends a digest of the records it holds (peer id → [incarnation,
 * seq]); the other agent answers with every record it holds, its own
 * included, that is newer than the digest says. The requester applies them
 * exactly as gossiped records (size, schema, signature, monotonic version:
 * `apply`), so sync can neither forge nor roll back a member's state.
 *
 * When: with the first agent this one is connected to after start — a joiner
 * then knows the whole cluster at once instead of after every member's next
 * heartbeat (6.7 s at 20 agents, availability-publisher.ts) — and then every
 * intervalMs (jittered ±10 %) with a random live member, as anti-entropy
 * under lost messages; every agent pulling covers both directions. A failed
 * join sync is tried again with the next agent that connects and at the next
 * period.
 *
 * Nothing is pushed: a record that arrived by sync is stale when its gossip
 * copy arrives, and gossipsub does not forward stale messages, so a pushed
 * record of a joiner would stop at the agent it synced with. The joiner's
 * record spreads by gossip (mesh-service.ts re-publishes a record no peer
 * heard).
 *
 * Records of members this agent holds dead are not handed out: a joiner
 * would take the dead member's last record for a live one.
 *
 * Wire (json-protocol.ts): request { digest: { [peerId]: [incarnation, seq] } };
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
  /** Anti-entropy period, ms; 0 = sync only after start. */
  intervalMs: number
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
  let joining: Promise<unknown> | undefined
  let timer: NodeJS.Timeout | undefined
  let stopped = false

  const applyAll = async (records: string[]): Promise<number> => {
    let news = 0
    for (const r of records) if (await c.apply(Buffer.from(r, 'base64'))) news++
    counts.recordsApplied += news
    return news
  }

  async function syncWith (peer: string, signal?: AbortSignal): Promise<number> {
    const digest: Digest = {}
    for (const h of c.held()) digest[h.peerId] = [h.incarnation, h.seq]
    const deadline = AbortSignal.any([AbortSignal.timeout(requestTimeoutMs), ...(signal !== undefined ? [signal] : [])])
    try {
      const reply = await requestJson(c.node, peer, protocol, { digest }, deadline)
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
    joining = syncWith(peer)
      .then(news => { joined = true; c.log.debug({ peer, news }, 'joined: state synced') })
      .catch(err => c.log.debug({ peer, err: (err as Error).message }, 'join sync failed'))
      .finally(() => { joining = undefined })
  }
  const onConnect = (event: CustomEvent<{ toString(): string }>): void => joinSync(event.detail.toString())

  /** One sync with a random live member (the join sync while none has succeeded yet). */
  const antiEntropy = async (): Promise<void> => {
    const peers = c.livePeers()
    const peer = peers[Math.floor(Math.random() * peers.length)]
    if (peer === undefined) return
    if (!joined) return joinSync(peer)
    await syncWith(peer).catch(err => c.log.debug({ peer, err: (err as Error).message }, 'anti-entropy sync failed'))
  }
  const schedule = (): void => {
    if (options.intervalMs <= 0 || stopped) return
    timer = setTimeout(() => { void antiEntropy().finally(schedule) }, options.intervalMs * (0.9 + 0.2 * Math.random()))
    timer.unref()
  }

  return {
    async register () {
      await handleJson(c.node, { ...protocol, handlerTimeoutMs: requestTimeoutMs }, async (from, message) => {
        const digest = (message as { digest?: unknown } | null)?.digest
        if (!isDigest(digest)) throw new Error('malformed sync request')
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
