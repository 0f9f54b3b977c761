/**
 * The etcd election backend: etcd's election recipe (clientv3/concurrency)
 * over the JSON gateway (etcd-client.ts).
 *
 * Campaign (servers only). A server grants itself a lease of etcdLeaseTtlS
 * and creates `<etcdPrefix><lease id, hex>` = its peer id attached to it. The
 * leader is the owner of the key with the lowest create revision under the
 * prefix; the epoch of its decisions is that key's create revision, unique
 * per key and higher than that of every earlier leader (an older key is
 * lower, so it led or was deleted first). The lease is kept alive every
 * TTL/3; a keep-alive answered with TTL 0 means the lease expired (the key is
 * gone): the server campaigns again with a new lease and key, behind every
 * existing key. Stopping revokes the lease, so a successor is elected at once.
 *
 * Observation (every agent, clients too). Every etcdPollIntervalMs an agent
 * reads the keys under the prefix (linearizable range): the lowest names the
 * leader and its epoch; the others are the waiting candidates. voters() are
 * the servers campaigning now; every server ever seen campaigning here is
 * persisted (election.json `voters`) and may send decisions (mayDecide): the
 * decision log's epoch fencing rejects those of an older epoch.
 *
 * Why two leaders never act at once. A leader acts only while
 *   now < sendTime(last keep-alive etcd answered with TTL > 0) + 0.9 × TTL
 * (monotonic clock, which keeps running while the process is stopped). etcd
 * extends the lease to at least (its receipt of that keep-alive) + TTL, which
 * is no earlier than the send time; the key, and with it the leadership, can
 * only pass to another server after the lease expired or was revoked. So the
 * old leader stops acting 0.1 × TTL before a successor can exist, whatever the
 * network and etcd do, as long as clock rates differ by less than 10% (NTP
 * keeps them within 0.05%). A leader frozen (SIGSTOP) or cut off from etcd
 * therefore stops on its own; a successor needs no extra wait beyond
 * viewGraceMs (actAfterMs is the moment it first sees its key lowest). A
 * frozen leader that publishes after resuming is fenced by epoch anyway.
 *
 * Committed decisions. The desired state lives in etcd: the leader writes its
 * log snapshot (replicated-log.ts) to `<prefix without its last "/">.desired`
 * in a transaction that succeeds only while its campaign key exists with the
 * create revision it leads (a deposed leader's write fails: its key went with
 * its lease), one write at a time, newest snapshot last; a decision is
 * acknowledged once etcd answered the write. A new leader starts from that
 * key (committedBase), never from its own copy; also when the key was
 * written under another cluster id (etcd restored from a snapshot into a new
 * cluster): the state belongs to this prefix, and dropping it would lose every
 * acknowledged decision.
 *
 * Fencing domain: voterSetId = SHA-256("etcd", cluster id, prefix), so two
 * elections on one etcd cluster (different prefixes) never accept each
 * other's decisions.
 */
import { createHash } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Logger } from 'pino'
import type { ElectionConfig } from './election-config.ts'
import type { ElectionStore } from './election-store.ts'
import { createEtcdClient, type EtcdClient, type EtcdHeader, type EtcdKeyValue } from './etcd-client.ts'
import type { LeaderElection, LeaderElectionState } from './leader-election.ts'
import { AgentError } from '../../core/errors.ts'
import { parseSnapshot, type LogSnapshot } from './replicated-log.ts'

export interface EtcdElectionComponents {
  self: string
  logger: Logger
  store: ElectionStore
  /** Default: a gateway client on config.etcdEndpoints. */
  client?: EtcdClient
  /** Monotonic ms; default performance.now. */
  now?(): number
}

/** The share of the lease TTL a leader acts for after a keep-alive's send time (the rest covers clock-rate differences). */
export const etcdLeaseActingShare = 0.9

