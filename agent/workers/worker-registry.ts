/**
 * The workers of live jobs on this node (PROTOCOL.md): registrations, their
 * event streams, requests to them and their replies, and each (job, rank)'s
 * stored state versions in the StateManager.
 *
 * Contract:
 * - register() validates everything before it changes anything; it then
 *   copies the worker's initial state in as version 0 (all or nothing) —
 *   unless a stored version exists for the (job, rank) (a restarted worker):
 *   then the worker is registered "not current" and is onloaded before its
 *   next run. A failure leaves nothing registered and nothing stored.
 * - A worker is live from attach() (its event stream opened) until the
 *   stream closes, deregister(), or drop(); one that does not attach within
 *   attachTimeoutMs is dropped. Its death rejects its pending requests with
 *   ERR_WORKER_LOST naming the rank and is reported to onWorkerLost.
 * - request() sends one event and resolves with the worker's reply; replies
 *   must name a pending requestId (ERR_NOT_FOUND otherwise).
 * - Memory: the agent is the copy endpoint of every context switch (PlexRL
 *   §5.3). It knows where each state tensor of a worker lives (registered,
 *   then from each `allocate` reply: adoptMemory) and copies the state out
 *   (copyOut) and in (copyIn) itself; the worker only allocates and frees.
 *   CUDA IPC handles stay open while the worker holds the memory;
 *   forgetMemory() closes them, and must come before the worker frees it.
 * - Stored versions: the registry remembers, per (job, rank), the versions
 *   stored (ascending). A version is either stored bytes (`#v<version>`
 *   keys) or another name of the rank's previous version (an alias: the rank
 *   did not run since, so every rank of the job names each point of its
 *   history by the same version). The job's committed version (stored by
 *   every node of the job; the leader says so, `commit`) is the oldest
 *   rollback target: older versions are dropped, and of the newer ones the
 *   latest `keepVersions` are kept. Keys are dropped from the StateManager
 *   once no kept version names them.
 * - rollBackTo(job, v) drops every version after v (all or nothing: it
 *   refuses when a rank here holds nothing at or before v).
 */
import { randomUUID } from 'node:crypto'
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { createInputValidator } from '../../core/validate-input.ts'
import { formatKey, parseKey, type StateKey } from '../state/keys.ts'
import type { MemorySpec, StateManager } from '../state/state-manager.ts'
import { pinClientMemory } from '../state/client-memory.ts'
import type { JobsView } from '../../mesh/control/jobs/job-table.ts'
import { maxOpJsonBytes } from '../../mesh/control/jobs/op-wire.ts'
import { executionJobs, findExecutionJob, ranksOnNode } from '../../mesh/control/jobs/job-groups.ts'
import { WorkerAllocationSchema, WorkerRegistrationSchema } from '../api/wire/workers.ts'

/** A registration and an allocate reply name each state tensor once. */
const eachNameOnce = (r: { tensors: ReadonlyArray<{ name: string }> }, add: (path: string, message: string) => void): void => {
  const names = new Set<string>()
  r.tensors.forEach((t, i) => {
    if (names.has(t.name)) add(`tensors[${i}].name`, `${JSON.stringify(t.name)} appears twice`)
    names.add(t.name)
  })
}
const validator = createInputValidator(WorkerRegistrationSchema, 'ERR_BAD_REQUEST', 'worker registration', eachNameOnce)
const allocationValidator = createInputValidator(WorkerAllocationSchema, 'ERR_BAD_REQUEST', 'allocate reply', eachNameOnce)

export interface StateTensor { name: string, key: StateKey }

export interface WorkerRecord {
  id: string
  job: string
  rank: number
  gpu: number | null
  pid: number | null
  ops: ReadonlySet<string>
  tensors: readonly StateTensor[]
  /** The worker holds memory for its state (false once released). */
  holds: boolean
  /** That memory holds the job's latest state (false: stale or released; an onload comes first). */
  current: boolean
  /** Where each of `tensors` lives while the worker holds its memory (same order); null when unknown or released. */
  memory: readonly MemorySpec[] | null
  attached: boolean
}

export interface RegisterAnswer { workerId: string, job: string, rank: number, gpu: number | null, node: string, stored: { version: number } | null }

