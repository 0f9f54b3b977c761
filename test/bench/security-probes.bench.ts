// bench-requires: root curl (the probes of other uids run curl as those uids)
/**
 * The closing measurement of issue #23: the hostile requests the issue
 * describes, replayed against a real dev agent, with counts per item.
 *
 *   node_modules/.bin/node test/bench/security-probes.bench.ts
 *
 * One agent (--dev, socket mode 0666 so that other uids can connect: what
 * each may do is the agent's decision alone, as in
 * test/agent/api/authorization-agent.test.ts; api.pathRoots only
 * <stateDir>/files, as in production). Before the probes it is given
 * acknowledged data: durable keys of root and of another uid (alice), a
 * running job, a decision, two weights versions (one published by alice
 * from her keys, one by root from a file), a worker alice registered (its
 * event stream open) and a GPU lock alice's process holds. After every item
 * the data is read back (each key's bytes onloaded and hashed; the job table
 * from GET /v1/jobs and from the committed desired state, replicated-log.jsonl;
 * the applied decisions, decisions.jsonl; each version's manifest checksums;
 * workers; locks) and the agent is checked alive and answering. At the end it
 * is SIGKILLed and restarted on the same state directory and what is durable
 * by contract is read back again (keys on NVMe, versions, the committed state,
 * the decision log); GET /v1/jobs after the restart is reported on its own line.
 *
 * Per item: tried; rejected (an HTTP 4xx with an error code; on the weights
 * data port an error status or a close by the server within its handshake or
 * frame timeout; for connection floods a close by the server); accepted (2xx:
 * only requests open to every caller by design, listed below the table);
 * 5xx, crash or no answer; acknowledged data lost. Goal: 0 in every column
 * but "rejected" (and "accepted" only for the by-design controls).
 *
 * Items (the issue's numbering): 1 decisions of kinds owned by subsystems;
 * 2 "."/".." and separators in model and namespace names; 3 file paths
 * outside api.pathRoots; 4 the weights data port (keyless flood during
 * pulls, garbage before and after the handshake); 5 local connections,
 * partial and oversized bodies, strict validation (a schema-driven fuzz of
 * every body from /v1/openapi.json, as root so that validation is what
 * answers); 6 other uids on every mutating route.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import { request as httpRequest } from 'node:http'
import { connect, type Socket } from 'node:net'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { spawnAgent, tempDir, untilActing, type AgentProcess } from '../helpers/agent-process.ts'
import { makeShm, patternBytes } from '../native/helpers.ts'
import { tensor, writeSafetensors } from '../agent/weights/weights-fixtures.ts'
import { loadClusterKey } from '../../mesh/membership/cluster-key.ts'
import { createDataAuth } from '../../agent/weights/data-auth.ts'
import { createTcpConnector } from '../../agent/weights/tcp-client.ts'
import {
  authMagic, decodeHello, decodeReplyHeader, encodeAuth, encodeManifestRequest, encodeReadRequest, encodeRequestHeader, helloBytes, Op, proofBytes,
  replyHeaderBytes, requestMagic, Status,
} from '../../agent/weights/protocol.ts'

if (process.getuid?.() !== 0) {
  console.log('security-probes not run: needs root (the probes of other uids run as those uids)')
  process.exit(0)
}

const began = performance.now()
const teardowns: Array<() => unknown> = []
const scope = { teardown: (fn: () => unknown) => { teardowns.push(fn) } }
// makeShm wants a tap-like test: its objects are removed at the end.
const shmScope = scope as unknown as Parameters<typeof makeShm>[0]
process.on('exit', () => { for (const fn of teardowns.reverse()) { try { void fn() } catch {} } })

interface User { name: string, uid: number, gid: number }
const alice: User = { name: 'alice', uid: 1001, gid: 1001 }
const bob: User = { name: 'bob', uid: 1002, gid: 1002 }
const nobody: User = { name: 'nobody', uid: 65534, gid: 65534 }
const fakeGpus = JSON.stringify([0, 1].map(i => ({ model: 'Fake GPU', memoryBytes: 85_520_809_984, uuid: `GPU-fake-${i}`, pciBus: `00000000:1${i}:00.0` })))
const lockClientMain = fileURLToPath(new URL('../agent/api/locks-client-process.ts', import.meta.url))

// ---------------------------------------------------------------- outcomes

/** What one probe got: an HTTP answer, a data-port reply status, the server closing, or nothing. */
type Outcome =
  | { kind: 'http', status: number, code?: string }
  | { kind: 'data', status: number }
  | { kind: 'closed' }
  | { kind: 'silent' }

interface Probe {
  item: number
  what: string
  /** 'refuse': hostile, must be rejected; 'open': served by design (a control). */
  expect: 'refuse' | 'open'
  run(): Promise<Outcome>
}

type Verdict = 'rejected' | 'accepted' | 'failed'
function verdict (o: Outcome): Verdict {
  if (o.kind === 'http') {
    if (o.status >= 400 && o.status < 500 && o.code !== undefined) return 'rejected'
    if (o.status >= 200 && o.status < 300) return 'accepted'
    return 'failed' // 5xx, or a 4xx without an error code
  }
  if (o.kind === 'data') return o.status === Status.ok ? 'accepted' : o.status === Status.internal ? 'failed' : 'rejected'
  if (o.kind === 'closed') return 'rejected'
  return 'failed' // no answer and not closed within the deadline
}

interface Row { tried: number, rejected: number, accepted: number, failed: number, lost: number, hostileAccepted: string[], controls: string[], failures: string[] }
const emptyRow = (): Row => ({ tried: 0, rejected: 0, accepted: 0, failed: 0, lost: 0, hostileAccepted: [], controls: [], failures: [] })
const rows = new Map<string, Row>()
const rowOf = (name: string): Row => { let r = rows.get(name); if (r === undefined) { r = emptyRow(); rows.set(name, r) } return r }
const describe = (o: Outcome): string => o.kind === 'http' ? `${o.status} ${o.code ?? '(no code)'}` : o.kind === 'data' ? `data status ${o.status}` : o.kind

async function runProbes (row: string, probes: Probe[], concurrency = 8): Promise<void> {
  const r = rowOf(row)
  let next = 0
  const worker = async (): Promise<void> => {
    while (next < probes.length) {
      const p = probes[next++]!
      let o: Outcome
      try { o = await p.run() } catch (err) { o = { kind: 'silent' }; r.failures.push(`${p.what}: ${(err as Error).message}`) }
      const v = verdict(o)
      r.tried++
      if (v === 'rejected') r.rejected++
      else if (v === 'accepted') {
        r.accepted++
        if (p.expect === 'refuse') r.hostileAccepted.push(`${p.what} -> ${describe(o)}`)
        else r.controls.push(p.what)
      } else { r.failed++; r.failures.push(`${p.what} -> ${describe(o)}`) }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
}

// ---------------------------------------------------------------- the agent

let agent: AgentProcess
const dir = tempDir(scope, 'agentd-probe-')
/** Files the probes of item 3 try to create outside api.pathRoots (removed first: an earlier run's would count). */
const escapes = [join(dirname(dir), 'agentd-probe-escape.safetensors'), '/etc/agentd-probe.safetensors', '/etc/agentd-probe-link.safetensors', '/root/agentd-probe.safetensors']
for (const f of escapes) rmSync(f, { force: true })
chmodSync(dir, 0o755) // the other uids reach the socket in it
const filesDir = join(dir, 'files')
// api.pathRoots as in production (only <stateDir>/files): a --dev agent also allows the temp directory, where the state dir is.
const agentArgs = ['--dev', '--state-dir', dir, '--set', `api.pathRoots=${JSON.stringify([filesDir])}`, '--set', 'api.socketMode=0666', '--set', 'api.adminGroup=4242', '--set', `inventory.gpus=${fakeGpus}`,
  '--set', 'state.hostPoolBytes=67108864', '--set', 'state.nvmeCapacityBytes=268435456', '--set', 'locks.holderCheckIntervalMs=50',
  // Short reception bounds so that the partial-body and partial-frame probes end within the run.
  '--set', 'api.requestTimeoutMs=2000', '--set', 'weights.frameTimeoutMs=1000']
const startAgent = async (): Promise<AgentProcess> => await spawnAgent(scope, { stateDir: dir, args: agentArgs })

/** One request as root, in process, over the socket. `raw`: a body sent as is (with its content type). */
async function call (method: string, path: string, body?: unknown, options: { raw?: string | Buffer, contentType?: string, timeoutMs?: number } = {}): Promise<Outcome & { json?: unknown }> {
  const payload = options.raw ?? (body !== undefined ? JSON.stringify(body) : undefined)
  return await new Promise(resolve => {
    const req = httpRequest({
      socketPath: agent.socketPath, method, path, agent: false,
      headers: payload !== undefined ? { 'content-type': options.contentType ?? 'application/json', 'content-length': Buffer.byteLength(payload) } : {},
    }, res => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        let json: unknown
        try { json = JSON.parse(Buffer.concat(chunks).toString()) } catch {}
        const code = (json as { error?: { code?: string } } | undefined)?.error?.code
        resolve({ kind: 'http', status: res.statusCode ?? 0, ...(code !== undefined ? { code } : {}), json })
      })
      res.on('error', () => resolve({ kind: 'closed' }))
    })
    req.setTimeout(options.timeoutMs ?? 15_000, () => { req.destroy(); resolve({ kind: 'silent' }) })
    req.on('error', () => resolve({ kind: 'closed' }))
    req.end(payload)
  })
}

