/**
 * The device lock (RLinf §3.3, "temporal scheduling via automatic context
 * switching"): workers that cannot co-reside on a GPU share it by running one
 * after another. Before using a GPU a worker acquires its lock (onloading its
 * state once granted); when it is done, or as soon as it learns that someone
 * is waiting, it offloads and releases, and the next worker is granted.
 *
 * Contracts, per GPU:
 * - FIFO: waiters are granted in the order their acquire arrived. A request is
 *   queued synchronously on arrival (no await before it joins the queue).
 * - Re-entrant: the holder acquiring again is granted at once (depth + 1) even
 *   with others waiting; it must release as many times. Queued requests of one
 *   holder are granted together when the first of them reaches the head.
 * - A holder is a name: `pid:<pid>` of the calling process by default, or an
 *   explicit name shared by several processes (e.g. the ranks of one worker
 *   group). Every process that acquires under a name is tied to it; the hold
 *   lasts while at least one of those processes runs. When the last one exits
 *   (checked every `holderCheckIntervalMs` against its pid *and* start time,
 *   so a reused pid does not keep a dead holder alive) the hold ends with
 *   reason "holder-exited" and the next waiter is granted.
 * - A waiter whose request is cancelled (its connection closed), whose timeout
 *   expires, or whose process exits leaves the queue without being granted.
 * - Events: `waiter` tells the current holder that someone queued (so it can
 *   offload and release; also sent right after a grant when others wait),
 *   `granted` and `released` mark hold transitions (depth 0 ↔ 1).
 *
 * This module knows nothing of HTTP; agent/api/routes/locks.ts adapts it.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import type { ProcessIdentity, ProcessTable } from '../../core/process-table.ts'
import { holderNamePattern, maxLockTimeoutMs, type AcquireGpuResult, type DeviceLockEvent, type GpuLockState, type ReleaseGpuResult, type ReleaseReason } from './device-lock-schema.ts'

export type { AcquireGpuResult, DeviceLockEvent, GpuLockState, GpuLockWaiter, ReleaseGpuResult, ReleaseReason } from './device-lock-schema.ts'

const holderNameRegExp = new RegExp(holderNamePattern)

export interface DeviceLockOptions {
  /** GPUs on this node (lockable indices 0 … gpuCount-1), from the node inventory. At least 1. */
  gpuCount: number
  /** How often the processes of holders and waiters are checked for exit, in ms. Default: 250. */
  holderCheckIntervalMs?: number
}

export interface DeviceLockComponents {
  logger: Logger
  /** Identifies calling processes and tells whether they still run (procfs in the agent). */
  processes: ProcessTable
}

export interface AcquireGpuRequest {
  gpu: number
  /** The calling process (SO_PEERCRED pid); tied to the holder for exit detection. */
  pid: number
  /** Explicit holder name (see holderNamePattern). Default: `pid:<pid>`. */
  holder?: string
  /** Give up after this many ms with ERR_LOCK_TIMEOUT; 0 = only if granted at once. Default: wait until granted. */
  timeoutMs?: number
  /** Cancels a queued request (it leaves the queue); has no effect once granted. */
  signal?: AbortSignal
}

export interface ReleaseGpuRequest {
  gpu: number
  pid: number
  /** Default: `pid:<pid>`. */
  holder?: string
}

/** One GPU's lock totals since the agent started. */
export interface GpuLockCounters {
  gpu: number
  /** Holds granted (depth 0 → 1); a holder's re-entrant acquire is not a new grant. */
  grants: number
  /** Requests that queued behind another holder. */
  waits: number
  /** Time the requests granted after queueing spent in the queue, summed, in ms. */
  waitedMs: number
  /** Requests that ended with ERR_LOCK_TIMEOUT (timeoutMs 0 refused at once included). */
  timeouts: number
  /** Holds that ended, by why. */
  releases: Record<ReleaseReason, number>
}

export interface DeviceLockService {
  readonly gpuCount: number
  /** Starts the process-exit checks; acquire/release answer ERR_UNAVAILABLE before. */
  start(options?: { signal?: AbortSignal }): Promise<void>
  /** Ends every hold (reason "stopped"), rejects queued requests with ERR_UNAVAILABLE; idempotent. */
  stop(): Promise<void>
  /**
   * Resolves once granted. Rejects with ERR_NOT_FOUND (no such GPU),
   * ERR_BAD_REQUEST (holder name, timeout), ERR_LOCK_TIMEOUT, ERR_UNAVAILABLE
   * (stopped, process not running, or cancelled).
   */
  acquire(request: AcquireGpuRequest): Promise<AcquireGpuResult>
  /** One level of the holder's hold. ERR_LOCK_NOT_HELD when `holder` does not hold the GPU. */
  release(request: ReleaseGpuRequest): ReleaseGpuResult
  /** Every GPU's lock, by index. */
  locks(): GpuLockState[]
  /** One GPU's lock; ERR_NOT_FOUND for an index the node does not have. */
  gpuLock(gpu: number): GpuLockState
  /**
   * Every event of every GPU, in the order they happen; returns the unsubscribe
   * function. Listeners run synchronously inside the state change, so they
   * must not call acquire or release themselves (defer with queueMicrotask).
   */
  subscribe(listener: (event: DeviceLockEvent) => void): () => void
  /** Every GPU's totals, by index (read-only; for the metrics endpoint). */
  counters(): GpuLockCounters[]
}

