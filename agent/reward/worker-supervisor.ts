/**
 * Runs this agent's reward workers: for each stage, as many processes of the
 * stage's configured command as the leader's latest `reward-workers` decision
 * places on this agent (its peer id), started and stopped to match every
 * applied decision. It reports its capacity and live workers to the leader
 * every heartbeatIntervalMs (the leader's lease check; one report in flight
 * at a time, each numbered: reportSeq) when the agent has stages configured
 * (an agent without any is not a candidate for workers and stays silent),
 * and a worker that exits at once
 * (`reward.worker-lost`: its request is retried elsewhere).
 *
 * Workers: slot i of stage s is `<node name>/<s>/<i>`, environment
 * AGENTD_SOCKET (this agent's API), AGENTD_REWARD_STAGE, AGENTD_REWARD_WORKER_ID;
 * a gpu-stage worker holds one GPU of this node exclusively
 * (CUDA_VISIBLE_DEVICES=<index>, the inventory's index: with
 * CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA numbers GPUs as nvidia-smi does, not
 * fastest first), a cpu-stage worker gets CUDA_VISIBLE_DEVICES=""
 * (it accounts coresPerWorker cores in the placement; no pinning).
 * A worker that exits without being asked is restarted after
 * workerRestartBackoffMs, doubling per crash in a row up to 64×; one that ran
 * 10 s resets the count. A worker asked to stop gets SIGTERM (finish the
 * current request, then exit) and SIGKILL after workerStopGraceMs. stop()
 * stops them all and waits for their exits.
 *
 * Start-up is paced: at most workerStartConcurrency workers are starting at
 * once (spawned, and neither fetched work yet nor ran startGraceMs), one
 * spawn per event-loop turn, so a cold start of dozens of workers neither
 * stalls this agent's event loop (each spawn forks the agent) nor starves it
 * of CPU all at once. Workers the plan no longer wants here stay warm for
 * workerKeepWarmMs (they keep serving their stage), so consecutive batches of
 * a task reuse them instead of stopping and starting them again; a warm
 * worker is stopped earlier when a wanted one needs its cores or its GPU.
 *
 * Workers run workerNice nicer than the agent (setpriority right after the
 * spawn, before the interpreter has done much): 60 Python processes starting
 * on a few cores otherwise delay the agent's event loop by hundreds of
 * milliseconds, long enough for the mesh to suspect it and the leader to
 * change. An unprivileged agent cannot undo it, so it holds for the worker's
 * life; under no contention it costs the worker nothing.
 *
 * External workers: a process started outside the supervisor (a fleet of
 * reward-model servers, a worker under another process manager) registers
 * for a stage with a number of slots (registerExternal); each slot is a
 * worker id it fetches and completes with, reported to the leader as an
 * external worker of the stage (planned as one of the stage's workers, on no
 * node's capacity). It is known by (pid, start time): when that process is
 * gone, or leaves, its slots are removed and reported lost. It is never
 * signalled by the agent.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { getPriority, setPriority } from 'node:os'
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import type { LeaderCallOptions } from '../../mesh/election/leader-calls.ts'
import type { AppliedDecision } from '../../mesh/election/decision-log.ts'
import type { RewardStageSpec } from '../../mesh/control/reward/reward-config.ts'
import { rewardWorkersKind, type RewardWorkersPayload } from '../../mesh/control/reward/reward-messages.ts'
import type { RewardWorkerInfo as WorkerInfo } from '../api/wire/reward.ts'
import { createProcfsProcessTable, type ProcessIdentity, type ProcessTable } from '../../core/process-table.ts'

export interface WorkerSupervisorOptions {
  stages: readonly RewardStageSpec[]
  /** The local API's socket, handed to workers. */
  socketPath: string
  nodeName: string
  /** Cores offered to cpu-stage workers. */
  cpuCores: number
  /** GPUs of this node (indices 0..gpus-1). */
  gpus: number
  heartbeatIntervalMs: number
  workerRestartBackoffMs: number
  workerStopGraceMs: number
  /** Workers starting at once, at most. */
  workerStartConcurrency: number
  /** Added to the agent's niceness for each worker (at most 19). Default 0. */
  workerNice?: number
  /** A worker the plan no longer wants here keeps running this long, ms (0: stopped at once). */
  workerKeepWarmMs: number
  /** A started worker counts as up once it fetched work, or after this long, ms. Default 2000. */
  startGraceMs?: number
}

