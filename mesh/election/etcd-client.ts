/**
 * A small etcd v3 client over etcd's JSON gRPC gateway (HTTP/1.1 POST to
 * `/v3/...`, bytes as base64, int64 as decimal strings), enough for the
 * election recipe in etcd-election.ts: lease grant / keep-alive / revoke, a
 * create-if-absent transaction, prefix ranges sorted by create revision, and
 * the leader's fenced write and read of the desired state.
 * No dependency beyond `fetch`.
 *
 * Endpoints: every call tries the endpoint that answered last, then the
 * others in order, each attempt bounded by `requestTimeoutMs`; the call fails
 * with ERR_ETCD_UNAVAILABLE when none answers (network error, timeout, 5xx)
 * and with ERR_ETCD when etcd answers with an error (4xx, gRPC error body).
 * Every request here may be retried on another endpoint: ranges, keep-alives
 * and revokes are idempotent, createIfAbsent compares before it writes, and a
 * lease granted twice leaves one unused lease that expires by its TTL.
 *
 * Revisions and lease ids are int64: lease ids are kept as decimal strings;
 * revisions are numbers (safe integers up to 2^53, far beyond any cluster's
 * write count) and a reply outside that range is rejected.
 */
import { AgentError } from '../../core/errors.ts'

export interface EtcdClientOptions {
  /** Client URLs, e.g. http://10.0.0.1:2379; at least one. */
  endpoints: readonly string[]
  /** One HTTP attempt, ms. */
  requestTimeoutMs: number
}

export interface EtcdHeader {
  /** The etcd cluster's id (decimal string). */
  clusterId: string
  revision: number
}

export interface EtcdKeyValue {
  key: string
  value: string
  createRevision: number
  modRevision: number
  /** Lease id the key is attached to ("0": none). */
  lease: string
}

export interface EtcdClient {
  /** Grants a lease of `ttlS` seconds (etcd may raise it to its minimum). */
  grantLease(ttlS: number, signal?: AbortSignal): Promise<{ id: string, ttlS: number, header: EtcdHeader }>
  /** Renews the lease once; ttlS 0: the lease no longer exists (expired or revoked). */
  keepAlive(id: string, signal?: AbortSignal): Promise<{ ttlS: number, header: EtcdHeader }>
  revokeLease(id: string, signal?: AbortSignal): Promise<void>
  /**
   * Creates `key` = `value` attached to `lease` unless it exists; either way
   * returns the key as it now is.
   */
  createIfAbsent(key: string, value: string, lease: string, signal?: AbortSignal): Promise<{ created: boolean, kv: EtcdKeyValue, header: EtcdHeader }>
  /**
   * Puts `key` = `value` only while `guardKey` exists with create revision
   * `guardCreateRevision` (a leader's campaign key: the write is fenced by
   * its leadership). Resolves whether it was written.
   */
  putIfGuard(key: string, value: string, guardKey: string, guardCreateRevision: number, signal?: AbortSignal): Promise<{ written: boolean, header: EtcdHeader }>
  /** One key as it is now (linearizable read); undefined when absent. */
  get(key: string, signal?: AbortSignal): Promise<EtcdKeyValue | undefined>
  /** Every key under `prefix`, lowest create revision first. */
  rangePrefix(prefix: string, signal?: AbortSignal): Promise<{ kvs: EtcdKeyValue[], header: EtcdHeader }>
  /** The cluster id and current revision. */
  status(signal?: AbortSignal): Promise<EtcdHeader>
}