interface Waiter {
  holder: string
  process: ProcessIdentity
  sinceMs: number
  settle(outcome: AcquireGpuResult | AgentError): void
}

interface Hold {
  holder: string
  /** Processes tied to the holder, by pid. */
  processes: Map<number, ProcessIdentity>
  depth: number
  sinceMs: number
}

interface GpuLock {
  gpu: number
  hold: Hold | null
  queue: Waiter[]
  counters: GpuLockCounters
}

export function createDeviceLock (options: DeviceLockOptions, components: DeviceLockComponents): DeviceLockService {
  const { gpuCount } = options
  if (!Number.isSafeInteger(gpuCount) || gpuCount < 1) throw new AgentError('ERR_ARG_INVALID', `gpuCount must be a positive integer, got ${gpuCount}`)
  const checkIntervalMs = options.holderCheckIntervalMs ?? 250
  const { logger, processes } = components
  const gpus: GpuLock[] = Array.from({ length: gpuCount }, (_, gpu) => ({
    gpu,
    hold: null,
    queue: [],
    counters: { gpu, grants: 0, waits: 0, waitedMs: 0, timeouts: 0, releases: { released: 0, 'holder-exited': 0, stopped: 0 } },
  }))
  const listeners = new Set<(event: DeviceLockEvent) => void>()
  const controller = new AbortController()
  let state: 'created' | 'running' | 'stopped' = 'created'
  let checks: Promise<void> | undefined

  function emit (event: DeviceLockEvent): void {
    for (const listener of [...listeners]) {
      try {
        listener(event)
      } catch (err) {
        logger.error({ err, event: event.type, gpu: event.gpu }, 'device lock listener failed')
      }
    }
  }

  function lockOf (gpu: number): GpuLock {
    const lock = Number.isInteger(gpu) ? gpus[gpu] : undefined
    if (lock === undefined) {
      throw new AgentError('ERR_NOT_FOUND', `no GPU ${gpu} on this node (${gpuCount === 1 ? 'GPU 0' : `GPUs 0-${gpuCount - 1}`})`, { details: { gpu, gpuCount } })
    }
    return lock
  }

  function assertRunning (): void {
    if (state !== 'running') throw new AgentError('ERR_UNAVAILABLE', state === 'stopped' ? 'the device lock is stopping' : 'the device lock is not started')
  }

  function holderNameOf (request: { pid: number, holder?: string | undefined }): string {
    if (request.holder === undefined) return `pid:${request.pid}`
    if (!holderNameRegExp.test(request.holder)) {
      throw new AgentError('ERR_BAD_REQUEST', `invalid holder ${JSON.stringify(request.holder)}: 1-128 characters from [A-Za-z0-9._:/@-], starting with a letter or digit, not starting with "pid:"`)
    }
    return request.holder
  }

  function tie (hold: Hold, process: ProcessIdentity): void {
    hold.processes.set(process.pid, process)
  }

  function endHold (lock: GpuLock, reason: ReleaseReason): void {
    const hold = lock.hold!
    lock.hold = null
    lock.counters.releases[reason]++
    logger.debug({ gpu: lock.gpu, holder: hold.holder, reason, heldMs: Date.now() - hold.sinceMs }, 'device lock released')
    emit({ type: 'released', gpu: lock.gpu, holder: hold.holder, reason })
  }

  /** Grants the head of the queue (and every queued request of the same holder) when the GPU is free. */
  function grantNext (lock: GpuLock): void {
    const head = lock.queue[0]
    if (lock.hold !== null || head === undefined) return
    const granted = lock.queue.filter(w => w.holder === head.holder)
    lock.queue = lock.queue.filter(w => w.holder !== head.holder)
    const hold: Hold = { holder: head.holder, processes: new Map(), depth: 0, sinceMs: Date.now() }
    lock.hold = hold
    for (const waiter of granted) {
      lock.counters.waitedMs += hold.sinceMs - waiter.sinceMs
      tie(hold, waiter.process)
      hold.depth++
      waiter.settle({ gpu: lock.gpu, holder: hold.holder, depth: hold.depth, waiting: lock.queue.length })
    }
    announceGrant(lock)
  }

  function announceGrant (lock: GpuLock): void {
    const hold = lock.hold!
    lock.counters.grants++
    logger.debug({ gpu: lock.gpu, holder: hold.holder, waiting: lock.queue.length }, 'device lock granted')
    emit({ type: 'granted', gpu: lock.gpu, holder: hold.holder, depth: hold.depth, waiting: lock.queue.length })
    const next = lock.queue[0]
    if (next !== undefined) emit({ type: 'waiter', gpu: lock.gpu, holder: hold.holder, waiter: next.holder, waiting: lock.queue.length })
  }

  /**
   * A request from a pid tied to the hold but with another start time means the
   * tied process exited and its pid was reused: untie it now rather than at the
   * next check, so the newcomer is not taken for the old holder (re-entry).
   */
  function untieReusedPid (lock: GpuLock, caller: ProcessIdentity): void {
    const hold = lock.hold
    const tied = hold?.processes.get(caller.pid)
    if (hold === null || tied === undefined || tied.startTicks === caller.startTicks) return
    hold.processes.delete(caller.pid)
    if (hold.processes.size > 0) return
    logger.info({ gpu: lock.gpu, holder: hold.holder, pid: caller.pid }, 'device lock holder exited (pid reused); releasing')
    endHold(lock, 'holder-exited')
    grantNext(lock)
  }

  function removeWaiter (lock: GpuLock, waiter: Waiter): boolean {
    const index = lock.queue.indexOf(waiter)
    if (index < 0) return false
    lock.queue.splice(index, 1)
    return true
  }

  /** One pass of the exit checks: drops exited waiters, unties exited processes, ends holds left without one. */
  async function checkProcesses (): Promise<void> {
    const identities = new Map<string, ProcessIdentity>()
    const key = (p: ProcessIdentity): string => `${p.pid}@${p.startTicks}`
    for (const lock of gpus) {
      for (const p of lock.hold?.processes.values() ?? []) identities.set(key(p), p)
      for (const w of lock.queue) identities.set(key(w.process), w.process)
    }
    if (identities.size === 0) return
    const running = await Promise.all([...identities].map(async ([k, p]) => [k, await processes.isRunning(p)] as const))
    const exited = new Set(running.filter(([, alive]) => !alive).map(([k]) => k))
    if (exited.size === 0 || state !== 'running') return
    // An exit is final, so acting on the current state (which may have moved on during the await) is safe.
    for (const lock of gpus) {
      for (const waiter of lock.queue.filter(w => exited.has(key(w.process)))) {
        removeWaiter(lock, waiter)
        logger.info({ gpu: lock.gpu, holder: waiter.holder, pid: waiter.process.pid }, 'device lock waiter exited')
        waiter.settle(new AgentError('ERR_UNAVAILABLE', `process ${waiter.process.pid} exited while waiting for GPU ${lock.gpu}`))
      }
      const hold = lock.hold
      if (hold === null) continue
      for (const p of [...hold.processes.values()]) {
        if (exited.has(key(p)) && hold.processes.get(p.pid) === p) hold.processes.delete(p.pid)
      }
      if (hold.processes.size === 0) {
        logger.info({ gpu: lock.gpu, holder: hold.holder, depth: hold.depth }, 'device lock holder exited; releasing')
        endHold(lock, 'holder-exited')
        grantNext(lock)
      }
    }
  }

  async function runChecks (signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await sleep(checkIntervalMs, undefined, { signal })
      } catch {
        return
      }
      try {
        await checkProcesses()
      } catch (err) {
        logger.error({ err }, 'device lock process check failed')
      }
    }
  }

  return {
    gpuCount,

    async start (startOptions = {}) {
      if (state !== 'created') return
      state = 'running'
      const signal = startOptions.signal === undefined ? controller.signal : AbortSignal.any([controller.signal, startOptions.signal])
      checks = runChecks(signal)
    },

    async stop () {
      if (state === 'stopped') return
      state = 'stopped'
      controller.abort()
      for (const lock of gpus) {
        const queued = lock.queue
        lock.queue = []
        for (const waiter of queued) waiter.settle(new AgentError('ERR_UNAVAILABLE', 'the device lock is stopping'))
        if (lock.hold !== null) endHold(lock, 'stopped')
      }
      await checks
      listeners.clear()
    },

    async acquire (request) {
      // No await before the request is queued or granted: arrival order is grant order.
      const lock = lockOf(request.gpu)
      assertRunning()
      const holder = holderNameOf(request)
      const { timeoutMs, signal } = request
      if (timeoutMs !== undefined && (!Number.isInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > maxLockTimeoutMs)) {
        throw new AgentError('ERR_BAD_REQUEST', `timeoutMs must be an integer from 0 to ${maxLockTimeoutMs}, got ${timeoutMs}`)
      }
      if (signal?.aborted === true) throw new AgentError('ERR_UNAVAILABLE', `acquire of GPU ${lock.gpu} cancelled`, { cause: signal.reason })
      const process = processes.identify(request.pid)
      if (process === null) throw new AgentError('ERR_UNAVAILABLE', `process ${request.pid} is not running`)
      untieReusedPid(lock, process)

      const hold = lock.hold
      if (hold?.holder === holder) {
        tie(hold, process)
        hold.depth++
        return { gpu: lock.gpu, holder, depth: hold.depth, waiting: lock.queue.length }
      }
      if (hold === null) {
        lock.hold = { holder, processes: new Map([[process.pid, process]]), depth: 1, sinceMs: Date.now() }
        announceGrant(lock)
        return { gpu: lock.gpu, holder, depth: 1, waiting: lock.queue.length }
      }
      if (timeoutMs === 0) {
        lock.counters.timeouts++
        throw timeoutError(lock, holder, 0)
      }

      return await new Promise<AcquireGpuResult>((resolve, reject) => {
        let timer: NodeJS.Timeout | undefined
        const onAbort = (): void => {
          if (removeWaiter(lock, waiter)) waiter.settle(new AgentError('ERR_UNAVAILABLE', `acquire of GPU ${lock.gpu} cancelled`, { cause: signal?.reason }))
        }
        const waiter: Waiter = {
          holder,
          process,
          sinceMs: Date.now(),
          settle (outcome) {
            clearTimeout(timer)
            signal?.removeEventListener('abort', onAbort)
            if (outcome instanceof AgentError) reject(outcome)
            else resolve(outcome)
          },
        }
        lock.queue.push(waiter)
        lock.counters.waits++
        if (timeoutMs !== undefined) {
          timer = setTimeout(() => {
            if (!removeWaiter(lock, waiter)) return
            lock.counters.timeouts++
            waiter.settle(timeoutError(lock, holder, timeoutMs))
          }, timeoutMs)
        }
        signal?.addEventListener('abort', onAbort, { once: true })
        emit({ type: 'waiter', gpu: lock.gpu, holder: hold.holder, waiter: holder, waiting: lock.queue.length })
      })
    },

    release (request) {
      const lock = lockOf(request.gpu)
      assertRunning()
      const holder = holderNameOf(request)
      // Only a pid tied to the hold can be a reused one: read /proc just then.
      const caller = lock.hold?.processes.has(request.pid) === true ? processes.identify(request.pid) : null
      if (caller !== null) untieReusedPid(lock, caller)
      const hold = lock.hold
      if (hold?.holder !== holder) {
        throw new AgentError('ERR_LOCK_NOT_HELD', `GPU ${lock.gpu} is not held by ${holder} (${hold === null ? 'it is free' : `held by ${hold.holder}`})`,
          { details: { gpu: lock.gpu, holder: hold?.holder ?? null } })
      }
      hold.depth--
      if (hold.depth === 0) {
        endHold(lock, 'released')
        grantNext(lock)
      }
      return { gpu: lock.gpu, holder, depth: hold.depth }
    },

    locks: () => gpus.map(stateOf),
    gpuLock: gpu => stateOf(lockOf(gpu)),

    subscribe (listener) {
      listeners.add(listener)
      return () => { listeners.delete(listener) }
    },

    counters: () => gpus.map(lock => ({ ...lock.counters, releases: { ...lock.counters.releases } })),
  }
}

function stateOf (lock: GpuLock): GpuLockState {
  return {
    gpu: lock.gpu,
    holder: lock.hold?.holder ?? null,
    pids: [...lock.hold?.processes.keys() ?? []],
    depth: lock.hold?.depth ?? 0,
    heldSinceMs: lock.hold?.sinceMs ?? null,
    waiters: lock.queue.map(w => ({ holder: w.holder, pid: w.process.pid, sinceMs: w.sinceMs })),
  }
}

function timeoutError (lock: GpuLock, holder: string, timeoutMs: number): AgentError {
  const by = lock.hold === null ? 'earlier waiters' : `${lock.hold.holder} (depth ${lock.hold.depth})`
  return new AgentError('ERR_LOCK_TIMEOUT', `GPU ${lock.gpu} not granted to ${holder} within ${timeoutMs} ms: held by ${by}, ${lock.queue.length} queued`,
    { details: { gpu: lock.gpu, holder: lock.hold?.holder ?? null, waiting: lock.queue.length } })
}
