/**
 * Carries out the leader's dispatches on this node's workers (PlexRL §5.2.2
 * automatic context switching, §5.3 the agent as the active copy endpoint;
 * RLinf §3.3 the device lock):
 *
 *   run:        validate (job placed here, every local rank live, the name
 *               registered by each) — nothing has changed yet when this
 *               fails — start prefetching the job's stored state from NVMe
 *               if it is not on the devices, then, under the locks of the
 *               job's devices here:
 *               offload every other job whose state holds those devices
 *               (stored under the dispatch's version, released) and onload
 *               this job's workers that are not current (from their latest
 *               stored version) — at once where the device has room for both
 *               (a worker without room answers ERR_DEVICE_FULL to `allocate`
 *               and is loaded after the offload) —, then run the operation
 *               on every local rank. The agent copies every state itself,
 *               out of and into the memory each worker names (registration,
 *               `allocate`); a worker only allocates and frees.
 *   store:      offload the job's current local state under the version
 *               without releasing it (its other nodes offloaded it); ranks
 *               whose memory is not current record the version as another
 *               name of their latest stored state, so every rank of the job
 *               names each point of its history by the same version.
 *   invalidate: roll the job's local workers back to the named version
 *               (release; versions stored after it are dropped; the next
 *               run onloads it).
 *   commit:     every node stored the version: older ones are dropped.
 *   versions:   each local rank's stored versions (a rollback target is
 *               the latest version every rank of the job holds).
 *   prefetch:   the job's next operation waits for these devices: start
 *               bringing its workers' stored state back from NVMe (answers
 *               at once; best effort).
 *
 * Contract:
 * - Fencing: a dispatch from an epoch lower than the highest seen is
 *   ERR_STALE_EPOCH and changes nothing.
 * - Idempotency: a run is named by (job, opId). A repeat while it runs joins
 *   it; a repeat after it ended answers the same (success or error) from a
 *   cache of the last `retainedRuns` runs. So an operation a failed-over
 *   leader dispatches again never runs twice here.
 * - Device locks: one FIFO lock per GPU (a CPU-only group takes the node's
 *   `cpu` lock); a run holds its job's local locks throughout, so two jobs
 *   sharing a GPU never interleave their switches and runs, whatever the
 *   leader does.
 * - A worker that dies during a run fails it with ERR_WORKER_LOST naming the
 *   rank; the job's other local workers roll back. One that dies between
 *   runs while its memory held effects no stored version has (it ran since
 *   its job was last offloaded or stored) fails the job's next run here the
 *   same way, once, before anything runs: the rollback is never silent.
 *   Until the leader rolls the job back, a rank that lost effects this way
 *   (idle or mid-run) makes every store of the job here fail with
 *   ERR_WORKER_LOST: a version that names the lost state is never stored.
 *   A handler's error is
 *   ERR_OPERATION_FAILED naming the rank. Another job's worker dying while
 *   it is offloaded for this run does not fail this run (its memory is gone
 *   with it); any other offload failure (e.g. the host tier and NVMe are
 *   full) fails the run before anything of this job is touched.
 */
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import type { DispatchAnswer, DispatchMessage, VersionsAnswer } from '../../mesh/control/jobs/op-wire.ts'
import { createResourceLocks } from './resource-locks.ts'
import type { StateManager } from '../state/state-manager.ts'
import type { WorkerRecord, WorkerRegistry, WorkerReply } from './worker-registry.ts'

export interface NodeExecutorOptions {
  selfPeerId: string
  /** Finished runs whose answers are kept for repeats. Default 4096. */
  retainedRuns?: number
  /** Onloads overlap offloads where the device has room (placement.overlapSwitches). Default true. */
  overlapSwitches?: boolean
}

export interface NodeExecutorComponents {
  logger: Logger
  registry: WorkerRegistry
  /** Brings a job's stored state back from NVMe ahead of its onload; without it onloads read NVMe in the switch. */
  stateManager?: Pick<StateManager, 'prefetch'>
  clockMs?: () => number
}

export interface NodeExecutor {
  handle(message: DispatchMessage): Promise<DispatchAnswer | VersionsAnswer | Record<string, never>>
  /** A worker of `job` died here: roll its siblings back (and remember an idle death that lost state). */
  workerLost(worker: WorkerRecord, why: string): void
  /** Highest epoch a dispatch came from. */
  readonly epoch: number
}

type Run = Promise<DispatchAnswer>
type WorkerAsk = 'allocate' | 'release' | 'run'