export interface WorkerSupervisorComponents {
  logger: Logger
  /** Identifies external workers' processes and tells when they are gone. Default: this machine's procfs. */
  processes?: Pick<ProcessTable, 'identify' | 'isRunning'>
  /** This agent's mesh peer id (the decision's key for it). */
  selfId: string
  callLeader(method: string, body: unknown, options?: LeaderCallOptions): Promise<unknown>
  desiredState(): Record<string, unknown>
  onApplied(listener: (decision: AppliedDecision) => void): () => void
}

export type { WorkerInfo }

export interface WorkerSupervisor {
  start(options: { signal: AbortSignal }): void
  stop(): Promise<void>
  /** The stage of a live worker of this agent; ERR_BAD_REQUEST for any other id. */
  stageOf(workerId: string): string
  /** The process id of a live worker of this agent, or undefined. */
  pidOf(workerId: string): number | undefined
  /** The worker fetched work: it has started (pacing lets the next one start). */
  workerUp(workerId: string): void
  /**
   * Registers process `pid` (started outside the supervisor) as `slots`
   * external workers of `stage`; their worker ids. The same process and
   * stage again answers the same ids; ERR_BAD_REQUEST for an unknown stage, a
   * process that is not running, or one registered otherwise already.
   */
  registerExternal(stage: string, slots: number, pid: number): string[]
  /** Removes the external workers of process `pid` (reported lost); their ids. */
  leaveExternal(pid: number): string[]
  /**
   * Kills a running worker (SIGKILL) that overran its lease's stage timeout
   * (DistRS §3.1: the service terminates a computation past its timeout); it
   * is restarted after workerRestartBackoffMs, and its crash count is not
   * raised (the request, not the worker, was at fault). No-op for an unknown
   * or stopping worker.
   */
  terminate(workerId: string, why: string): void
  workers(): WorkerInfo[]
  /** Seq of the last worker report built (mesh/control/reward/reward-messages.ts ReportSeq); a fetch forwarded now carries it. */
  reportSeq(): number
}

interface Slot {
  workerId: string
  stage: RewardStageSpec
  index: number
  proc: ChildProcess | undefined
  gpu: number | undefined
  /** queued: wanted, waiting for its turn to start; warm: no longer wanted here, still serving until warmUntilMs; external: a registered process's slot. */
  state: 'queued' | 'running' | 'warm' | 'stopping' | 'restarting' | 'external'
  /** The registered process of an external slot. */
  external: ProcessIdentity | undefined
  warmUntilMs: number
  /** Spawned and not up yet (no fetch, startGraceMs not over): counts against workerStartConcurrency. */
  starting: boolean
  crashes: number
  startedMs: number
  restartTimer: NodeJS.Timeout | undefined
  killTimer: NodeJS.Timeout | undefined
  /** Why terminate() killed it, until it exits. */
  terminated: string | undefined
  exited: Promise<void>
  stderrTail: string
}

/** A slot in its first state: nothing spawned, nothing counted. */
const newSlot = (o: Pick<Slot, 'workerId' | 'stage' | 'index' | 'gpu' | 'state' | 'external'>): Slot => ({
  ...o, proc: undefined, warmUntilMs: 0, starting: false, crashes: 0, startedMs: performance.now(),
  restartTimer: undefined, killTimer: undefined, terminated: undefined, exited: Promise.resolve(), stderrTail: '',
})

/** The process serving a slot: the supervisor's child, or the registered external process. */
const pidOfSlot = (slot: Slot): number | undefined => slot.proc?.pid ?? slot.external?.pid

const stableRunMs = 10_000
const stderrTailBytes = 2048