/** Checks endpoint URLs: http(s), no path beyond "/", no credentials. Throws ERR_CONFIG_INVALID naming the bad one. */
export function validateEtcdEndpoints (endpoints: readonly string[]): string[] {
  const problems: string[] = []
  if (endpoints.length === 0) problems.push('election.etcdEndpoints must list at least one etcd client URL when election.backend is "etcd"')
  for (const e of endpoints) {
    let url: URL
    try { url = new URL(e) } catch { problems.push(`election.etcdEndpoints: ${JSON.stringify(e)} is not a URL`); continue }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') problems.push(`election.etcdEndpoints: ${JSON.stringify(e)} must be http:// or https://`)
    else if (url.pathname !== '/' || url.search !== '' || url.hash !== '') problems.push(`election.etcdEndpoints: ${JSON.stringify(e)} must have no path, query or fragment`)
    else if (url.username !== '' || url.password !== '') problems.push(`election.etcdEndpoints: ${JSON.stringify(e)} must not carry credentials`)
  }
  return problems
}

const b64 = (s: string): string => Buffer.from(s, 'utf8').toString('base64')
const unb64 = (s: unknown): string => typeof s === 'string' ? Buffer.from(s, 'base64').toString('utf8') : ''

/** The first key after every key with this prefix (etcd's range_end for a prefix). */
export function prefixEnd (prefix: string): string {
  const bytes = Buffer.from(prefix, 'utf8')
  for (let i = bytes.length - 1; i >= 0; i--) {
    if (bytes[i]! < 0xff) { const end = Buffer.from(bytes.subarray(0, i + 1)); end[i]!++; return end.toString('latin1') }
  }
  return '\0'
}

type Json = Record<string, unknown>