export function createNodeExecutor (options: NodeExecutorOptions, components: NodeExecutorComponents): NodeExecutor {
  const { registry, logger: log } = components
  const clockMs = components.clockMs ?? (() => performance.now())
  const retained = options.retainedRuns ?? 4096
  const locks = createResourceLocks()
  const runs = new Map<string, Run>()
  /** Workers whose memory holds operations' effects that no stored version has yet. */
  const unsaved = new Set<WorkerRecord>()
  /** Jobs with a run under way here. */
  const active = new Set<string>()
  /** Jobs whose worker died between operations, losing unsaved state: their next run reports it. */
  const lostIdle = new Map<string, { message: string, rank: number }>()
  /** Per job: ranks whose worker died with unsaved effects here, until the job is rolled back. */
  const lostRanks = new Map<string, Set<number>>()
  let maxEpoch = 0

  const devices = (w: { gpu: number | null }): string => w.gpu === null ? 'cpu' : `gpu:${w.gpu}`

  /** The job's ranks here and their live workers; ERR_* when it is not placed here or a rank has none. */
  const localWorkers = (jobId: string): WorkerRecord[] => {
    const { ranks } = registry.localRanks(jobId)
    const missing = ranks.filter(r => registry.live(jobId, r)?.attached !== true)
    if (missing.length > 0) throw new AgentError('ERR_WORKER_MISSING', `job ${jobId}: rank${missing.length > 1 ? 's' : ''} ${missing.join(', ')} ha${missing.length > 1 ? 've' : 's'} no live worker on node ${options.selfPeerId} yet (start it: it registers with this node's agent)`, { details: { job: jobId, ranks: missing } })
    return ranks.map(r => registry.live(jobId, r)!)
  }

  /** The coded error of a worker's failed reply to `type`. */
  const replyError = (w: WorkerRecord, type: WorkerAsk, reply: WorkerReply, data: Record<string, unknown>): AgentError =>
    new AgentError('ERR_OPERATION_FAILED', `rank ${w.rank} of job ${w.job} failed its ${type}${type === 'run' ? ` of ${String(data.name)}` : ''}: ${reply.error?.code ?? ''} ${reply.error?.message ?? 'no message'}`.replace(/ {2}/, ' '), { details: { job: w.job, rank: w.rank, node: options.selfPeerId, cause: reply.error?.code } })

  const ask = async (w: WorkerRecord, type: WorkerAsk, data: Record<string, unknown>): Promise<WorkerReply> => {
    const reply = await registry.request(w, type, data)
    if (!reply.ok) throw replyError(w, type, reply, data)
    return reply
  }

  /** The worker frees its state's memory (the agent lets go of it first). */
  const releaseMemory = async (w: WorkerRecord): Promise<void> => {
    registry.forgetMemory(w)
    w.holds = false
    w.current = false
    await ask(w, 'release', {})
  }

  /**
   * The worker holds memory for its state, allocated if it had none: true, or
   * false when `mayBeFull` and its device has no room yet (ERR_DEVICE_FULL:
   * the worker allocated nothing).
   */
  const allocate = async (w: WorkerRecord, mayBeFull: boolean): Promise<boolean> => {
    if (w.holds && w.memory !== null) return true
    const reply = await registry.request(w, 'allocate', {})
    if (!reply.ok) {
      if (mayBeFull && reply.error?.code === 'ERR_DEVICE_FULL') return false
      throw replyError(w, 'allocate', reply, {})
    }
    w.holds = true
    registry.adoptMemory(w, reply.result)
    return true
  }

  /**
   * Stores every rank of `job` here under `version`: current workers offload
   * (and release where `release` says), the other ranks record `version` as
   * another name of their latest stored state. A rank that lost unsaved
   * effects makes it fail with ERR_WORKER_LOST (after the live ones released
   * what they must).
   */
  const storeJob = async (jobId: string, version: number, release: (w: WorkerRecord) => boolean): Promise<number> => {
    let bytes = 0
    const workers = registry.liveWorkers().filter(w => w.job === jobId)
    await Promise.all(workers.map(async w => {
      if (!w.current) {
        if (release(w) && w.holds) await releaseMemory(w)
        await registry.recordAlias(w.job, w.rank, version)
        return
      }
      await registry.copyOut(w, version)
      await registry.recordStored(w, version)
      unsaved.delete(w)
      bytes += w.tensors.reduce((n, t) => n + t.key.bytes, 0)
      if (release(w)) await releaseMemory(w)
    }))
    const lost = lostRanks.get(jobId)
    if (lost !== undefined && lost.size > 0) {
      const ranks = [...lost].sort((a, b) => a - b)
      throw new AgentError('ERR_WORKER_LOST', `job ${jobId}: rank${ranks.length > 1 ? 's' : ''} ${ranks.join(', ')} lost unsaved effects on node ${options.selfPeerId}; the job is not stored under version ${version} until it is rolled back`, { details: { job: jobId, rank: ranks[0], node: options.selfPeerId } })
    }
    const withWorker = new Set(workers.map(w => w.rank))
    for (const rank of registry.storedRanks(jobId)) if (!withWorker.has(rank)) await registry.recordAlias(jobId, rank, version)
    return bytes
  }

  /**
   * The leader dispatched this job next: its workers' stored state that
   * spilled to NVMe starts coming back to the host tier now, while the devices
   * may still be busy with another job, so the onload copies from memory
   * (PlexRL §5.3). Best effort: a key that cannot be promoted is read in the
   * onload as before.
   */
  const prefetchStale = (workers: readonly WorkerRecord[]): void => {
    if (components.stateManager === undefined) return
    const keys = workers.filter(w => !w.current).flatMap(w => {
      const version = registry.storedVersions(w.job, w.rank).at(-1)
      return version === undefined ? [] : w.tensors.map(t => registry.keyAt(t, registry.keyVersion(w.job, w.rank, version)))
    })
    if (keys.length === 0) return
    try {
      components.stateManager.prefetch({ keys })
    } catch (err) {
      log.debug({ err: (err as Error).message }, 'workers: prefetch refused')
    }
  }

  const run = async (m: Extract<DispatchMessage, { kind: 'run' }>): Promise<DispatchAnswer> => {
    const lost = lostIdle.get(m.job)
    if (lost !== undefined) {
      lostIdle.delete(m.job)
      throw new AgentError('ERR_WORKER_LOST', lost.message, { details: { job: m.job, rank: lost.rank, node: options.selfPeerId } })
    }
    // A worker that registered a moment ago opens its stream next: wait for it rather than refuse.
    await registry.settled(m.job, registry.localRanks(m.job).ranks, 10_000)
    const mine = localWorkers(m.job)
    const unknown = mine.filter(w => !w.ops.has(m.name))
    if (unknown.length > 0) throw new AgentError('ERR_UNKNOWN_OPERATION', `job ${m.job}: no operation ${JSON.stringify(m.name)} registered by rank${unknown.length > 1 ? 's' : ''} ${unknown.map(w => w.rank).join(', ')} (registered: ${[...unknown[0]!.ops].sort().join(', ')})`)
    const held = new Set(mine.map(devices))
    prefetchStale(mine)
    return await locks.withLocks([...held], async () => {
      // Re-read after waiting: a worker may have died or restarted meanwhile.
      const workers = localWorkers(m.job)
      let offloadMs = 0; let onloadMs = 0; let bytesMoved = 0
      const offloaded: Array<{ job: string, version: number }> = []
      const others = registry.liveWorkers().filter(w => w.job !== m.job && w.holds && held.has(devices(w)))
      const t0 = clockMs()
      const offloading = (async () => {
        for (const jobId of new Set(others.map(w => w.job))) {
          try {
            bytesMoved += await storeJob(jobId, m.version, w => held.has(devices(w)))
            offloaded.push({ job: jobId, version: m.version })
          } catch (err) {
            if (!(err instanceof AgentError) || err.code !== 'ERR_WORKER_LOST') throw err
            log.warn({ job: jobId, for: m.job, err: err.message }, 'workers: a worker died while being offloaded; its memory went with it')
          }
        }
        offloadMs = clockMs() - t0
      })()
      // The onload overlaps the offload (the copies run in opposite directions): a worker whose device
      // has no room for its state next to the outgoing one's answers ERR_DEVICE_FULL and loads after it.
      const stale = workers.filter(w => !w.current)
      const onloading = Promise.all(stale.map(async w => {
        const version = registry.storedVersions(w.job, w.rank).at(-1)
        if (version === undefined) throw new AgentError('ERR_STATE_MISMATCH', `rank ${w.rank} of job ${m.job} has no stored state to load`)
        const keyVersion = registry.keyVersion(w.job, w.rank, version)
        let room = false
        if (others.length > 0 && options.overlapSwitches !== false) room = await allocate(w, true)
        if (!room) {
          try { await offloading } catch { return } // the run fails with the offload's error
          await allocate(w, false)
        }
        await registry.copyIn(w, keyVersion)
        w.current = true
        bytesMoved += w.tensors.reduce((n, t) => n + t.key.bytes, 0)
      })).then(() => { onloadMs = stale.length > 0 ? clockMs() - t0 : 0 })
      const [off, on] = await Promise.allSettled([offloading, onloading])
      if (off.status === 'rejected') throw off.reason
      if (on.status === 'rejected') throw on.reason
      const switchMs = offloaded.length > 0 || stale.length > 0 ? clockMs() - t0 : 0
      const t2 = clockMs()
      active.add(m.job)
      for (const w of workers) unsaved.add(w)
      const replies = await Promise.all(workers.map(async w => ({ w, reply: await ask(w, 'run', { opId: m.opId, name: m.name, args: m.args }) })))
        .finally(() => active.delete(m.job))
      const runMs = clockMs() - t2
      return {
        ranks: replies.map(({ w, reply }) => ({ rank: w.rank, result: reply.result ?? null, startedAtMs: reply.startedAtMs ?? 0, durationMs: reply.durationMs ?? 0 })),
        offloaded, onloaded: stale.length > 0, offloadMs: offloaded.length > 0 ? offloadMs : 0, onloadMs, switchMs, runMs, bytesMoved,
      }
    })
  }

  /** Releases the job's workers here (their memory is not its latest stored state any more); then, with `version`, drops what was stored after it. */
  const rollBack = async (job: string, version?: number): Promise<void> => {
    const workers = registry.liveWorkers().filter(w => w.job === job)
    await locks.withLocks([...new Set(workers.map(devices))], async () => {
      await Promise.all(workers.map(async w => {
        unsaved.delete(w) // discarded on purpose: the caller was told (a run failed) or asked for it
        w.current = false
        if (w.holds) await releaseMemory(w).catch(err => log.warn({ job, rank: w.rank, err: (err as Error).message }, 'workers: release for a rollback failed'))
      }))
      if (version === undefined) return
      await registry.rollBackTo(job, version)
      lostRanks.delete(job)
      lostIdle.delete(job)
    })
  }

  return {
    get epoch () { return maxEpoch },
    async handle (m): Promise<DispatchAnswer | VersionsAnswer | Record<string, never>> {
      if (m.epoch < maxEpoch) throw new AgentError('ERR_STALE_EPOCH', `dispatch from epoch ${m.epoch}; node ${options.selfPeerId} has seen epoch ${maxEpoch}`)
      maxEpoch = m.epoch
      if (m.kind === 'invalidate') { await rollBack(m.job, m.version); return {} }
      if (m.kind === 'commit') { await registry.commit(m.job, m.version); return {} }
      if (m.kind === 'versions') return { ranks: registry.storedRanks(m.job).map(rank => ({ rank, versions: [...registry.storedVersions(m.job, rank)] })) }
      if (m.kind === 'prefetch') { prefetchStale(registry.liveWorkers().filter(w => w.job === m.job)); return {} }
      if (m.kind === 'store') {
        const workers = registry.liveWorkers().filter(w => w.job === m.job)
        await locks.withLocks([...new Set(workers.map(devices))], async () => { await storeJob(m.job, m.version, () => false) })
        return {}
      }
      const key = `${m.job}/${m.opId}`
      const known = runs.get(key)
      if (known !== undefined) return await known
      const started = run(m)
      runs.set(key, started)
      if (runs.size > retained) runs.delete(runs.keys().next().value!)
      started.catch(err => {
        // Nothing ran when validation refused it: a repeat may run once the cause is fixed (a worker registered).
        if (err instanceof AgentError && ['ERR_WORKER_MISSING', 'ERR_UNKNOWN_OPERATION', 'ERR_JOB_NOT_RUNNING', 'ERR_JOB_NOT_FOUND'].includes(err.code)) runs.delete(key)
      })
      return await started
    },
    workerLost (worker, why) {
      const lostEffects = unsaved.delete(worker)
      if (lostEffects) {
        const ranks = lostRanks.get(worker.job) ?? new Set<number>()
        ranks.add(worker.rank)
        lostRanks.set(worker.job, ranks)
      }
      if (lostEffects && !active.has(worker.job)) {
        // Between operations: no caller hears of it, yet the job's latest effects died with it. The
        // job's next run says so (its caller replays from the stored state, as after a death mid-run).
        lostIdle.set(worker.job, { rank: worker.rank, message: `rank ${worker.rank} of job ${worker.job} was lost between operations (${why}); the effects of its operations since the job's last stored version died with it: the job is rolled back to that version on this node (restart the worker; read the job's progress, e.g. with a status operation, and replay from there)` })
      }
      void rollBack(worker.job).catch(err => log.warn({ job: worker.job, err: (err as Error).message }, 'workers: rollback failed'))
    },
  }
}