export interface WorkerView {
  workerId: string, job: string, rank: number, gpu: number | null, pid: number | null, attached: boolean,
  onDevice: boolean, storedVersions: number[], tensors: number, stateBytes: number, ops: string[]
}

export type WorkerEvent = 'allocate' | 'release' | 'run' | 'stop'

export interface WorkerReply { requestId: string, ok: boolean, result?: unknown, startedAtMs?: number, durationMs?: number, error?: { code: string, message: string } }

export interface WorkerRegistryOptions {
  selfPeerId: string
  /** Default 10000. */
  attachTimeoutMs?: number
  /** Stored versions kept per (job, rank) after the job's committed one (not yet stored by all its nodes). Default 3. */
  keepVersions?: number
}

export interface WorkerRegistryComponents {
  logger: Logger
  stateManager: Pick<StateManager, 'offload' | 'onload' | 'drop'>
  /** The job table this agent applied. */
  jobs(): JobsView
  /** A live worker's stream closed or it was dropped while attached (its job's other workers here roll back). */
  onWorkerLost(worker: WorkerRecord, why: string): void
}

export interface WorkerRegistry {
  register(body: unknown, pid: number | null): Promise<RegisterAnswer>
  /** Opens the worker's event stream: `send` writes one event; returns what to call when the stream closes. */
  attach(id: string, send: (type: WorkerEvent, data: unknown) => void): () => void
  reply(id: string, body: unknown): void
  request(worker: WorkerRecord, type: WorkerEvent, data: Record<string, unknown>): Promise<WorkerReply>
  deregister(id: string): void
  /** Drops a worker (it is told `stop`); its stored state stays. */
  drop(worker: WorkerRecord, reason: string): void
  /** The job's ranks hosted here and the local GPU of each (job-groups.ts ranksOnNode); ERR_JOB_NOT_FOUND / ERR_JOB_NOT_RUNNING when it is not placed here. */
  localRanks(job: string): { ranks: number[], gpus: Array<number | null> }
  /** The live worker of (job, rank) here, if any (registered; attached or about to). */
  live(job: string, rank: number): WorkerRecord | undefined
  /** Resolves once every registered worker of the (job, ranks) here has attached, or after timeoutMs. */
  settled(job: string, ranks: readonly number[], timeoutMs: number): Promise<void>
  liveWorkers(): WorkerRecord[]
  /** Versions (job, rank) holds here, ascending. */
  storedVersions(job: string, rank: number): readonly number[]
  /** Ranks of `job` with stored state here. */
  storedRanks(job: string): number[]
  /** The version whose keys hold the bytes of stored `version` (itself, or the one it aliases). */
  keyVersion(job: string, rank: number, version: number): number
  /** Records `version` as stored (its keys written) for the worker's (job, rank). */
  recordStored(worker: WorkerRecord, version: number): Promise<void>
  /** Records `version` as another name of the (job, rank)'s latest stored state; false when it has none. */
  recordAlias(job: string, rank: number, version: number): Promise<boolean>
  /** Every node of the job stored `version`: older versions are dropped. */
  commit(job: string, version: number): Promise<void>
  /** Drops the job's versions after `version` here; ERR_STATE_MISMATCH (nothing dropped) when a rank holds none at or before it. */
  rollBackTo(job: string, version: number): Promise<void>
  /** Keys of a state tensor at key version `version` (see keyVersion). */
  keyAt(tensor: StateTensor, version: number): string
  /** Takes the worker's `allocate` reply as where its state lives now; ERR_OPERATION_FAILED (nothing adopted) when it does not name every state tensor once. */
  adoptMemory(worker: WorkerRecord, reply: unknown): void
  /** Closes what the agent holds open on the worker's memory; call before the worker frees it (`release`). */
  forgetMemory(worker: WorkerRecord): void
  /** Copies the worker's state from its memory into the StateManager under `version`. */
  copyOut(worker: WorkerRecord, version: number): Promise<void>
  /** Copies the stored state at key version `keyVersion` (see keyVersion) into the worker's memory. */
  copyIn(worker: WorkerRecord, keyVersion: number): Promise<void>
  /** Forgets (and drops the stored state of) jobs no longer RUNNING on this node; stops their workers. */
  sweep(): Promise<void>
  list(): WorkerView[]
  stop(): void
}