export function createEtcdClient (options: EtcdClientOptions): EtcdClient {
  const problems = validateEtcdEndpoints(options.endpoints)
  if (problems.length > 0) throw new AgentError('ERR_CONFIG_INVALID', problems.join('; '), { details: problems })
  const endpoints = options.endpoints.map(e => e.replace(/\/$/, ''))
  let preferred = 0

  /** One POST, tried on each endpoint in turn until one answers. */
  const call = async (path: string, body: Json, signal?: AbortSignal): Promise<Json> => {
    const failures: string[] = []
    for (let i = 0; i < endpoints.length; i++) {
      const index = (preferred + i) % endpoints.length
      const url = `${endpoints[index]}${path}`
      let response: Response
      let text: string
      try {
        const attempt = AbortSignal.timeout(options.requestTimeoutMs)
        response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: signal !== undefined ? AbortSignal.any([signal, attempt]) : attempt })
        text = await response.text()
      } catch (err) {
        if (signal?.aborted === true) throw err
        failures.push(`${endpoints[index]}: ${(err as Error).name === 'TimeoutError' ? `no answer within ${options.requestTimeoutMs} ms` : ((err as Error).cause as Error | undefined)?.message ?? (err as Error).message}`)
        continue
      }
      if (response.status >= 500 && response.status !== 501) {
        failures.push(`${endpoints[index]}: HTTP ${response.status} ${text.slice(0, 200)}`)
        continue
      }
      let json: Json
      try { json = JSON.parse(text) as Json } catch { throw new AgentError('ERR_ETCD', `etcd ${url} answered HTTP ${response.status} with non-JSON: ${text.slice(0, 200)}`) }
      if (!response.ok || typeof json.error === 'string') {
        throw new AgentError('ERR_ETCD', `etcd ${url}: ${String(json.message ?? json.error ?? `HTTP ${response.status}`)}`, { details: json })
      }
      preferred = index
      return json
    }
    throw new AgentError('ERR_ETCD_UNAVAILABLE', `no etcd endpoint answered ${path}: ${failures.join('; ')}`, { details: failures })
  }

  const int = (v: unknown, what: string): number => {
    const n = typeof v === 'string' ? Number(v) : typeof v === 'number' ? v : v === undefined ? 0 : Number.NaN
    if (!Number.isSafeInteger(n) || n < 0) throw new AgentError('ERR_ETCD', `etcd answered an invalid ${what}: ${JSON.stringify(v)}`)
    return n
  }
  const header = (j: Json): EtcdHeader => {
    const h = j.header as Json | undefined
    if (typeof h !== 'object' || h === null || typeof h.cluster_id !== 'string') throw new AgentError('ERR_ETCD', `etcd answered without a response header: ${JSON.stringify(j).slice(0, 200)}`)
    return { clusterId: h.cluster_id, revision: int(h.revision, 'revision') }
  }
  const keyValue = (kv: Json): EtcdKeyValue => ({
    key: unb64(kv.key),
    value: unb64(kv.value),
    createRevision: int(kv.create_revision, 'create_revision'),
    modRevision: int(kv.mod_revision, 'mod_revision'),
    lease: typeof kv.lease === 'string' ? kv.lease : '0',
  })

  return {
    async grantLease (ttlS, signal) {
      const j = await call('/v3/lease/grant', { TTL: ttlS }, signal)
      if (typeof j.ID !== 'string') throw new AgentError('ERR_ETCD', `etcd granted no lease id: ${JSON.stringify(j).slice(0, 200)}`)
      return { id: j.ID, ttlS: int(j.TTL, 'TTL'), header: header(j) }
    },
    async keepAlive (id, signal) {
      // The gateway maps the bidirectional stream to one request → one `result`.
      const j = await call('/v3/lease/keepalive', { ID: id }, signal)
      const r = j.result as Json | undefined
      if (typeof r !== 'object' || r === null) throw new AgentError('ERR_ETCD', `etcd keep-alive answered without a result: ${JSON.stringify(j).slice(0, 200)}`)
      return { ttlS: int(r.TTL, 'TTL'), header: header(r) }
    },
    async revokeLease (id, signal) {
      try {
        await call('/v3/lease/revoke', { ID: id }, signal)
      } catch (err) {
        // Already gone is what revoking wants.
        if ((err as AgentError).code === 'ERR_ETCD' && /not found/i.test((err as Error).message)) return
        throw err
      }
    },
    async createIfAbsent (key, value, lease, signal) {
      const k = b64(key)
      const j = await call('/v3/kv/txn', {
        compare: [{ key: k, target: 'CREATE', result: 'EQUAL', create_revision: '0' }],
        success: [{ request_put: { key: k, value: b64(value), lease } }],
        failure: [{ request_range: { key: k } }],
      }, signal)
      const h = header(j)
      if (j.succeeded === true) return { created: true, kv: { key, value, createRevision: h.revision, modRevision: h.revision, lease }, header: h }
      const responses = j.responses as Json[] | undefined
      const kvs = ((responses?.[0]?.response_range as Json | undefined)?.kvs ?? []) as Json[]
      if (kvs[0] === undefined) throw new AgentError('ERR_ETCD', `etcd transaction on ${key} neither created nor found it`)
      return { created: false, kv: keyValue(kvs[0]), header: h }
    },
    async putIfGuard (key, value, guardKey, guardCreateRevision, signal) {
      // Retrying on another endpoint is safe: a second write of the same value under the same guard changes nothing.
      const j = await call('/v3/kv/txn', {
        compare: [{ key: b64(guardKey), target: 'CREATE', result: 'EQUAL', create_revision: String(guardCreateRevision) }],
        success: [{ request_put: { key: b64(key), value: b64(value) } }],
        failure: [],
      }, signal)
      return { written: j.succeeded === true, header: header(j) }
    },
    async get (key, signal) {
      const j = await call('/v3/kv/range', { key: b64(key) }, signal)
      const kv = ((j.kvs ?? []) as Json[])[0]
      return kv === undefined ? undefined : keyValue(kv)
    },
    async rangePrefix (prefix, signal) {
      const j = await call('/v3/kv/range', { key: b64(prefix), range_end: Buffer.from(prefixEnd(prefix), 'latin1').toString('base64'), sort_order: 'ASCEND', sort_target: 'CREATE' }, signal)
      return { kvs: ((j.kvs ?? []) as Json[]).map(keyValue), header: header(j) }
    },
    async status (signal) {
      return header(await call('/v3/maintenance/status', {}, signal))
    },
  }
}