export function etcdVoterSetId (clusterId: string, prefix: string): string {
  return createHash('sha256').update(`etcd\n${clusterId}\n${prefix}`).digest('hex').slice(0, 16)
}

interface Campaign {
  leaseId: string
  key: string
  /** Our key's create revision (0 until the key exists): the epoch we lead. */
  createRevision: number
  /** Monotonic ms until which we may act as leader of this lease (send time of the last renewal + 0.9 × TTL). */
  actUntilMs: number
}

export function createEtcdElection (config: ElectionConfig, components: EtcdElectionComponents): LeaderElection {
  const { self, store } = components
  const log = components.logger.child({ backend: 'etcd' })
  const now = components.now ?? (() => performance.now())
  const client = components.client ?? createEtcdClient({ endpoints: config.etcdEndpoints, requestTimeoutMs: config.etcdRequestTimeoutMs })
  const prefix = config.etcdPrefix
  /** Beside the campaign keys, not under their prefix (every key there is a candidate). */
  const desiredKey = `${prefix.replace(/\/+$/, '')}.desired`
  /** Fenced writes of the desired state, one at a time; the seq etcd is known to hold in this campaign. */
  let writes: Promise<void> = Promise.resolve()
  let writtenSeq = { key: '', seq: 0 }
  const listeners = new Set<() => void>()
  const controller = new AbortController()
  let voterSetId = ''
  /** Every server seen campaigning under this voter set (persisted). */
  let known = new Set<string>()
  let candidates: EtcdKeyValue[] = []
  let campaign: Campaign | undefined
  let leaderSinceMs = 0
  let lastSignature = ''
  let loops: Promise<unknown>[] = []

  const changed = (): void => { for (const l of listeners) { try { l() } catch { /* a listener's failure is its own */ } } }

  const leaderKv = (): EtcdKeyValue | undefined => candidates[0]
  const isLeader = (): boolean => {
    const c = campaign
    const l = leaderKv()
    return c !== undefined && l !== undefined && c.createRevision > 0 && l.createRevision === c.createRevision && l.key === c.key && now() < c.actUntilMs
  }
  /** Fires onChange when anything the leader service or the view depends on changed. */
  const evaluate = (): void => {
    const leading = isLeader()
    if (leading && leaderSinceMs === 0) leaderSinceMs = now()
    if (!leading) leaderSinceMs = 0
    const signature = `${voterSetId}|${leading}|${candidates.map(c => `${c.createRevision}:${c.value}`).join(',')}`
    if (signature !== lastSignature) { lastSignature = signature; changed() }
  }

  /** Learns the fencing domain from any answer; a different etcd cluster or prefix forgets the servers seen. */
  const learnCluster = async (header: EtcdHeader): Promise<void> => {
    const id = etcdVoterSetId(header.clusterId, prefix)
    if (id === voterSetId) return
    voterSetId = id
    const persisted = store.current()
    known = new Set(persisted.voterSetId === id ? persisted.voters : [])
    if (persisted.voterSetId !== id) await store.save({ voterSetId: id, voters: [...known].sort() })
    log.info({ voterSetId: id, clusterId: header.clusterId, prefix }, 'etcd election: cluster known')
  }

  const remember = async (peers: string[]): Promise<void> => {
    const fresh = peers.filter(p => !known.has(p))
    if (fresh.length === 0) return
    for (const p of fresh) known.add(p)
    await store.save({ voters: [...known].sort() })
  }

  /** Logs the first failure after a success at warn, the rest at debug. */
  const failureLog = (what: string): { ok(): void, failed(err: unknown): void } => {
    let failing = false
    return {
      ok () { if (failing) log.info({ what }, 'etcd reachable again'); failing = false },
      failed (err) {
        const entry = { what, code: (err as { code?: string }).code, err: (err as Error).message }
        if (failing) log.debug(entry, 'etcd request failed'); else log.warn(entry, 'etcd request failed')
        failing = true
      },
    }
  }

  const observeLoop = async (signal: AbortSignal): Promise<void> => {
    const health = failureLog('observe')
    while (!signal.aborted) {
      try {
        const r = await client.rangePrefix(prefix, signal)
        await learnCluster(r.header)
        candidates = r.kvs.filter(kv => kv.value !== '')
        await remember(candidates.map(c => c.value))
        health.ok()
      } catch (err) {
        if (signal.aborted) return
        health.failed(err)
      }
      evaluate()
      await sleep(config.etcdPollIntervalMs, undefined, { signal }).catch(() => {})
    }
  }

  const ttlMs = config.etcdLeaseTtlS * 1000
  const campaignLoop = async (signal: AbortSignal): Promise<void> => {
    const health = failureLog('campaign')
    const retryMs = Math.max(50, Math.floor(ttlMs / 10))
    while (!signal.aborted) {
      let waitMs = retryMs
      try {
        if (campaign === undefined) {
          const sentAt = now()
          const lease = await client.grantLease(config.etcdLeaseTtlS, signal)
          await learnCluster(lease.header)
          campaign = { leaseId: lease.id, key: `${prefix}${BigInt(lease.id).toString(16)}`, createRevision: 0, actUntilMs: sentAt + lease.ttlS * 1000 * etcdLeaseActingShare }
          log.info({ lease: lease.id, ttlS: lease.ttlS }, 'etcd election: lease granted')
        }
        const c = campaign
        if (c.createRevision === 0) {
          // Idempotent: a retry after a lost answer finds the key it created.
          const r = await client.createIfAbsent(c.key, self, c.leaseId, signal)
          if (r.kv.lease !== c.leaseId) throw new Error(`campaign key ${c.key} exists with another lease`)
          c.createRevision = r.kv.createRevision
          log.info({ key: c.key, createRevision: c.createRevision }, 'etcd election: campaigning')
          await remember([self])
        } else {
          const sentAt = now()
          const r = await client.keepAlive(c.leaseId, signal)
          if (r.ttlS === 0) {
            log.warn({ lease: c.leaseId, epoch: c.createRevision }, 'etcd election: lease expired; campaigning again')
            campaign = undefined
            evaluate()
            continue
          }
          c.actUntilMs = Math.max(c.actUntilMs, sentAt + r.ttlS * 1000 * etcdLeaseActingShare)
        }
        health.ok()
        waitMs = Math.floor(ttlMs / 3)
      } catch (err) {
        if (signal.aborted) return
        health.failed(err)
        // A lease that expired before its key was created (etcd slow, TTL short) cannot be used again: grant a new one.
        if (campaign !== undefined && (err as AgentError).code === 'ERR_ETCD' && /lease not found/i.test((err as Error).message)) {
          log.warn({ lease: campaign.leaseId }, 'etcd election: lease gone before the campaign key was created; campaigning again')
          campaign = undefined
        }
      }
      evaluate()
      await sleep(waitMs, undefined, { signal }).catch(() => {})
    }
  }

  let stopped: Promise<void> | undefined
  return {
    backend: 'etcd',
    async start ({ signal }) {
      const persisted = store.current()
      known = new Set(persisted.voters)
      const s = AbortSignal.any([signal, controller.signal])
      loops = [observeLoop(s), ...(config.server ? [campaignLoop(s)] : [])]
      // Periodic evaluation: the acting window ends by the clock, not by an event.
      const ticker = setInterval(evaluate, Math.max(10, Math.floor(config.etcdPollIntervalMs / 2)))
      ticker.unref()
      s.addEventListener('abort', () => clearInterval(ticker), { once: true })
      log.info({ endpoints: config.etcdEndpoints, prefix, server: config.server, leaseTtlS: config.etcdLeaseTtlS }, 'etcd election started')
    },
    stop () {
      stopped ??= (async () => {
        controller.abort()
        await Promise.allSettled(loops)
        const c = campaign
        campaign = undefined
        evaluate()
        if (c !== undefined) {
          // Resigning: the key goes with the lease, the next candidate leads at once.
          await client.revokeLease(c.leaseId, AbortSignal.timeout(config.etcdRequestTimeoutMs * 2))
            .then(() => log.info({ lease: c.leaseId }, 'etcd election: lease revoked'))
            .catch(err => log.warn({ err: (err as Error).message }, 'etcd election: could not revoke the lease (it expires by its TTL)'))
        }
      })()
      return stopped
    },
    voterSetId: () => voterSetId,
    voters: () => [...new Set(candidates.map(c => c.value))],
    mayDecide: peer => voterSetId !== '' && known.has(peer),
    state (): LeaderElectionState | undefined {
      if (!config.server) return undefined
      const l = leaderKv()
      return { role: isLeader() ? 'leader' : 'follower', epoch: l?.createRevision ?? 0, leaderId: l?.value ?? null, actAfterMs: leaderSinceMs, leaseUntilMs: isLeader() ? campaign!.actUntilMs : 0 }
    },
    mayAct: () => isLeader() && leaderSinceMs > 0 && now() >= leaderSinceMs,
    onChange (listener) { listeners.add(listener); return () => listeners.delete(listener) },
    commit (snapshot, signal) {
      const c = campaign
      if (c === undefined || !isLeader()) return Promise.reject(new AgentError('ERR_NOT_COMMITTED', `decision ${snapshot.seq} not committed: this agent no longer leads`))
      const write = writes.catch(() => {}).then(async () => {
        if (writtenSeq.key === c.key && writtenSeq.seq >= snapshot.seq) return
        let r: { written: boolean }
        try {
          r = await client.putIfGuard(desiredKey, JSON.stringify(snapshot), c.key, c.createRevision, signal)
        } catch (err) {
          throw new AgentError('ERR_NOT_COMMITTED', `decision ${snapshot.seq} not committed: etcd did not take the write (${(err as Error).message}); it may still be committed, so retry by id`, { cause: err })
        }
        if (!r.written) throw new AgentError('ERR_NOT_COMMITTED', `decision ${snapshot.seq} not committed: this agent's campaign key ${c.key} is gone (no longer the leader)`)
        if (writtenSeq.key !== c.key || writtenSeq.seq < snapshot.seq) writtenSeq = { key: c.key, seq: snapshot.seq }
      })
      writes = write
      return write
    },
    async committedBase (signal) {
      // Without the fencing domain a stored state could not be told apart from another cluster's: never start from nothing then.
      if (voterSetId === '') throw new AgentError('ERR_ELECTION_STATE', 'the etcd cluster id is not known yet: the committed state cannot be read')
      const kv = await client.get(desiredKey, signal)
      if (kv === undefined) return undefined
      let s: LogSnapshot
      try {
        s = parseSnapshot(JSON.parse(kv.value))
      } catch (err) {
        throw new AgentError('ERR_ELECTION_STATE', `etcd key ${desiredKey} holds no valid desired state: ${(err as Error).message}`, { cause: err })
      }
      if (s.voterSetId === voterSetId) return s
      // Written under our prefix by a leader of another etcd cluster id: this cluster's state restored into a
      // new etcd cluster (a snapshot restore gives it a new id). Continued in this domain, not dropped: its
      // entries and seq go on, its epoch (a create revision of the other cluster) means nothing here. Kept, it
      // fenced off every leader of this cluster below it: the first append failed ("the log already holds
      // epoch 9") and the new cluster decided nothing until its revisions passed the old ones.
      log.warn({ key: desiredKey, stored: s.voterSetId, voterSetId, storedSeq: s.seq, storedEpoch: s.epoch }, 'etcd holds a desired state written under another etcd cluster id (restored from a snapshot?): continuing from it')
      return { ...s, voterSetId, epoch: 0 }
    },
  }
}