interface Live extends WorkerRecord {
  send: ((type: WorkerEvent, data: unknown) => void) | null
  /** Resolved when it attaches or is removed. */
  attachedOrGone: Promise<void>
  settle(): void
  pending: Map<string, { type: WorkerEvent, resolve(r: WorkerReply): void, reject(e: AgentError): void }>
  attachTimer: NodeJS.Timeout | undefined
  gone: boolean
  /** Closes the CUDA IPC handles of `memory` the agent keeps open. */
  unpin: () => void
}

/** One stored version of a rank: `keys` is the version whose `#v` keys hold its bytes (itself unless an alias). */
interface StoredVersion { version: number, keys: number }
interface Stored { versions: StoredVersion[], tensors: readonly StateTensor[] }

const slot = (job: string, rank: number): string => `${job}#${rank}`

export function createWorkerRegistry (options: WorkerRegistryOptions, components: WorkerRegistryComponents): WorkerRegistry {
  const log = components.logger
  const attachTimeoutMs = options.attachTimeoutMs ?? 10_000
  const keep = options.keepVersions ?? 3
  const byId = new Map<string, Live>()
  const bySlot = new Map<string, Live>()
  const stored = new Map<string, Stored>()
  /** Per job: the latest version every node of it stored (0: the registered state). */
  const committed = new Map<string, number>()
  /** Registrations under way per slot: a second one at the same time is refused, not interleaved. */
  const registering = new Set<string>()

  const keyAt = (t: StateTensor, version: number): string => formatKey({ ...t.key, version })
  const jobOfSlot = (s: string): string => s.slice(0, s.lastIndexOf('#'))
  const slotsOf = (job: string): Array<[string, Stored]> => [...stored].filter(([s]) => jobOfSlot(s) === job)

  /** Drops `gone` versions of a slot, and the keys no remaining version names. */
  const dropVersions = async (entry: Stored, gone: readonly StoredVersion[]): Promise<void> => {
    if (gone.length === 0) return
    entry.versions = entry.versions.filter(v => !gone.includes(v))
    const named = new Set(entry.versions.map(v => v.keys))
    const keyVersions = [...new Set(gone.map(v => v.keys))].filter(k => !named.has(k))
    if (keyVersions.length > 0) await components.stateManager.drop({ keys: keyVersions.flatMap(k => entry.tensors.map(t => keyAt(t, k))) })
  }

  /** Keeps the version answering the job's committed one and the latest `keep` after it. */
  const retain = async (job: string, entry: Stored): Promise<void> => {
    const floor = committed.get(job) ?? 0
    const base = entry.versions.filter(v => v.version <= floor).at(-1)
    const newer = entry.versions.filter(v => v.version > floor)
    const kept = new Set([...(base !== undefined ? [base] : []), ...newer.slice(-keep)])
    await dropVersions(entry, entry.versions.filter(v => !kept.has(v)))
  }

  const remove = (w: Live, why: string, lost: boolean): void => {
    if (w.gone) return
    w.gone = true
    if (w.attachTimer !== undefined) clearTimeout(w.attachTimer)
    w.settle()
    byId.delete(w.id)
    if (bySlot.get(slot(w.job, w.rank)) === w) bySlot.delete(slot(w.job, w.rank))
    const err = new AgentError('ERR_WORKER_LOST', `rank ${w.rank} of job ${w.job} (worker ${w.id}${w.pid !== null ? `, pid ${w.pid}` : ''}) is gone: ${why}`, { details: { job: w.job, rank: w.rank, node: options.selfPeerId } })
    for (const p of w.pending.values()) p.reject(err)
    w.pending.clear()
    w.holds = false
    w.current = false
    letGoOf(w)
    log.info({ job: w.job, rank: w.rank, worker: w.id, why }, 'workers: worker gone')
    if (lost) components.onWorkerLost(w, why)
  }

  /** Closes what the agent holds open on the worker's memory and forgets where it was. */
  const letGoOf = (w: Live): void => {
    w.unpin()
    w.unpin = () => {}
    w.memory = null
  }

  const memoryOf = (w: Live, what: string): readonly MemorySpec[] => {
    if (w.gone) throw new AgentError('ERR_WORKER_LOST', `rank ${w.rank} of job ${w.job} has no live worker here`, { details: { job: w.job, rank: w.rank, node: options.selfPeerId } })
    if (w.memory === null) throw new AgentError('ERR_STATE_MISMATCH', `rank ${w.rank} of job ${w.job} holds no memory to ${what} (it was released)`, { details: { job: w.job, rank: w.rank } })
    return w.memory
  }

  /**
   * Runs one copy of the worker's whole state (`what`) between its memory and
   * the StateManager; its error names the rank, and a full pool is a full
   * tier to the caller.
   */
  const copyState = async (w: Live, what: 'offload' | 'onload', copy: (memory: readonly MemorySpec[]) => Promise<unknown>): Promise<void> => {
    const memory = memoryOf(w, what)
    if (w.tensors.length === 0) return
    try {
      await copy(memory)
    } catch (err) {
      const e = err instanceof AgentError ? err : new AgentError('ERR_INTERNAL', String((err as Error)?.message ?? err))
      const code = e.code === 'ERR_POOL_FULL' ? 'ERR_TIER_FULL' : e.code
      throw new AgentError(code, `rank ${w.rank} of job ${w.job}: the ${what} of its state failed: ${e.message}`, { cause: e, details: { job: w.job, rank: w.rank, node: options.selfPeerId, cause: e.code } })
    }
  }

  const localRanks = (job: string): { ranks: number[], gpus: Array<number | null> } => {
    const record = findExecutionJob(components.jobs().jobs, job)
    if (record === undefined) throw new AgentError('ERR_JOB_NOT_FOUND', `no job ${job} in the job table node ${options.selfPeerId} applied`)
    const index = record.nodes.indexOf(options.selfPeerId)
    if (record.state !== 'RUNNING' || index < 0) {
      throw new AgentError('ERR_JOB_NOT_RUNNING', `job ${job} is ${record.state}${record.state === 'RUNNING' ? ` on ${record.nodeNames.join(', ')}` : ''}, not on node ${options.selfPeerId}: its workers register, and its operations run, on the nodes it is placed on`)
    }
    if (record.spec.layout !== undefined) {
      throw new AgentError('ERR_BAD_REQUEST', `job ${job} runs one worker group per workflow component (${record.spec.layout.groups.map(g => `${job}.${g.component}`).join(', ')}): its workers register with their group's id`)
    }
    const here = ranksOnNode(record, index)
    return { ranks: here.map(r => r.rank), gpus: here.map(r => r.gpu) }
  }

  const registry: WorkerRegistry = {
    async register (body, pid) {
      const r = validator.parse(body, 'worker registration')
      const { ranks, gpus } = localRanks(r.job)
      if (!ranks.includes(r.rank)) throw new AgentError('ERR_BAD_REQUEST', `rank ${r.rank} of job ${r.job} is not hosted on this node (ranks ${ranks.join(', ')} are)`)
      const expectedGpu = gpus[ranks.indexOf(r.rank)]!
      if (r.gpu !== expectedGpu) throw new AgentError('ERR_BAD_REQUEST', `rank ${r.rank} of job ${r.job} runs on ${expectedGpu === null ? 'no GPU (gpu: null, a CPU-only group)' : `GPU ${expectedGpu} of this node`}, not ${r.gpu === null ? 'null' : `GPU ${r.gpu}`}`)
      const tensors: StateTensor[] = r.tensors.map((t, i) => {
        let key: StateKey
        try { key = parseKey(t.key) } catch (err) { throw new AgentError('ERR_KEY_INVALID', `tensors[${i}].key: ${(err as Error).message}`) }
        if (key.namespace !== r.job && !key.namespace.startsWith(`${r.job}/`)) throw new AgentError('ERR_KEY_INVALID', `tensors[${i}].key ${key.text}: its namespace must be the job id ${r.job} or start with "${r.job}/"`)
        if (key.version !== 0) throw new AgentError('ERR_KEY_INVALID', `tensors[${i}].key ${key.text}: register version 0; the agent numbers the versions it stores`)
        return { name: t.name, key }
      })
      const s = slot(r.job, r.rank)
      const existing = bySlot.get(s)
      if (existing !== undefined) throw new AgentError('ERR_WORKER_EXISTS', `rank ${r.rank} of job ${r.job} already has a live worker (${existing.id}${existing.pid !== null ? `, pid ${existing.pid}` : ''})`)
      if (registering.has(s)) throw new AgentError('ERR_WORKER_EXISTS', `rank ${r.rank} of job ${r.job} is being registered by another process`)
      const previous = stored.get(s)
      if (previous !== undefined) {
        const same = previous.tensors.length === tensors.length && previous.tensors.every((p, i) => p.name === tensors[i]!.name && keyAt(p, 0) === tensors[i]!.key.text)
        if (!same) throw new AgentError('ERR_STATE_MISMATCH', `rank ${r.rank} of job ${r.job} has stored state (version ${previous.versions.at(-1)?.version}) with other tensors than this registration names; register the same tensors (names, shapes, dtypes) to be loaded from it`)
      }
      const memory = r.tensors.map(t => t.memory as MemorySpec)
      registering.add(s)
      const unpin = pinClientMemory(memory)
      try {
        if (previous === undefined) {
          if (r.tensors.length > 0) await components.stateManager.offload(r.tensors.map((t, i) => ({ key: t.key, source: memory[i]! })))
          stored.set(s, { versions: [{ version: 0, keys: 0 }], tensors })
        }
        if (!localRanks(r.job).ranks.includes(r.rank)) throw new AgentError('ERR_JOB_NOT_RUNNING', `job ${r.job} left this node while rank ${r.rank} registered`)
      } catch (err) {
        unpin()
        throw err
      } finally {
        registering.delete(s)
      }
      let settle!: () => void
      const attachedOrGone = new Promise<void>(resolve => { settle = resolve })
      const w: Live = {
        id: `w-${randomUUID()}`, job: r.job, rank: r.rank, gpu: r.gpu, pid, ops: new Set(r.ops), tensors: stored.get(s)!.tensors,
        holds: true, current: previous === undefined, memory, attached: false, send: null, pending: new Map(), attachTimer: undefined, gone: false, attachedOrGone, settle, unpin,
      }
      w.attachTimer = setTimeout(() => remove(w, `its event stream did not open within ${attachTimeoutMs} ms of registering`, false), attachTimeoutMs)
      w.attachTimer.unref()
      byId.set(w.id, w)
      bySlot.set(s, w)
      log.info({ job: w.job, rank: w.rank, worker: w.id, pid, tensors: tensors.length, restored: previous?.versions.at(-1)?.version ?? null }, 'workers: registered')
      return { workerId: w.id, job: w.job, rank: w.rank, gpu: w.gpu, node: options.selfPeerId, stored: previous !== undefined && previous.versions.length > 0 ? { version: previous.versions.at(-1)!.version } : null }
    },

    attach (id, send) {
      const w = byId.get(id)
      if (w === undefined) throw new AgentError('ERR_NOT_FOUND', `no registered worker ${id} (register first; a worker that did not open its stream within ${attachTimeoutMs} ms was dropped)`)
      if (w.attached) throw new AgentError('ERR_WORKER_EXISTS', `worker ${id} already has an open event stream`)
      if (w.attachTimer !== undefined) clearTimeout(w.attachTimer)
      w.attached = true
      w.send = send
      w.settle()
      return () => remove(w, 'its event stream closed (the process exited or closed it)', true)
    },

    reply (id, body) {
      const w = byId.get(id)
      if (w === undefined) throw new AgentError('ERR_NOT_FOUND', `no live worker ${id}`)
      const b = body as Partial<WorkerReply> | null
      if (b === null || typeof b !== 'object' || typeof b.requestId !== 'string' || typeof b.ok !== 'boolean') throw new AgentError('ERR_BAD_REQUEST', 'a reply is { requestId, ok, result? | error? }')
      const p = w.pending.get(b.requestId)
      if (p === undefined) throw new AgentError('ERR_NOT_FOUND', `worker ${id} has no pending request ${b.requestId}`)
      if (b.ok && p.type === 'run') { // an operation's result is small JSON; an allocate reply is bounded by its schema
        const bytes = b.result === undefined ? 0 : Buffer.byteLength(JSON.stringify(b.result) ?? '')
        if (bytes > maxOpJsonBytes) {
          w.pending.delete(b.requestId)
          p.reject(new AgentError('ERR_OPERATION_FAILED', `rank ${w.rank} of job ${w.job} answered with ${bytes} bytes of JSON, more than ${maxOpJsonBytes}: return bulk data through the StateManager or the weights service`, { details: { job: w.job, rank: w.rank } }))
          throw new AgentError('ERR_BODY_TOO_LARGE', `result of ${bytes} bytes refused (at most ${maxOpJsonBytes})`)
        }
      }
      w.pending.delete(b.requestId)
      p.resolve(b as WorkerReply)
    },

    request (worker, type, data) {
      const w = worker as Live
      if (w.gone || w.send === null) return Promise.reject(new AgentError('ERR_WORKER_LOST', `rank ${w.rank} of job ${w.job} has no live worker here`, { details: { job: w.job, rank: w.rank, node: options.selfPeerId } }))
      const requestId = randomUUID()
      return new Promise<WorkerReply>((resolve, reject) => {
        w.pending.set(requestId, { type, resolve, reject })
        w.send!(type, { requestId, ...data })
      })
    },

    deregister (id) {
      const w = byId.get(id)
      if (w === undefined) throw new AgentError('ERR_NOT_FOUND', `no live worker ${id}`)
      remove(w, 'deregistered', true)
    },

    drop (worker, reason) {
      const w = worker as Live
      if (w.send !== null && !w.gone) w.send('stop', { requestId: randomUUID(), reason })
      remove(w, reason, false)
    },

    localRanks,
    live: (job, rank) => bySlot.get(slot(job, rank)),
    async settled (job, ranks, timeoutMs) {
      const waiting = ranks.map(r => bySlot.get(slot(job, r))).filter((w): w is Live => w !== undefined && !w.attached)
      if (waiting.length === 0) return
      let timer: NodeJS.Timeout | undefined
      await Promise.race([Promise.all(waiting.map(w => w.attachedOrGone)), new Promise<void>(resolve => { timer = setTimeout(resolve, timeoutMs) })])
      clearTimeout(timer)
    },
    liveWorkers: () => [...bySlot.values()].filter(w => w.attached),
    storedVersions: (job, rank) => stored.get(slot(job, rank))?.versions.map(v => v.version) ?? [],
    storedRanks: job => slotsOf(job).map(([s]) => Number(s.slice(s.lastIndexOf('#') + 1))).sort((a, b) => a - b),
    keyVersion (job, rank, version) {
      const v = stored.get(slot(job, rank))?.versions.find(x => x.version === version)
      if (v === undefined) throw new AgentError('ERR_STATE_MISMATCH', `rank ${rank} of job ${job} holds no stored version ${version} here`)
      return v.keys
    },

    async recordStored (worker, version) {
      const s = stored.get(slot(worker.job, worker.rank))
      if (s === undefined) { stored.set(slot(worker.job, worker.rank), { versions: [{ version, keys: version }], tensors: worker.tensors }); return }
      const replaced = s.versions.filter(v => v.version === version)
      s.versions = s.versions.filter(v => v.version !== version)
      s.versions.push({ version, keys: version })
      s.versions.sort((a, b) => a.version - b.version)
      await dropVersions(s, replaced.filter(v => v.keys !== version))
      await retain(worker.job, s)
    },

    async recordAlias (job, rank, version) {
      const s = stored.get(slot(job, rank))
      const latest = s?.versions.at(-1)
      if (s === undefined || latest === undefined) return false
      if (latest.version >= version) return true // already named (a repeated store), or a later point exists
      s.versions.push({ version, keys: latest.keys })
      await retain(job, s)
      return true
    },

    async commit (job, version) {
      if (version <= (committed.get(job) ?? 0)) return
      committed.set(job, version)
      for (const [, entry] of slotsOf(job)) await retain(job, entry)
    },

    async rollBackTo (job, version) {
      const slots = slotsOf(job)
      const short = slots.filter(([, e]) => !e.versions.some(v => v.version <= version))
      if (short.length > 0) throw new AgentError('ERR_STATE_MISMATCH', `job ${job}: rank ${short.map(([s]) => s.slice(s.lastIndexOf('#') + 1)).join(', ')} holds no stored version at or before ${version} here (held: ${short.map(([, e]) => e.versions.map(v => v.version).join('/')).join('; ')})`)
      for (const [, entry] of slots) await dropVersions(entry, entry.versions.filter(v => v.version > version))
      if ((committed.get(job) ?? 0) > version) committed.set(job, version)
    },

    keyAt,

    adoptMemory (worker, reply) {
      const w = worker as Live
      let parsed
      try {
        parsed = allocationValidator.parse(reply, `rank ${w.rank}'s allocate reply`)
      } catch (err) {
        throw new AgentError('ERR_OPERATION_FAILED', `rank ${w.rank} of job ${w.job} answered allocate with ${(err as Error).message}`, { details: { job: w.job, rank: w.rank } })
      }
      const byName = new Map(parsed.tensors.map(t => [t.name, t.memory as MemorySpec]))
      const missing = w.tensors.filter(t => !byName.has(t.name)).map(t => t.name)
      if (missing.length > 0 || byName.size !== w.tensors.length) {
        const registered = new Set(w.tensors.map(t => t.name))
        const extra = [...byName.keys()].filter(n => !registered.has(n))
        throw new AgentError('ERR_OPERATION_FAILED', `rank ${w.rank} of job ${w.job} answered allocate without ${missing.slice(0, 3).join(', ') || 'nothing'}${extra.length > 0 ? ` and with unregistered ${extra.slice(0, 3).join(', ')}` : ''}: it must name every registered state tensor once`, { details: { job: w.job, rank: w.rank } })
      }
      const memory = w.tensors.map(t => byName.get(t.name)!)
      const unpin = pinClientMemory(memory)
      w.unpin()
      w.unpin = unpin
      w.memory = memory
    },

    forgetMemory: worker => letGoOf(worker as Live),

    copyOut: async (worker, version) => await copyState(worker as Live, 'offload', memory =>
      components.stateManager.offload(worker.tensors.map((t, i) => ({ key: keyAt(t, version), source: memory[i]! })))),

    copyIn: async (worker, keyVersion) => await copyState(worker as Live, 'onload', memory =>
      components.stateManager.onload(worker.tensors.map((t, i) => ({ key: keyAt(t, keyVersion), target: memory[i]! })))),

    async sweep () {
      const view = components.jobs()
      const here = new Set(executionJobs(view.jobs).filter(j => j.state === 'RUNNING' && j.nodes.includes(options.selfPeerId)).map(j => j.id))
      for (const w of [...byId.values()]) {
        if (here.has(w.job)) continue
        // Why, when the leader said (the job's latest event: evicted by the guard, cancelled, moved).
        const why = findExecutionJob(view.jobs, w.job)?.events?.at(-1)?.message
        registry.drop(w, `job ${w.job} no longer runs on this node${why !== undefined ? ` (${why})` : ''}`)
      }
      for (const [s, entry] of [...stored]) {
        const job = jobOfSlot(s)
        if (here.has(job)) continue
        stored.delete(s)
        committed.delete(job)
        await components.stateManager.drop({ keys: [...new Set(entry.versions.map(v => v.keys))].flatMap(k => entry.tensors.map(t => keyAt(t, k))) })
          .catch(err => log.warn({ job, err: (err as Error).message }, 'workers: dropping a finished job\'s state failed'))
      }
    },

    list () {
      const views: WorkerView[] = []
      const seen = new Set<string>()
      for (const w of byId.values()) {
        seen.add(slot(w.job, w.rank))
        views.push({ workerId: w.id, job: w.job, rank: w.rank, gpu: w.gpu, pid: w.pid, attached: w.attached, onDevice: w.holds && w.current, storedVersions: [...registry.storedVersions(w.job, w.rank)], tensors: w.tensors.length, stateBytes: w.tensors.reduce((n, t) => n + t.key.bytes, 0), ops: [...w.ops].sort() })
      }
      return views.sort((a, b) => a.job < b.job ? -1 : a.job > b.job ? 1 : a.rank - b.rank)
    },

    stop () {
      for (const w of [...byId.values()]) remove(w, 'the agent is stopping', false)
    },
  }
  return registry
}