export function createWorkerSupervisor (options: WorkerSupervisorOptions, components: WorkerSupervisorComponents): WorkerSupervisor {
  const log = components.logger
  const processes = components.processes ?? createProcfsProcessTable()
  const slots = new Map<string, Slot>()
  let desired: Record<string, number> = {}
  let stopping = false
  let heartbeat: NodeJS.Timeout | undefined
  let unsubscribe: (() => void) | undefined
  /** Starts from the wall clock so that a restarted agent's reports follow its earlier ones. */
  let reportSeq = Date.now()
  let reporting = false

  /** The niceness workers get; undefined: the agent's (nothing to set). */
  const workerNiceness = (options.workerNice ?? 0) > 0 ? Math.min(19, getPriority() + options.workerNice!) : undefined

  const idOf = (stage: string, index: number): string => `${options.nodeName}/${stage}/${index}`

  const freeGpu = (): number | undefined => {
    const held = new Set<number>()
    for (const s of slots.values()) if (s.gpu !== undefined) held.add(s.gpu)
    for (let g = 0; g < options.gpus; g++) if (!held.has(g)) return g
    return undefined
  }

  const reportLost = (slot: Slot, why: string): void => {
    // While the agent stops, one short try: a leader that is stopping too (or gone) must not hold the exit.
    components.callLeader('reward.worker-lost', { node: components.selfId, workerId: slot.workerId, why }, { timeoutMs: stopping ? 1000 : 10_000 })
      .catch(err => log.warn({ err: (err as Error).message, workerId: slot.workerId }, 'could not report a lost worker (the lease check will)'))
  }

  const launch = (slot: Slot): void => {
    const [command, ...args] = slot.stage.command
    const env = {
      ...process.env,
      AGENTD_SOCKET: options.socketPath,
      AGENTD_REWARD_STAGE: slot.stage.name,
      AGENTD_REWARD_WORKER_ID: slot.workerId,
      CUDA_VISIBLE_DEVICES: slot.gpu !== undefined ? String(slot.gpu) : '',
      CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
    }
    const proc = spawn(command!, args, { env, stdio: ['ignore', 'ignore', 'pipe'] })
    if (proc.pid !== undefined && workerNiceness !== undefined) {
      try {
        setPriority(proc.pid, workerNiceness)
      } catch (err) {
        // ESRCH: it exited already (its exit is handled as any other).
        if ((err as { info?: { code?: string } }).info?.code !== 'ESRCH') log.warn({ err: (err as Error).message, workerId: slot.workerId }, 'could not lower the reward worker\'s priority')
      }
    }
    slot.proc = proc
    slot.state = 'running'
    slot.startedMs = performance.now()
    slot.starting = true
    setTimeout(() => markUp(slot, proc), options.startGraceMs ?? 2000).unref()
    slot.stderrTail = ''
    proc.stderr!.on('data', (chunk: Buffer) => { slot.stderrTail = (slot.stderrTail + chunk.toString()).slice(-stderrTailBytes) })
    slot.exited = new Promise(resolve => {
      proc.once('error', err => { log.error({ err: err.message, workerId: slot.workerId }, 'reward worker could not start') })
      proc.once('close', (code, signal) => { onExit(slot, proc, code, signal); resolve() })
    })
    log.info({ workerId: slot.workerId, pid: proc.pid, gpu: slot.gpu }, 'reward worker started')
  }

  /** The slot's process `proc` is up (fetched work, or its start grace ran out): the next queued worker may start. */
  const markUp = (slot: Slot, proc: ChildProcess): void => {
    if (slot.proc !== proc || !slot.starting) return
    slot.starting = false
    pump()
  }

  /** Starts queued workers, one per event-loop turn, while fewer than workerStartConcurrency are starting. */
  let pumping = false
  const pump = (): void => {
    if (pumping || stopping) return
    const starting = [...slots.values()].filter(s => s.starting).length
    const next = [...slots.values()].find(s => s.state === 'queued')
    if (next === undefined || starting >= options.workerStartConcurrency) return
    pumping = true
    setImmediate(() => {
      pumping = false
      if (next.state === 'queued' && !stopping) launch(next)
      pump()
    })
  }

  const onExit = (slot: Slot, proc: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void => {
    if (slot.proc !== proc) return
    clearTimeout(slot.killTimer)
    slot.proc = undefined
    if (slot.starting) { slot.starting = false; pump() }
    const how = signal !== null ? `signal ${signal}` : `exit code ${code}`
    if (slot.state === 'stopping' || slot.state === 'warm' || stopping) {
      slots.delete(slot.workerId)
      log.info({ workerId: slot.workerId, how }, 'reward worker stopped')
      reportLost(slot, `stopped (${how})`)
      return
    }
    // It exited without being asked (or was terminated): whatever it held is lost, and it is restarted.
    if (slot.terminated !== undefined) {
      log.warn({ workerId: slot.workerId, why: slot.terminated }, 'reward worker terminated')
      slot.terminated = undefined
    } else {
      slot.crashes = performance.now() - slot.startedMs >= stableRunMs ? 1 : slot.crashes + 1
    }
    const delayMs = options.workerRestartBackoffMs * 2 ** Math.min(6, Math.max(0, slot.crashes - 1))
    log.warn({ workerId: slot.workerId, how, crashes: slot.crashes, restartInMs: delayMs, stderr: slot.stderrTail.slice(-512) }, 'reward worker exited: restarting')
    reportLost(slot, `worker exited (${how})`)
    slot.state = 'restarting'
    slot.restartTimer = setTimeout(() => {
      slot.restartTimer = undefined
      if (stopping || slot.state !== 'restarting') return
      launch(slot)
    }, delayMs)
    slot.restartTimer.unref()
  }

  const stopSlot = (slot: Slot): void => {
    if (slot.state === 'stopping') return
    slot.state = 'stopping'
    clearTimeout(slot.restartTimer)
    if (slot.starting) { slot.starting = false; pump() }
    const proc = slot.proc
    if (proc === undefined || proc.exitCode !== null || proc.signalCode !== null) {
      slots.delete(slot.workerId)
      return
    }
    proc.kill('SIGTERM')
    slot.killTimer = setTimeout(() => proc.kill('SIGKILL'), options.workerStopGraceMs)
    slot.killTimer.unref()
  }

  /** Cores the workers of `slots` account for (cpu stages: coresPerWorker each). */
  const coresOf = (list: Iterable<Slot>): number => {
    let n = 0
    for (const s of list) if (s.stage.resource === 'cpu' && s.external === undefined) n += s.stage.coresPerWorker
    return n
  }

  /** External slots whose process is gone: removed and reported lost. */
  let checkingExternal = false
  const checkExternal = async (): Promise<void> => {
    if (checkingExternal) return
    checkingExternal = true
    try {
      for (const slot of [...slots.values()]) {
        if (slot.external === undefined || await processes.isRunning(slot.external)) continue
        if (slots.get(slot.workerId) !== slot) continue
        slots.delete(slot.workerId)
        log.info({ workerId: slot.workerId, pid: slot.external.pid }, 'external reward worker gone')
        reportLost(slot, `external worker process ${slot.external.pid} is gone`)
      }
    } finally {
      checkingExternal = false
    }
  }

  /**
   * Stops warm workers while `need()` says their resources are wanted: the
   * longest warm first, and of those the highest slot first (a plan wants
   * slots 0..n-1, so low ones are the likelier to serve again).
   */
  const evictWarm = (need: (warm: Slot) => boolean): void => {
    const warm = [...slots.values()].filter(s => s.state === 'warm').sort((a, b) => a.warmUntilMs - b.warmUntilMs || b.index - a.index)
    for (const slot of warm) if (need(slot)) stopSlot(slot)
  }

  /**
   * Starts, keeps warm and stops workers to match `desired` (workers per stage
   * on this agent): a wanted slot that is warm serves again at once; one that
   * is not there is queued for start-up (pump); slots beyond the wanted count
   * turn warm; warm ones past workerKeepWarmMs, or whose cores or GPU a wanted
   * one needs, are stopped.
   */
  const reconcile = (): void => {
    if (stopping) return
    const now = performance.now()
    for (const stage of options.stages) {
      const want = desired[stage.name] ?? 0
      for (const slot of slots.values()) {
        if (slot.stage !== stage || slot.index < want) continue
        if (slot.state === 'queued') { slots.delete(slot.workerId); continue }
        if (slot.state === 'running' || slot.state === 'restarting') {
          if (options.workerKeepWarmMs > 0 && slot.state === 'running') { slot.state = 'warm'; slot.warmUntilMs = now + options.workerKeepWarmMs } else stopSlot(slot)
        }
      }
      for (let i = 0; i < want; i++) {
        const workerId = idOf(stage.name, i)
        const existing = slots.get(workerId)
        if (existing?.state === 'warm') { existing.state = 'running'; continue }
        if (existing !== undefined) continue // running, queued, restarting; or still stopping: started again by a later reconcile
        if (stage.resource === 'gpu' && freeGpu() === undefined) evictWarm(w => w.gpu !== undefined && freeGpu() === undefined)
        const gpu = stage.resource === 'gpu' ? freeGpu() : undefined
        if (stage.resource === 'gpu' && gpu === undefined) {
          log.warn({ stage: stage.name, gpus: options.gpus }, 'no free GPU for a gpu-stage worker placed here (yet: a stopping worker may still hold one)')
          break
        }
        const slot = newSlot({ workerId, stage, index: i, gpu, state: 'queued', external: undefined })
        slots.set(workerId, slot)
      }
    }
    // Warm workers give way: past their time, or to the cores of the wanted ones.
    evictWarm(w => w.warmUntilMs <= now)
    const wanted = (): number => coresOf([...slots.values()].filter(s => s.state !== 'warm' && s.state !== 'stopping'))
    evictWarm(() => wanted() + coresOf([...slots.values()].filter(s => s.state === 'warm')) > options.cpuCores)
    pump()
  }

  const applyPayload = (payload: unknown): void => {
    const p = payload as Partial<RewardWorkersPayload> | undefined
    const mine = p?.workers?.[components.selfId]
    const next: Record<string, number> = {}
    if (typeof mine === 'object' && mine !== null) {
      for (const stage of options.stages) {
        const n = (mine as Record<string, unknown>)[stage.name]
        if (typeof n === 'number' && Number.isInteger(n) && n > 0) next[stage.name] = Math.min(n, 4096)
      }
    }
    desired = next
    reconcile()
  }

  /** One report at a time: a report still retrying (no leader yet) is not joined by more of them. */
  const sendHeartbeat = (): void => {
    if (reporting) return
    reporting = true
    // A stopping worker is still finishing its request: it stays in the report until it has exited.
    const workers = [...slots.values()].filter(s => s.state !== 'restarting' && pidOfSlot(s) !== undefined)
      .map(s => ({ workerId: s.workerId, stage: s.stage.name, pid: pidOfSlot(s)!, ...(s.external !== undefined ? { external: true } : {}) }))
    reportSeq = Math.max(reportSeq + 1, Date.now())
    components.callLeader('reward.heartbeat', {
      node: components.selfId, nodeName: options.nodeName, cpuCores: options.cpuCores, gpus: options.gpus,
      stages: options.stages.map(s => s.name), workers, seq: reportSeq,
    }, { timeoutMs: Math.max(1000, options.heartbeatIntervalMs * 4) })
      .catch(err => log.debug({ err: (err as Error).message }, 'reward heartbeat not delivered'))
      .finally(() => { reporting = false })
  }

  return {
    start ({ signal }) {
      unsubscribe = components.onApplied(d => { if (d.kind === rewardWorkersKind) applyPayload(d.payload) })
      applyPayload(components.desiredState()[rewardWorkersKind])
      // An agent without stages offers the leader nothing and runs no worker, so it does not report:
      // every agent of a cluster reporting twice a second to the leader was most of an idle leader's traffic.
      if (options.stages.length > 0) {
        // A worker that stopped while others were still stopping may be wanted again.
        heartbeat = setInterval(() => { reconcile(); void checkExternal().finally(sendHeartbeat) }, options.heartbeatIntervalMs)
        heartbeat.unref()
        sendHeartbeat()
      }
      signal.addEventListener('abort', () => { void this.stop() }, { once: true })
    },

    async stop () {
      stopping = true
      unsubscribe?.()
      clearInterval(heartbeat)
      const all = [...slots.values()].filter(s => s.external === undefined) // external processes are not ours to stop
      for (const slot of all) stopSlot(slot)
      await Promise.all(all.map(s => s.exited))
    },

    stageOf (workerId) {
      const slot = slots.get(workerId)
      if (slot === undefined || slot.state === 'restarting' || slot.state === 'queued') throw new AgentError('ERR_BAD_REQUEST', `${JSON.stringify(workerId)} is not a live reward worker of this agent (workers are started by its supervisor, with AGENTD_REWARD_WORKER_ID)`)
      return slot.stage.name
    },

    reportSeq: () => reportSeq,

    pidOf: workerId => { const slot = slots.get(workerId); return slot === undefined ? undefined : pidOfSlot(slot) },

    registerExternal (stageName, count, pid) {
      const stage = options.stages.find(st => st.name === stageName)
      if (stage === undefined) throw new AgentError('ERR_BAD_REQUEST', `unknown stage ${JSON.stringify(stageName)}; the stages are ${options.stages.map(st => st.name).join(', ') || 'none (reward.stages)'}`)
      const identity = processes.identify(pid)
      if (identity === null) throw new AgentError('ERR_BAD_REQUEST', `process ${pid} is not running`)
      const mine = [...slots.values()].filter(sl => sl.external?.pid === pid && sl.external.startTicks === identity.startTicks)
      if (mine.length > 0) {
        if (mine.length === count && mine.every(sl => sl.stage === stage)) return mine.map(sl => sl.workerId)
        throw new AgentError('ERR_BAD_REQUEST', `process ${pid} is registered already (${mine.length} slot${mine.length > 1 ? 's' : ''} of stage ${mine[0]!.stage.name}); leave first (POST /v1/reward/workers/leave)`)
      }
      const ids: string[] = []
      for (let k = 0; k < count; k++) {
        const workerId = `${options.nodeName}/${stage.name}/ext-${pid}-${k}`
        slots.set(workerId, newSlot({ workerId, stage, index: -1, gpu: undefined, state: 'external', external: identity }))
        ids.push(workerId)
      }
      log.info({ stage: stage.name, pid, slots: count }, 'external reward worker registered')
      sendHeartbeat()
      return ids
    },

    leaveExternal (pid) {
      const gone = [...slots.values()].filter(sl => sl.external?.pid === pid)
      for (const slot of gone) {
        slots.delete(slot.workerId)
        reportLost(slot, `external worker process ${pid} left`)
      }
      if (gone.length > 0) log.info({ pid, slots: gone.length }, 'external reward worker left')
      return gone.map(sl => sl.workerId)
    },
    workerUp (workerId) {
      const slot = slots.get(workerId)
      if (slot?.proc !== undefined) markUp(slot, slot.proc)
    },
    terminate (workerId, why) {
      const slot = slots.get(workerId)
      const proc = slot?.proc
      if (slot === undefined || (slot.state !== 'running' && slot.state !== 'warm') || proc === undefined || proc.exitCode !== null || proc.signalCode !== null) return
      slot.terminated = why
      proc.kill('SIGKILL')
    },

    workers () {
      return [...slots.values()].map(s => ({ workerId: s.workerId, stage: s.stage.name, pid: pidOfSlot(s) ?? 0, ...(s.gpu !== undefined ? { gpu: s.gpu } : {}), state: s.state, crashes: s.crashes }))
    },
  }
}