/** The answer's JSON, or throws: for the set-up and the read-backs, which must succeed. */
async function must<T> (method: string, path: string, body?: unknown): Promise<T> {
  const o = await call(method, path, body)
  if (o.kind !== 'http' || o.status >= 300) throw new Error(`${method} ${path}: ${describe(o)} ${JSON.stringify(o.json)}`)
  return o.json as T
}

/** One request by a process of `user` (curl), as a real caller of another uid. */
async function callAs (user: User, method: string, path: string, body?: unknown): Promise<Outcome & { json?: unknown }> {
  const curl = ['-q', '-s', '-S', '--max-time', '15', '--unix-socket', agent.socketPath, '-X', method, '-w', '\n%{http_code}', `http://agent${path}`,
    ...(body !== undefined ? ['-H', 'content-type: application/json', '--data-binary', JSON.stringify(body)] : [])]
  const proc = spawn('curl', curl, { uid: user.uid, gid: user.gid, stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  proc.stdout.on('data', (c: Buffer) => { out += c.toString() })
  proc.stderr.resume()
  const [code] = await once(proc, 'close') as [number | null] // 'close': after stdout is read to its end
  if (code !== 0) return { kind: code === 28 ? 'silent' : 'closed' }
  const cut = out.lastIndexOf('\n')
  let json: unknown
  try { json = JSON.parse(out.slice(0, cut)) } catch {}
  const errorCode = (json as { error?: { code?: string } } | undefined)?.error?.code
  return { kind: 'http', status: Number(out.slice(cut + 1)), ...(errorCode !== undefined ? { code: errorCode } : {}), json }
}

/** Writes `bytes` on a fresh connection to the API socket (in `parts`, `gapMs` apart), then reads until the server closes or answers. */
async function rawHttp (parts: Array<string | Buffer>, options: { gapMs?: number, deadlineMs?: number } = {}): Promise<Outcome> {
  const socket = connect({ path: agent.socketPath })
  socket.on('error', () => {})
  let received = Buffer.alloc(0)
  let closed = false
  socket.on('data', (c: Buffer) => { received = Buffer.concat([received, c]) })
  const ended = new Promise<void>(resolve => socket.on('close', () => { closed = true; resolve() }))
  await once(socket, 'connect').catch(() => {})
  const deadline = performance.now() + (options.deadlineMs ?? 5000)
  for (const [i, part] of parts.entries()) {
    if (i > 0 && options.gapMs !== undefined) await sleep(options.gapMs)
    if (closed || performance.now() > deadline) break
    socket.write(part)
  }
  await Promise.race([ended, sleep(Math.max(0, deadline - performance.now()))])
  socket.destroy()
  const text = received.toString('latin1')
  const status = /^HTTP\/1\.[01] (\d{3})/.exec(text)
  if (status !== null) {
    const body = text.slice(text.indexOf('\r\n\r\n') + 4)
    const code = /"code":"([A-Z_0-9]+)"/.exec(body)?.[1]
    return { kind: 'http', status: Number(status[1]), ...(code !== undefined ? { code } : {}) }
  }
  return closed ? { kind: 'closed' } : { kind: 'silent' }
}

// ---------------------------------------------------------------- acknowledged data

interface Snapshot {
  /** key → sha256 of its bytes, and whether it is durable. */
  keys: Map<string, { sha: string, durable: boolean }>
  /** GET /v1/jobs: id → state. */
  jobs: Map<string, string>
  /** The committed desired state (the last snapshot in replicated-log.jsonl): its job table (id → state) and `notes` payload. */
  committedJobs: Map<string, string>
  committedNotes: string
  /** Decisions this agent applied (decisions.jsonl, durable): epoch:seq:kind. */
  decisions: Set<string>
  /** model@version → digest of its tensors' checksums. */
  versions: Map<string, string>
  workers: Set<string>
  locks: Map<number, string | null>
}

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex')

async function snapshot (): Promise<Snapshot> {
  const residency = await must<{ keys: Array<{ key: string, bytes: number, durable: boolean }> }>('GET', '/v1/state/residency')
  const keys = new Map<string, { sha: string, durable: boolean }>()
  for (const k of residency.keys) {
    const target = makeShm(shmScope, k.bytes)
    await must('POST', '/v1/state/onload', { tensors: [{ key: k.key, target: { kind: 'shm', name: target, offset: 0 } }] })
    keys.set(k.key, { sha: sha(readFileSync(`/dev/shm/${target}`)), durable: k.durable })
    rmSync(`/dev/shm/${target}`, { force: true })
  }
  const jobs = new Map((await must<{ jobs: Array<{ id: string, state: string }> }>('GET', '/v1/jobs')).jobs.map(j => [j.id, j.state]))
  const logLines = readFileSync(join(dir, 'replicated-log.jsonl'), 'utf8').split('\n').filter(l => l !== '')
  let committed: { entries?: { jobs?: { jobs?: Array<{ id: string, state: string }> }, notes?: unknown } } = {}
  for (let i = logLines.length - 1; i >= 0; i--) { try { committed = JSON.parse(logLines[i]!); break } catch {} }
  const committedJobs = new Map((committed.entries?.jobs?.jobs ?? []).map(j => [j.id, j.state]))
  const committedNotes = JSON.stringify(committed.entries?.notes ?? null)
  const decisions = new Set(readFileSync(join(dir, 'decisions.jsonl'), 'utf8').split('\n').filter(l => l !== '').flatMap(l => {
    try { const e = JSON.parse(l) as { epoch: number, seq: number, kind: string, outcome: string }; return e.outcome === 'applied' ? [`${e.epoch}:${e.seq}:${e.kind}`] : [] } catch { return [] }
  }))
  const versions = new Map<string, string>()
  for (const v of (await must<{ versions: Array<{ model: string, version: number }> }>('GET', '/v1/weights')).versions) {
    const m = await must<{ tensors: Array<{ name: string, chunkChecksums: number[] }> }>('GET', `/v1/weights/${v.model}/${v.version}/manifest`)
    versions.set(`${v.model}@${v.version}`, sha(Buffer.from(JSON.stringify(m.tensors.map(t => [t.name, t.chunkChecksums])))))
  }
  const workers = new Set((await must<{ workers: Array<{ workerId: string }> }>('GET', '/v1/workers')).workers.map(w => w.workerId))
  const locks = new Map((await must<{ gpus: Array<{ gpu: number, holder: string | null }> }>('GET', '/v1/locks')).gpus.map(g => [g.gpu, g.holder]))
  return { keys, jobs, committedJobs, committedNotes, decisions, versions, workers, locks }
}

/** What of `before` is missing or changed in `after` (with `durableOnly`, only what survives a restart by contract). */
function lost (before: Snapshot, after: Snapshot, durableOnly = false): string[] {
  const out: string[] = []
  for (const [key, k] of before.keys) {
    if (durableOnly && !k.durable) continue
    const now = after.keys.get(key)
    if (now === undefined) out.push(`key ${key} missing`)
    else if (now.sha !== k.sha) out.push(`key ${key} changed`)
  }
  for (const [id, state] of before.committedJobs) if (after.committedJobs.get(id) !== state) out.push(`job ${id} in the committed state: ${state} -> ${after.committedJobs.get(id) ?? 'missing'}`)
  if (after.committedNotes !== before.committedNotes) out.push(`the committed notes decision: ${before.committedNotes} -> ${after.committedNotes}`)
  // The API's view of the jobs after a restart is reported apart (jobsViewAfterRestart): it is not fed from the committed state.
  if (!durableOnly) for (const [id, state] of before.jobs) if (after.jobs.get(id) !== state) out.push(`job ${id} in GET /v1/jobs: ${state} -> ${after.jobs.get(id) ?? 'missing'}`)
  for (const d of before.decisions) if (!after.decisions.has(d)) out.push(`decision ${d} missing`)
  for (const [v, digest] of before.versions) if (after.versions.get(v) !== digest) out.push(`weights ${v} ${after.versions.has(v) ? 'changed' : 'missing'}`)
  if (!durableOnly) {
    for (const w of before.workers) if (!after.workers.has(w)) out.push(`worker ${w} missing`)
    for (const [gpu, holder] of before.locks) if (after.locks.get(gpu) !== holder) out.push(`gpu ${gpu} lock: ${holder} -> ${after.locks.get(gpu)}`)
  }
  return out
}

async function alive (): Promise<boolean> {
  if (agent.proc.exitCode !== null || agent.proc.signalCode !== null) return false
  const o = await call('GET', '/healthz', undefined, { timeoutMs: 5000 })
  return o.kind === 'http' && o.status === 200
}

/** After an item: the agent must be alive and answering, and nothing acknowledged lost since the last check. */
let reference: Snapshot
async function checkAfter (row: string): Promise<void> {
  const r = rowOf(row)
  if (!(await alive())) {
    r.failed++
    r.failures.push(`the agent died or stopped answering (exit ${agent.proc.exitCode ?? agent.proc.signalCode}); restarted`)
    agent.proc.kill('SIGKILL')
    await agent.exited
    agent = await startAgent()
  }
  const now = await snapshot()
  const gone = lost(reference, now)
  r.lost += gone.length
  r.failures.push(...gone.map(g => `lost: ${g}`))
}

// ---------------------------------------------------------------- set-up

agent = await startAgent()
await untilActing(agent, 30_000)
const keyOf = (ns: string, name: string, bytes: number, version = 1): string => `${ns}/${name}:param@[0]/[${bytes}]:u8#v${version}`
const KiB64 = 65536
const rootKeys = Array.from({ length: 6 }, (_, i) => keyOf('bench/actor', `w${i}`, KiB64))
await must('POST', '/v1/state/offload', { tensors: rootKeys.map((key, i) => ({ key, source: { kind: 'shm', name: makeShm(shmScope, patternBytes(KiB64, 100 + i)), offset: 0 } })), durability: 'nvme' })
const aliceKeys = Array.from({ length: 3 }, (_, i) => keyOf('alice/actor', `w${i}`, KiB64))
for (const [i, key] of aliceKeys.entries()) {
  const source = makeShm(shmScope, patternBytes(KiB64, 200 + i))
  chmodSync(`/dev/shm/${source}`, 0o644)
  const o = await callAs(alice, 'POST', '/v1/state/offload', { tensors: [{ key, source: { kind: 'shm', name: source, offset: 0 } }], durability: 'nvme' })
  if (o.kind !== 'http' || o.status !== 200) throw new Error(`alice's offload: ${describe(o)} ${JSON.stringify(o.json)}`)
}
const aliceModel = await callAs(alice, 'POST', '/v1/weights/publish', { model: 'am', source: { kind: 'keys', prefix: 'alice/actor/' } })
if (aliceModel.kind !== 'http' || aliceModel.status !== 200) throw new Error(`alice's publish: ${describe(aliceModel)} ${JSON.stringify(aliceModel.json)}`)
mkdirSync(filesDir, { recursive: true })
const rmTensors = [tensor('model.embed.weight', 'f32', [256, 128], 7), tensor('model.layers.0.w', 'bf16', [128, 512], 8)]
writeSafetensors(join(filesDir, 'rm.safetensors'), rmTensors)
await must('POST', '/v1/weights/publish', { model: 'rm', source: { kind: 'safetensors', path: join(filesDir, 'rm.safetensors') } })
await must('POST', '/v1/jobs', { id: 'bench-job', nodes: 1, gpusPerNode: 2, periodS: 60, iterations: 1000, segments: [{ offsetS: 0, durationS: 10 }], maxSlowdown: 2 })
await must('POST', '/v1/leader/decisions', { kind: 'notes', payload: { bench: 'acknowledged before the probes' } })
const workerShm = makeShm(shmScope, patternBytes(16, 3))
chmodSync(`/dev/shm/${workerShm}`, 0o666)
const registered = await callAs(alice, 'POST', '/v1/workers', { job: 'bench-job', rank: 0, gpu: 0, ops: ['f'], tensors: [{ name: 'w', key: 'bench-job/r0/w:param@[0]/[4]:f32#v0', memory: { kind: 'shm', name: workerShm, offset: 0 } }] })
if (registered.kind !== 'http' || registered.status !== 200) throw new Error(`alice's worker: ${describe(registered)} ${JSON.stringify(registered.json)}`)
const workerId = (registered.json as { workerId: string }).workerId
// A worker whose event stream does not open soon after registering is removed (agent/workers): alice's stays open.
const workerEvents = spawn('curl', ['-q', '-s', '-N', '--unix-socket', agent.socketPath, `http://agent/v1/workers/${workerId}/events`], { uid: alice.uid, gid: alice.gid, stdio: ['ignore', 'pipe', 'ignore'] })
teardowns.push(() => workerEvents.kill('SIGKILL'))
workerEvents.stdout.resume()
for (let deadline = Date.now() + 10_000; !(await must<{ workers: Array<{ workerId: string, attached: boolean }> }>('GET', '/v1/workers')).workers.some(w => w.workerId === workerId && w.attached);) {
  if (Date.now() > deadline) throw new Error('alice\'s worker never attached')
  await sleep(50)
}
const lockHolder = spawn(process.execPath, [lockClientMain, agent.socketPath, '1', 'grp-a'], { uid: alice.uid, gid: alice.gid, stdio: ['ignore', 'pipe', 'inherit'] }) as ChildProcess & { stdout: NodeJS.ReadableStream }
teardowns.push(() => lockHolder.kill('SIGKILL'))
await once(lockHolder.stdout, 'data')
const aliceRegion = await callAs(alice, 'POST', '/v1/weights/regions', { model: 'am', tensors: [{ name: 'w', dtype: 'u8', shape: [64] }] })
if (aliceRegion.kind !== 'http' || aliceRegion.status !== 200) throw new Error(`alice's region: ${describe(aliceRegion)}`)
const regionName = (aliceRegion.json as { region: string }).region
reference = await snapshot()
const setupS = (performance.now() - began) / 1000

// ---------------------------------------------------------------- item 1: decisions

const item1 = 'decision kinds owned by subsystems'
{
  const probes: Probe[] = []
  const p = (what: string, run: () => Promise<Outcome>): void => { probes.push({ item: 1, what, expect: 'refuse', run }) }
  for (const kind of ['jobs', 'leader', 'reward-workers']) {
    for (const payload of [{ evil: true }, null, {}, [], 'x', 0, { jobs: [] }, { jobs: {} }, { leader: 'me', epoch: 1e9 }]) {
      p(`root POST decisions ${kind} ${JSON.stringify(payload)}`, async () => await call('POST', '/v1/leader/decisions', { kind, payload }))
    }
  }
  p('root POST decisions notes, 900 KB payload', async () => await call('POST', '/v1/leader/decisions', { kind: 'notes', payload: 'x'.repeat(900_000) }))
  p('root POST decisions notes, 64 KiB + 1 payload', async () => await call('POST', '/v1/leader/decisions', { kind: 'notes', payload: 'x'.repeat(65_536) }))
  for (const kind of ['', '../jobs', 'jobs\n', ' jobs', 'a'.repeat(129), 7, null]) p(`root POST decisions kind ${JSON.stringify(kind)}`, async () => await call('POST', '/v1/leader/decisions', { kind, payload: 1 }))
  for (const body of [null, [], {}, { payload: 1 }, 'jobs']) p(`root POST decisions body ${JSON.stringify(body)}`, async () => await call('POST', '/v1/leader/decisions', body))
  p('root PUT /v1/fault/partition (no such route in any build)', async () => await call('PUT', '/v1/fault/partition', { deny: ['x'] }))
  p('root POST /v1/fault/stale-decision jobs (no such route in any build)', async () => await call('POST', '/v1/fault/stale-decision', { kind: 'jobs', payload: {} }))
  await runProbes(item1, probes)
  await checkAfter(item1)
}

// ---------------------------------------------------------------- item 2: names that become paths

const item2 = '"."/".." and separators in names'
{
  const probes: Probe[] = []
  const p = (what: string, run: () => Promise<Outcome>, expect: Probe['expect'] = 'refuse'): void => { probes.push({ item: 2, what, expect, run }) }
  const models = ['.', '..', '../x', '../../etc', 'a/b', '', 'a\u0000b', 'x'.repeat(129), '..\\x', '%2e%2e', ' ', 'm\n']
  for (const model of models) {
    p(`root publish model ${JSON.stringify(model)}`, async () => await call('POST', '/v1/weights/publish', { model, source: { kind: 'keys', prefix: 'bench/actor/' } }))
    p(`alice publish model ${JSON.stringify(model)}`, async () => await callAs(alice, 'POST', '/v1/weights/publish', { model, source: { kind: 'keys', prefix: 'alice/actor/' } }))
    p(`root region for model ${JSON.stringify(model)}`, async () => await call('POST', '/v1/weights/regions', { model, tensors: [{ name: 'w', dtype: 'u8', shape: [16] }] }))
    p(`root pull model ${JSON.stringify(model)}`, async () => await call('POST', '/v1/weights/pull', { from: '127.0.0.1:1', model, version: 0 }))
    p(`root retire model ${JSON.stringify(model)}`, async () => await call('POST', '/v1/weights/retire', { model, version: 0 }))
  }
  for (const path of ['/v1/weights/../0/manifest', '/v1/weights/./0/manifest', '/v1/weights/%2e%2e/0/manifest', '/v1/weights/%2E/latest/manifest', '/v1/weights/a%2Fb/0/manifest', '/v1/weights/a%00b/0/manifest']) {
    p(`root GET ${path}`, async () => await call('GET', path))
  }
  for (const tensorName of ['../w', 'a/b', '', 'w\u0000']) p(`root region tensor name ${JSON.stringify(tensorName)}`, async () => await call('POST', '/v1/weights/regions', { model: 'probe', tensors: [{ name: tensorName, dtype: 'u8', shape: [16] }] }))
  const source = makeShm(shmScope, patternBytes(16, 9))
  for (const ns of ['/abs', 'a//b', 'a\\b', 'a\u0000b', 'a b', '']) {
    p(`root offload namespace ${JSON.stringify(ns)}`, async () => await call('POST', '/v1/state/offload', { tensors: [{ key: keyOf(ns, 'w', 16), source: { kind: 'shm', name: source, offset: 0 } }] }))
  }
  // "." and ".." are valid characters of a key's segments; namespaces are never joined into paths (NVMe objects are
  // named by the key's sha256), so these are stored: the check is that nothing appears outside the state directory.
  for (const ns of ['..', '.', '../../etc', 'a/../b']) {
    p(`root offload namespace ${JSON.stringify(ns)} (stored by design: not a path)`, async () => await call('POST', '/v1/state/offload', { tensors: [{ key: keyOf(ns, 'w', 16), source: { kind: 'shm', name: source, offset: 0 } }], durability: 'nvme' }), 'open')
  }
  await runProbes(item2, probes)
  await checkAfter(item2)
}

// ---------------------------------------------------------------- item 3: file paths

const item3 = 'file paths outside the roots'
{
  symlinkSync('/etc/agentd-probe-link.safetensors', join(filesDir, 'link.safetensors'))
  symlinkSync('/etc', join(filesDir, 'etc'))
  symlinkSync('/etc/passwd', join(filesDir, 'passwd.safetensors'))
  symlinkSync(join(dir, 'cluster.key'), join(filesDir, 'key.safetensors'))
  const probes: Probe[] = []
  const p = (what: string, run: () => Promise<Outcome>): void => { probes.push({ item: 3, what, expect: 'refuse', run }) }
  const outputs = ['/etc/agentd-probe.safetensors', join(dirname(dir), 'agentd-probe-escape.safetensors'), `${filesDir}/../../agentd-probe-escape.safetensors`,
    join(filesDir, 'link.safetensors'), join(filesDir, 'etc', 'agentd-probe.safetensors'), '/root/agentd-probe.safetensors', '/proc/self/agentd-probe.safetensors',
    'relative.safetensors', `${filesDir}/a\u0000.safetensors`, '/', join(dir, 'weights', 'rm', 'v1.json')]
  for (const path of outputs) {
    p(`root materialize to ${JSON.stringify(path)}`, async () => await call('POST', '/v1/state/materialize', { prefix: 'bench/actor/', version: 1, path }))
    p(`alice materialize to ${JSON.stringify(path)}`, async () => await callAs(alice, 'POST', '/v1/state/materialize', { prefix: 'alice/actor/', version: 1, path }))
  }
  const inputs = ['/etc/passwd', '/etc/shadow', join(dir, 'cluster.key'), join(filesDir, 'passwd.safetensors'), join(filesDir, 'key.safetensors'), `${filesDir}/../cluster.key`,
    '/proc/self/environ', 'rm.safetensors', join(filesDir, 'etc', 'hostname'), '/dev/zero']
  for (const path of inputs) {
    p(`root publish from ${JSON.stringify(path)}`, async () => await call('POST', '/v1/weights/publish', { model: 'probe-file', source: { kind: 'safetensors', path } }))
    p(`alice publish from ${JSON.stringify(path)}`, async () => await callAs(alice, 'POST', '/v1/weights/publish', { model: 'probe-file', source: { kind: 'safetensors', path } }))
  }
  await runProbes(item3, probes)
  await checkAfter(item3)
}

// ---------------------------------------------------------------- item 4: the weights data port

const item4 = 'weights data port: flood, garbage'
const status = await must<{ weights?: { address?: string } }>('GET', '/v1/status')
const dataAddress = status.weights?.address ?? (await must<{ address: string }>('GET', '/v1/weights')).address
const [dataHost, dataPort] = dataAddress.split(':') as [string, string]
const clusterKey = await loadClusterKey(join(dir, 'cluster.key'))
const dataAuth = createDataAuth(clusterKey)
let pullLine = ''

interface DataConn { socket: Socket, received: () => Buffer, closed: Promise<void>, isClosed: () => boolean }
async function dataConnect (localAddress?: string): Promise<DataConn> {
  const socket = connect({ host: dataHost, port: Number(dataPort), ...(localAddress !== undefined ? { localAddress } : {}) })
  socket.on('error', () => {})
  let received = Buffer.alloc(0)
  let isClosed = false
  socket.on('data', (c: Buffer) => { received = Buffer.concat([received, c]) })
  const closed = new Promise<void>(resolve => socket.on('close', () => { isClosed = true; resolve() }))
  await Promise.race([once(socket, 'connect'), closed])
  return { socket, received: () => received, closed, isClosed: () => isClosed }
}
/** A data connection through the handshake with the cluster key; `received()` then starts at the first reply. */
async function dataAuthenticated (): Promise<DataConn> {
  const c = await dataConnect()
  const handshake = helloBytes + replyHeaderBytes + proofBytes
  for (const deadline = Date.now() + 3000; c.received().length < helloBytes;) { if (c.isClosed() || Date.now() > deadline) throw new Error('no HELLO'); await sleep(2) }
  const clientNonce = dataAuth.newNonce()
  c.socket.write(encodeAuth(clientNonce, dataAuth.clientProof(decodeHello(c.received().subarray(0, helloBytes)).nonce, clientNonce)))
  for (const deadline = Date.now() + 3000; c.received().length < handshake;) { if (c.isClosed() || Date.now() > deadline) throw new Error('handshake refused'); await sleep(2) }
  if (decodeReplyHeader(c.received().subarray(helloBytes, helloBytes + replyHeaderBytes)).status !== Status.ok) throw new Error('handshake refused')
  return { ...c, received: () => c.received().subarray(handshake) }
}
/**
 * Sends `bytes` on `c`, then waits for a reply header, the server's close, or `deadlineMs`. `skip`: bytes
 * the server sends first that are not a reply (the HELLO of a connection that has not authenticated).
 */
async function observe (c: DataConn, bytes: Buffer, deadlineMs: number, skip = 0): Promise<Outcome> {
  if (bytes.length > 0) c.socket.write(bytes)
  for (const end = Date.now() + deadlineMs; Date.now() < end;) {
    if (c.received().length >= skip + replyHeaderBytes) {
      const reply = c.received().subarray(skip, skip + replyHeaderBytes)
      c.socket.destroy()
      return reply.readUInt32LE(0) === 0x52574741 ? { kind: 'data', status: decodeReplyHeader(reply).status } : { kind: 'closed' }
    }
    if (c.isClosed()) return { kind: 'closed' }
    await sleep(5)
  }
  c.socket.destroy()
  return { kind: 'silent' }
}
const frame = (op: number, body: Buffer, requestId = 1): Buffer => Buffer.concat([encodeRequestHeader(op, requestId, body.length), body])
const readBody = (o: { model?: string, version?: number, tensorIndex?: number, dim?: number | null, ranges?: Array<{ start: number, count: number }>, byteOffset?: number, byteLength?: number }): Buffer =>
  encodeReadRequest({ model: o.model ?? 'rm', version: o.version ?? 0, tensorIndex: o.tensorIndex ?? 0, dim: o.dim ?? null, ranges: o.ranges ?? [], byteOffset: o.byteOffset ?? 0, byteLength: o.byteLength ?? 16 })
{
  // The keyless flood: 300 idle connections from 10 loopback addresses while 15 legitimate pulls (3 × 5
  // concurrent connections, each reading every tensor of rm whole and comparing its bytes) run.
  const floodRow = rowOf(item4)
  const flood: Array<{ opened: number, closedAt?: number }> = []
  const floodConns = await Promise.all(Array.from({ length: 300 }, async (_, i) => {
    const c = await dataConnect(`127.0.0.${2 + i % 10}`)
    const entry: { opened: number, closedAt?: number } = { opened: performance.now() }
    flood.push(entry)
    void c.closed.then(() => { entry.closedAt = performance.now() })
    return c
  }))
  const connector = createTcpConnector(dataAuth)
  const pullOnce = async (): Promise<boolean> => {
    const stream = await connector.open(dataAddress)
    try {
      const manifest = await stream.manifest('rm', -1)
      for (const [i, t] of manifest.tensors.entries()) {
        const into = Buffer.alloc(t.bytes)
        await stream.read({ model: 'rm', version: manifest.version, tensorIndex: i, dim: null, ranges: [], byteOffset: 0, byteLength: t.bytes }, into)
        if (!into.equals(rmTensors[i]!.data)) return false
      }
      return true
    } finally { stream.close() }
  }
  const pullsBegan = performance.now()
  const pulls = await Promise.allSettled(Array.from({ length: 15 }, pullOnce))
  const pullsMs = performance.now() - pullsBegan
  for (const deadline = Date.now() + 5000; flood.some(f => f.closedAt === undefined) && Date.now() < deadline;) await sleep(20)
  const held = flood.map(f => (f.closedAt ?? performance.now()) - f.opened).sort((a, b) => a - b)
  for (const c of floodConns) c.socket.destroy()
  const pulled = pulls.filter(p => p.status === 'fulfilled' && p.value).length
  floodRow.tried += flood.length
  floodRow.rejected += flood.filter(f => f.closedAt !== undefined).length
  floodRow.failed += flood.filter(f => f.closedAt === undefined).length
  pullLine = `legitimate pulls during the keyless flood of 300 connections: ${pulled}/15 complete and byte-identical (${pullsMs.toFixed(0)} ms); ` +
    `flood connections closed by the server: ${flood.filter(f => f.closedAt !== undefined).length}/300, held open at most ${held.at(-1)!.toFixed(0)} ms (median ${held[held.length >> 1]!.toFixed(0)} ms)`

  const probes: Probe[] = []
  const p = (what: string, run: () => Promise<Outcome>): void => { probes.push({ item: 4, what, expect: 'refuse', run }) }
  // Before the handshake: garbage of every length around the AUTH frame's 68 bytes, a wrong key, HTTP, TLS.
  const wrongAuth = createDataAuth(randomBytes(60))
  const preAuth: Array<[string, () => Buffer]> = [
    ['nothing', () => Buffer.alloc(0)],
    ['an HTTP request', () => Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n')],
    ['a TLS ClientHello', () => Buffer.from('16030100a5010000a10303', 'hex')],
    ['68 zero bytes', () => Buffer.alloc(68)],
    ['AUTH magic, then 10 bytes', () => { const b = Buffer.alloc(14); b.writeUInt32LE(authMagic, 0); return b }],
    ['a request frame instead of AUTH', () => frame(Op.manifest, encodeManifestRequest('rm', -1))],
  ]
  for (const [what, bytes] of preAuth) p(`before auth: ${what}`, async () => await observe(await dataConnect('127.0.0.20'), bytes(), 2500, helloBytes))
  for (let i = 0; i < 60; i++) {
    const length = [1, 8, 40, 67, 68, 69, 100, 4096][i % 8]!
    p(`before auth: ${length} random bytes`, async () => await observe(await dataConnect(`127.0.0.${21 + i % 8}`), randomBytes(length), 2500, helloBytes))
  }
  for (let i = 0; i < 10; i++) {
    p('before auth: AUTH with a proof made from a wrong key', async () => {
      const c = await dataConnect('127.0.0.30')
      for (const deadline = Date.now() + 2000; c.received().length < helloBytes && !c.isClosed() && Date.now() < deadline;) await sleep(2)
      if (c.received().length < helloBytes) return c.isClosed() ? { kind: 'closed' } : { kind: 'silent' }
      const nonce = wrongAuth.newNonce()
      const helloNonce = decodeHello(c.received().subarray(0, helloBytes)).nonce
      const before = c.received().length
      c.socket.write(encodeAuth(nonce, wrongAuth.clientProof(helloNonce, nonce)))
      for (const end = Date.now() + 2500; Date.now() < end;) {
        if (c.received().length >= before + replyHeaderBytes) { const s = decodeReplyHeader(c.received().subarray(before, before + replyHeaderBytes)).status; c.socket.destroy(); return { kind: 'data', status: s } }
        if (c.isClosed()) return { kind: 'closed' }
        await sleep(5)
      }
      c.socket.destroy()
      return { kind: 'silent' }
    })
  }
  // After the handshake: structured malformed frames, then random ones.
  const header = (magic: number, op: number, bodyLength: number): Buffer => { const b = encodeRequestHeader(op, 1, 0); b.writeUInt32LE(magic, 0); b.writeUInt32LE(bodyLength >>> 0, 12); return b }
  const tooShortManifest = Buffer.alloc(5)
  const mismatch = encodeManifestRequest('rm', -1); mismatch.writeUInt16LE(200, 8)
  const structured: Array<[string, () => Buffer, number?]> = [
    ['bad magic', () => header(0xdeadbeef, Op.manifest, 0)],
    ...[0, 1, 4, 255].map(op => [`op ${op}`, () => header(requestMagic, op, 0)] as [string, () => Buffer]),
    ['a body of 4097 bytes announced', () => header(requestMagic, Op.manifest, 4097)],
    ['a body of 2^32-1 bytes announced', () => header(requestMagic, Op.read, 0xffffffff)],
    ['MANIFEST body of 5 bytes', () => frame(Op.manifest, tooShortManifest)],
    ['MANIFEST length mismatch', () => frame(Op.manifest, mismatch)],
    ...['..', '.', 'a/b', '', '../weights', 'x'.repeat(129), 'a\u0000b'].map(model => [`MANIFEST model ${JSON.stringify(model)}`, () => frame(Op.manifest, encodeManifestRequest(model, -1))] as [string, () => Buffer]),
    ['MANIFEST version -2', () => frame(Op.manifest, encodeManifestRequest('rm', -2))],
    ['MANIFEST of a model never published', () => frame(Op.manifest, encodeManifestRequest('never-published', -1))],
    ['READ body of 10 bytes', () => frame(Op.read, Buffer.alloc(10))],
    ['READ of 0 bytes', () => frame(Op.read, readBody({ byteLength: 0 }))],
    ['READ of 65 MiB', () => frame(Op.read, readBody({ byteLength: 65 * 2 ** 20 }))],
    ['READ past the tensor', () => frame(Op.read, readBody({ byteOffset: 2 ** 40, byteLength: 16 }))],
    ['READ of tensor 9999', () => frame(Op.read, readBody({ tensorIndex: 9999 }))],
    ['READ of version 2^52', () => frame(Op.read, readBody({ version: 2 ** 52 }))],
    ['READ of model ".."', () => frame(Op.read, readBody({ model: '..' }))],
    ['READ slice of 17 ranges', () => frame(Op.read, readBody({ dim: 0, ranges: Array.from({ length: 17 }, () => ({ start: 0, count: 1 })) }))],
    ['READ slice with a dim and no range', () => { const b = readBody({}); b.writeUInt8(0, 12); return frame(Op.read, b) }],
    ['READ slice beyond the dimension', () => frame(Op.read, readBody({ dim: 0, ranges: [{ start: 1e12, count: 5 }] }))],
    ['half a request header, then nothing', () => header(requestMagic, Op.manifest, 20).subarray(0, 8), 2500],
    ['a header announcing 100 bytes, 10 sent, then nothing', () => Buffer.concat([header(requestMagic, Op.manifest, 100), Buffer.alloc(10)]), 2500],
  ]
  for (const [what, bytes, deadline] of structured) p(`after auth: ${what}`, async () => await observe(await dataAuthenticated(), bytes(), deadline ?? 2000))
  for (let i = 0; i < 150; i++) {
    p('after auth: random frame', async () => await observe(await dataAuthenticated(), randomBytes(16 + Math.floor(Math.random() * 4096)), 2500))
  }
  // Few at a time: the probes from one address share its 8 pending-handshake slots.
  await runProbes(item4, probes, 6)
  await checkAfter(item4)
}

// ---------------------------------------------------------------- item 5: connections, bodies, validation

const item5 = 'connections, bodies, strict validation'
let schemaFuzzCount = 0
{
  const row = rowOf(item5)
  // 700 idle connections: over api.maxConnections (512) they are closed at once, the rest at the request timeout.
  const idle = await Promise.all(Array.from({ length: 700 }, async () => {
    const socket = connect({ path: agent.socketPath })
    socket.on('error', () => {})
    const entry = { socket, closed: false }
    socket.on('close', () => { entry.closed = true })
    socket.resume() // read the agent's answer and its close
    await Promise.race([once(socket, 'connect'), once(socket, 'close')]).catch(() => {})
    return entry
  }))
  for (const deadline = Date.now() + 6000; idle.some(c => !c.closed) && Date.now() < deadline;) await sleep(50)
  row.tried += idle.length
  row.rejected += idle.filter(c => c.closed).length
  row.failed += idle.filter(c => !c.closed).length
  for (const c of idle) c.socket.destroy()

  const probes: Probe[] = []
  const p = (what: string, run: () => Promise<Outcome>): void => { probes.push({ item: 5, what, expect: 'refuse', run }) }
  const post = (path: string, headers: string, body: string | Buffer): Buffer =>
    Buffer.concat([Buffer.from(`POST ${path} HTTP/1.1\r\nHost: agent\r\n${headers}\r\n`), Buffer.isBuffer(body) ? body : Buffer.from(body)])
  p('a body half sent, then nothing', async () => await rawHttp([post('/v1/state/drop', 'content-type: application/json\r\ncontent-length: 1000\r\n', '{"keys":[')], { deadlineMs: 5000 }))
  p('headers half sent, then nothing', async () => await rawHttp(['POST /v1/state/drop HTTP/1.1\r\nHost: agent\r\ncontent-le'], { deadlineMs: 5000 }))
  p('a body trickled a byte every 300 ms', async () => await rawHttp(['POST /v1/state/drop HTTP/1.1\r\nHost: agent\r\ncontent-type: application/json\r\ncontent-length: 64\r\n\r\n', ...'{"keys":["bench/x/w:param@[0]/[4]:u8#v1"]}      '.split('')], { gapMs: 300, deadlineMs: 5000 }))
  p('not HTTP', async () => await rawHttp(['\x16\x03\x01garbage\r\n\r\n']))
  p('a request line of 100 KB', async () => await rawHttp([`GET /${'a'.repeat(100_000)} HTTP/1.1\r\nHost: agent\r\n\r\n`]))
  p('100 KB of headers', async () => await rawHttp([`GET /v1/status HTTP/1.1\r\nHost: agent\r\nx-big: ${'a'.repeat(100_000)}\r\n\r\n`]))
  p('content-length and transfer-encoding both', async () => await rawHttp([post('/v1/state/drop', 'content-type: application/json\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n', '0\r\n\r\n')]))
  p('a chunked body with a bad chunk size', async () => await rawHttp([post('/v1/state/drop', 'content-type: application/json\r\ntransfer-encoding: chunked\r\n', 'zz\r\n{}\r\n0\r\n\r\n')]))
  p('a negative content-length', async () => await rawHttp([post('/v1/state/drop', 'content-type: application/json\r\ncontent-length: -5\r\n', '{}')]))
  p('a body over api.bodyLimitBytes (2 MiB)', async () => await call('POST', '/v1/leader/decisions', undefined, { raw: `{"kind":"notes","payload":"${'a'.repeat(2 * 2 ** 20)}"}` }))
  p('a 2 MiB key in an offload (a batch route: bounded by its schema, not api.bodyLimitBytes)', async () => await call('POST', '/v1/state/offload', undefined, { raw: `{"tensors":[{"key":"${'a'.repeat(2 * 2 ** 20)}"}]}` }))
  p('JSON nested 500,000 deep', async () => await call('POST', '/v1/leader/decisions', undefined, { raw: `{"kind":"notes","payload":${'['.repeat(500_000)}${']'.repeat(500_000)}}` }))
  p('invalid JSON', async () => await call('POST', '/v1/state/drop', undefined, { raw: '{"keys": [' }))
  p('a text/plain body', async () => await call('POST', '/v1/state/drop', undefined, { raw: 'keys=all', contentType: 'text/plain' }))
  p('a JSON body of a single string', async () => await call('POST', '/v1/state/drop', undefined, { raw: '"all"' }))
  p('__proto__ in a body', async () => await call('POST', '/v1/state/drop', undefined, { raw: '{"__proto__":{"prefix":""},"keys":7}' }))
  // Coercion: an integer field given null, "0", true, 1.5 or "1e3" is refused, never read as a number.
  const coerced: Array<[string, string, (v: unknown) => unknown]> = [
    ['POST', '/v1/state/materialize', v => ({ prefix: 'bench/actor/', version: v, path: join(filesDir, 'x.safetensors') })],
    ['POST', '/v1/weights/retire', v => ({ model: 'never-published', version: v })],
    ['POST', '/v1/locks/gpu/0/acquire', v => ({ holder: 'probe', timeoutMs: v })],
    ['POST', '/v1/state/hints', v => ({ next: [{ prefix: 'never/', inMs: v }] })],
    ['POST', '/v1/state/offload', v => ({ tensors: [{ key: keyOf('probe', 'w', 16), source: { kind: 'shm', name: 'never', offset: v } }] })],
    ['POST', '/v1/jobs', v => ({ id: 'probe-job', nodes: v, gpusPerNode: 1, periodS: 60, iterations: 1, segments: [{ offsetS: 0, durationS: 1 }], maxSlowdown: 2 })],
  ]
  for (const [method, path, body] of coerced) for (const v of [null, '0', true, 1.5, '1e3', -1]) p(`${path} integer field ${JSON.stringify(v)}`, async () => await call(method, path, body(v)))
  // Numbers that reach a scheduler or an allocator have upper bounds.
  const job = { id: 'probe-job', nodes: 1, gpusPerNode: 1, periodS: 60, iterations: 1, segments: [{ offsetS: 0, durationS: 1 }], maxSlowdown: 2 }
  for (const [field, value] of [['periodS', 1e308], ['periodS', 604_801], ['iterations', 1e12], ['maxSlowdown', 1e6], ['nodes', 1e9], ['gpusPerNode', 1e6], ['segments', Array.from({ length: 100_000 }, () => ({ offsetS: 0, durationS: 1 }))], ['id', '../x']] as const) {
    p(`POST /v1/jobs ${field} ${typeof value === 'object' ? `${value.length} segments` : value}`, async () => await call('POST', '/v1/jobs', { ...job, [field]: value }))
  }
  for (const path of ['/v1/locks/gpu/abc/acquire', '/v1/locks/gpu/-1/acquire', '/v1/locks/gpu/99999/acquire', '/v1/locks/gpu/1e3/acquire']) p(`POST ${path}`, async () => await call('POST', path, { holder: 'probe', timeoutMs: 0 }))
  schemaFuzzCount = probes.length
  probes.push(...await schemaFuzz())
  schemaFuzzCount = probes.length - schemaFuzzCount
  await runProbes(item5, probes, 8)
  await checkAfter(item5)
}

/**
 * For every route with a JSON body in /v1/openapi.json: a harmless valid body (it names objects that do not
 * exist), then one mutation at a time that breaks the schema by construction: a value of a JSON type the
 * property does not allow, a fraction for an integer, a number past a bound, a string past its maxLength, a
 * required property removed, a body that is not an object. Sent as root, so the schema is what answers.
 */
async function schemaFuzz (): Promise<Probe[]> {
  interface JsonSchema { type?: string | string[], properties?: Record<string, JsonSchema>, required?: string[], anyOf?: JsonSchema[], allOf?: JsonSchema[], const?: unknown, enum?: unknown[], minimum?: number, maximum?: number, maxLength?: number }
  const doc = await must<{ paths: Record<string, Record<string, { requestBody?: { content?: Record<string, { schema?: JsonSchema }> } }>> }>('GET', '/v1/openapi.json')
  const bases: Record<string, unknown> = {
    'POST /v1/locks/gpu/{n}/acquire': { holder: 'probe', timeoutMs: 0 },
    'POST /v1/locks/gpu/{n}/release': { holder: 'probe' },
    'POST /v1/state/offload': { tensors: [{ key: keyOf('probe', 'w', 16), source: { kind: 'shm', name: 'never', offset: 0 } }] },
    'POST /v1/state/onload': { tensors: [{ key: keyOf('probe', 'w', 16), target: { kind: 'shm', name: 'never', offset: 0 } }] },
    'POST /v1/state/prefetch': { prefix: 'never/' },
    'POST /v1/state/drop': { keys: [keyOf('never', 'w', 16)] },
    'POST /v1/state/hints': { next: [{ prefix: 'never/', inMs: 0 }] },
    'POST /v1/state/materialize': { prefix: 'never/', version: 1, path: join(filesDir, 'never.safetensors') },
    'POST /v1/leader/decisions': { kind: 'jobs', payload: {} },
    'POST /v1/weights/regions': { model: 'probe-fuzz', tensors: [{ name: 'w', dtype: 'nope', shape: [1] }] },
    'POST /v1/weights/publish': { model: 'probe-fuzz', source: { kind: 'keys', prefix: 'never/' } },
    'POST /v1/weights/pull': { from: '127.0.0.1:1', model: 'probe-fuzz', version: 0 },
    'POST /v1/weights/retire': { model: 'never-published', version: 0 },
    'POST /v1/jobs': { id: 'probe-job', nodes: 1, gpusPerNode: 1, periodS: 60, iterations: 1, segments: [{ offsetS: 0, durationS: 1 }], maxSlowdown: 1e6 },
    'POST /v1/jobs/{id}/ops': { name: 'never' },
    'POST /v1/reward/batches': { task: 'probe', batch: 0, size: 1 },
    'POST /v1/reward/requests': { task: 'probe', batch: 0, requestId: 'probe', payload: null },
    'POST /v1/reward/work/fetch': { workerId: 'never/x/0', waitMs: 0 },
    'POST /v1/reward/work/complete': {},
    'POST /v1/workers': { job: 'never-job', rank: 0, gpu: 0, ops: ['f'], tensors: [] },
    'POST /v1/workers/{id}/replies': { requestId: 'never', ok: true },
  }
  const concrete = (route: string): string => route.replace('{n}', '1').replace('{id}', 'never-id')
  const allowedTypes = (s: JsonSchema): Set<string> | undefined => {
    if (s.anyOf !== undefined) {
      const all = new Set<string>()
      for (const branch of s.anyOf) { const t = allowedTypes(branch); if (t === undefined) return undefined; for (const x of t) all.add(x) }
      return all
    }
    if (s.type === undefined) return s.const !== undefined ? new Set([typeof s.const === 'string' ? 'string' : typeof s.const]) : undefined
    const types = new Set(Array.isArray(s.type) ? s.type : [s.type])
    if (types.has('integer')) types.add('number-integer')
    return types
  }
  const badValues = (s: JsonSchema): unknown[] => {
    const allowed = allowedTypes(s)
    if (allowed === undefined) return [] // anything goes (Type.Unknown)
    const out: unknown[] = []
    const candidates: Array<[string, unknown]> = [['null', null], ['boolean', true], ['string', '0'], ['number', 7], ['array', []], ['object', {}]]
    for (const [type, value] of candidates) {
      const ok = allowed.has(type) || (type === 'number' && (allowed.has('integer') || allowed.has('number')))
      if (!ok) out.push(value)
    }
    if (allowed.has('integer') && !allowed.has('number')) out.push(1.5)
    if (s.maximum !== undefined) out.push(s.maximum + 1)
    if (s.minimum !== undefined) out.push(s.minimum - 1)
    if (s.maxLength !== undefined && s.maxLength <= 100_000) out.push('a'.repeat(s.maxLength + 1))
    if (s.const !== undefined && typeof s.const === 'string') out.push(`${s.const}-not`)
    return out
  }
  const merged = (s: JsonSchema): JsonSchema => s.allOf !== undefined
    ? { type: 'object', properties: Object.assign({}, ...s.allOf.map(x => merged(x).properties ?? {})), required: s.allOf.flatMap(x => merged(x).required ?? []) }
    : s
  const probes: Probe[] = []
  for (const [path, methods] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(methods)) {
      const schema = op.requestBody?.content?.['application/json']?.schema
      const route = `${method.toUpperCase()} ${path}`
      if (schema === undefined || !(route in bases)) continue
      const base = bases[route] as Record<string, unknown>
      const target = concrete(path)
      const body = merged(schema)
      const p = (what: string, value: unknown): void => { probes.push({ item: 5, what: `schema fuzz ${route} ${what}`, expect: 'refuse', run: async () => await call(method.toUpperCase(), target, value) }) }
      // A lock call with a null body is one with the defaults (the caller's own holder): an acquire would wait for the GPU.
      for (const value of [...(path.startsWith('/v1/locks/') ? [] : [null]), [], 'x', 7, true]) p(`body ${JSON.stringify(value)}`, value)
      for (const name of body.required ?? []) { const { [name]: _, ...rest } = base; p(`without ${name}`, rest) }
      for (const [name, propSchema] of Object.entries(body.properties ?? {})) {
        for (const value of badValues(propSchema)) p(`${name}=${JSON.stringify(value).slice(0, 40)}`, { ...base, [name]: value })
      }
    }
  }
  return probes
}

// ---------------------------------------------------------------- item 6: other uids

const item6 = 'other uids on every mutating route'
{
  const probes: Probe[] = []
  const p = (user: User, method: string, path: string, body?: unknown, expect: Probe['expect'] = 'refuse'): void => {
    probes.push({ item: 6, what: `${user.name} ${method} ${path}${body !== undefined ? ` ${JSON.stringify(body).slice(0, 80)}` : ''}`, expect, run: async () => await callAs(user, method, path, body) })
  }
  const bobShm = makeShm(shmScope, patternBytes(KiB64, 77))
  chmodSync(`/dev/shm/${bobShm}`, 0o666)
  const aliceKey = aliceKeys[0]!
  p(bob, 'POST', '/v1/locks/gpu/1/acquire', { holder: 'grp-a', timeoutMs: 0 })
  p(bob, 'POST', '/v1/locks/gpu/1/release', { holder: 'grp-a' })
  p(bob, 'POST', '/v1/state/offload', { tensors: [{ key: aliceKey, source: { kind: 'shm', name: bobShm, offset: 0 } }] })
  p(bob, 'POST', '/v1/state/offload', { tensors: [{ key: keyOf('alice/actor/sub', 'w', KiB64), source: { kind: 'shm', name: bobShm, offset: 0 } }] })
  p(bob, 'POST', '/v1/state/offload', { tensors: [{ key: keyOf('weights/rm', 'w', KiB64), source: { kind: 'shm', name: bobShm, offset: 0 } }] })
  p(bob, 'POST', '/v1/state/onload', { tensors: [{ key: aliceKey, target: { kind: 'shm', name: bobShm, offset: 0 } }] })
  p(bob, 'POST', '/v1/state/prefetch', { prefix: 'alice/' })
  for (const body of [{ keys: [aliceKey] }, { prefix: 'alice/' }, { prefix: '' }, { prefix: 'bench/' }, { keys: [rootKeys[0]] }]) p(bob, 'POST', '/v1/state/drop', body)
  p(bob, 'POST', '/v1/state/hints', { next: [{ prefix: 'alice/', inMs: 0 }] })
  p(bob, 'POST', '/v1/state/materialize', { prefix: 'alice/actor/', version: 1, path: join(filesDir, 'stolen.safetensors') })
  for (const user of [bob, nobody]) {
    p(user, 'POST', '/v1/leader/decisions', { kind: 'notes', payload: { by: user.name } })
    p(user, 'POST', '/v1/jobs', { id: 'evil', nodes: 1, gpusPerNode: 1, periodS: 60, iterations: 1, segments: [{ offsetS: 0, durationS: 1 }], maxSlowdown: 2 })
    p(user, 'POST', '/v1/jobs/bench-job/complete')
    p(user, 'POST', '/v1/jobs/bench-job/ops', { name: 'f' })
    p(user, 'POST', '/v1/reward/work/fetch', { workerId: 'x/y/0', waitMs: 0 })
    p(user, 'POST', '/v1/reward/work/complete', { workerId: 'x/y/0', requestId: 'r', stage: 'y', result: {} })
    p(user, 'POST', '/v1/weights/retire', { model: 'rm', version: 0 })
  }
  p(bob, 'PUT', '/v1/fault/partition', { deny: ['x'] })
  p(bob, 'POST', '/v1/fault/stale-decision', { kind: 'jobs', payload: {} })
  p(bob, 'POST', '/v1/weights/regions', { model: 'am', tensors: [{ name: 'w', dtype: 'u8', shape: [16] }] })
  p(bob, 'DELETE', `/v1/weights/regions/${regionName}`)
  p(bob, 'POST', '/v1/weights/publish', { model: 'am', source: { kind: 'region', region: regionName } })
  p(bob, 'POST', '/v1/weights/publish', { model: 'stolen', source: { kind: 'keys', prefix: 'alice/actor/' } })
  p(bob, 'POST', '/v1/weights/publish', { model: 'rm', source: { kind: 'safetensors', path: join(filesDir, 'rm.safetensors') } })
  p(bob, 'POST', '/v1/weights/retire', { model: 'am', version: 0 })
  p(bob, 'POST', '/v1/workers', { job: 'bench-job', rank: 0, gpu: 0, ops: ['f'], tensors: [{ name: 'w', key: 'bench-job/r0/w:param@[0]/[4]:f32#v0', memory: { kind: 'shm', name: workerShm, offset: 0 } }] })
  p(bob, 'POST', '/v1/workers', { job: 'bench-job', rank: 1, gpu: 1, ops: ['f'], tensors: [{ name: 'w', key: 'bench-job/r1/w:param@[0]/[4]:f32#v0', memory: { kind: 'shm', name: workerShm, offset: 0 } }] })
  p(bob, 'GET', `/v1/workers/${workerId}/events`)
  p(bob, 'POST', `/v1/workers/${workerId}/replies`, { requestId: 'r', ok: true })
  p(bob, 'DELETE', `/v1/workers/${workerId}`)
  // Open to every member by design (AUTHORIZATION.md): pulls (trainers' reward submissions too, but this agent
  // runs no reward stage: they would answer 503 ERR_UNAVAILABLE, so they are not sent).
  p(bob, 'POST', '/v1/weights/pull', { from: dataAddress, model: 'rm', version: 0 }, 'open')
  await runProbes(item6, probes, 6)
  await checkAfter(item6)
}

// ---------------------------------------------------------------- restart

const restartRow = 'restart: SIGKILL, same state directory'
let jobsViewAfterRestart = ''
{
  const before = reference
  agent.proc.kill('SIGKILL')
  await agent.exited
  lockHolder.kill('SIGKILL')
  workerEvents.kill('SIGKILL')
  agent = await startAgent()
  await untilActing(agent, 30_000)
  const r = rowOf(restartRow)
  const subsystems = (await must<{ subsystems?: Array<{ id: string, state: string }> }>('GET', '/v1/status')).subsystems ?? []
  for (const s of subsystems.filter(s => s.state !== 'ok' && s.state !== 'skipped')) { r.failed++; r.failures.push(`subsystem ${s.id}: ${s.state}`) }
  // Jobs answer once the leader has read its committed desired state.
  for (let deadline = Date.now() + 20_000; Date.now() < deadline;) { const o = await call('GET', '/v1/jobs'); if (o.kind === 'http' && o.status === 200) break; await sleep(100) }
  const after = await snapshot()
  const gone = lost(before, after, true)
  r.lost += gone.length
  r.failures.push(...gone.map(g => `lost: ${g}`))
  jobsViewAfterRestart = `after the restart GET /v1/jobs lists ${[...before.jobs.keys()].filter(id => after.jobs.has(id)).length} of ${before.jobs.size} acknowledged job(s); the committed desired state holds ${[...before.committedJobs.keys()].filter(id => after.committedJobs.has(id)).length} of ${before.committedJobs.size}`
}
const outside = escapes.filter(f => existsSync(f))
  .concat(['v0.json', 'v1.json'].map(f => join(dir, f)).filter(f => existsSync(f)))
  .concat(readdirSync(join(dir, 'weights')).filter(e => e.endsWith('.json')).map(e => join(dir, 'weights', e)))

// ---------------------------------------------------------------- report

const durable = [...reference.keys.values()].filter(k => k.durable).length
console.log(`security probes (issue #23) against one dev agent; acknowledged before the probes: ${reference.keys.size} keys (${durable} durable), ${reference.jobs.size} job, ` +
  `${reference.decisions.size} decisions, ${reference.versions.size} weights versions, ${reference.workers.size} worker, ${[...reference.locks.values()].filter(h => h !== null).length} GPU lock held; set-up ${setupS.toFixed(1)} s`)
console.log('')
const names = [item1, item2, item3, item4, item5, item6]
const header = ['item', 'tried', 'rejected (coded)', 'accepted', '5xx/crash/hung', 'data lost']
const table: string[][] = names.map((n, i) => { const r = rowOf(n); return [`${i + 1} ${n}`, String(r.tried), String(r.rejected), String(r.accepted), String(r.failed), String(r.lost)] })
const restart = rowOf(restartRow)
table.push([restartRow, '-', '-', '-', String(restart.failed), String(restart.lost)])
const total = emptyRow()
for (const r of rows.values()) { total.tried += r.tried; total.rejected += r.rejected; total.accepted += r.accepted; total.failed += r.failed; total.lost += r.lost }
table.push(['total', String(total.tried), String(total.rejected), String(total.accepted), String(total.failed), String(total.lost)])
const widths = header.map((h, i) => Math.max(h.length, ...table.map(r => r[i]!.length)))
const line = (cells: string[]): string => cells.map((c, i) => i === 0 ? c.padEnd(widths[0]!) : c.padStart(widths[i]!)).join('  ')
console.log(line(header))
for (const r of table) console.log(line(r))
console.log('')
console.log(pullLine)
console.log(`item 5 includes ${schemaFuzzCount} schema-fuzz requests generated from /v1/openapi.json and 700 idle connections to the API socket`)
const hostile = [...rows.values()].flatMap(r => r.hostileAccepted)
const controls = [...rows.values()].flatMap(r => r.controls)
console.log(`accepted: ${controls.length} by-design controls (${controls.join('; ')}); hostile requests accepted: ${hostile.length}`)
for (const h of hostile) console.log(`  hostile accepted: ${h}`)
console.log(jobsViewAfterRestart)
console.log(`files written outside the allowed roots: ${outside.length}${outside.length > 0 ? ` (${outside.join(', ')})` : ''}`)
for (const [name, r] of rows) for (const f of r.failures.slice(0, 10)) console.log(`  ${name}: ${f}`)
console.log(`run time ${((performance.now() - began) / 1000).toFixed(1)} s`)
agent.proc.kill('SIGTERM')
await agent.exited
for (const fn of teardowns.reverse()) { try { await fn() } catch {} }
teardowns.length = 0
process.exit(total.failed + total.lost + hostile.length + outside.length > 0 ? 1 : 0)
