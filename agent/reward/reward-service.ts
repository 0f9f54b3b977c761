/**
 * The reward service on one agent, what the /v1/reward routes adapt: the
 * trainer side (reward-submitter.ts), the worker side (fetch / complete for
 * this agent's supervised workers, forwarded to the leader's proxy) and the
 * cluster status (from the leader's proxy, plus this agent's own workers).
 */
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import type { LeaderService } from '../../mesh/election/leader-service.ts'
import { createProcfsProcessTable, type ProcessTable } from '../../core/process-table.ts'
import type { LeaderCallOptions } from '../../mesh/election/leader-calls.ts'
import { validateRewardConfig, type RewardConfig } from '../../mesh/control/reward/reward-config.ts'
import { createRewardSubmitter, type RewardSubmitter, type ResultAnswer, type SubmitAnswer } from './reward-submitter.ts'
import { createWorkerSupervisor, type WorkerInfo, type WorkerSupervisor } from './worker-supervisor.ts'
import { ExternalWorkerBody, validatorOf, type CancelAnswer, type RewardLease, type RewardStatus } from '../../mesh/control/reward/reward-messages.ts'

const validateExternalWorker = validatorOf(ExternalWorkerBody, 'external worker registration')

/** The caller's pid; ERR_FORBIDDEN when the agent cannot tell (reward workers are known by their process). */
function pidOf (caller: Caller, action: string): number {
  if (caller === null) throw new AgentError('ERR_FORBIDDEN', `cannot tell which process asks to ${action} (no peer credentials): reward workers are known by their process`)
  return caller.pid
}

export interface RewardServiceOptions {
  config: RewardConfig
  socketPath: string
  nodeName: string
  /** Cores of the node (inventory); reward.cpuCores overrides when > 0. */
  detectedCpuCores: number
  gpus: number
}

export interface RewardServiceComponents {
  logger: Logger
  selfId: string
  /** Tells a worker's own process (or its child) from any other caller. Default: this machine's procfs. */
  processes?: Pick<ProcessTable, 'descendsFrom'>
  leader: Pick<LeaderService, 'callLeader' | 'desiredState' | 'onApplied'>
}

/** The process calling the API (SO_PEERCRED), or null when the agent cannot tell. */
export type Caller = { pid: number } | null

export interface WorkFetch { workerId: string, waitMs: number }
export interface WorkComplete { workerId: string, leaseId: string, reward?: number, output?: unknown, error?: string }

/** This agent's requests (pending: no result yet; done: result held until fetched) and its workers. */
export interface RewardLocalView { node: string, pending: number, done: number, workers: WorkerInfo[] }

export interface RewardService {
  start(options: { signal: AbortSignal }): Promise<void>
  stop(): Promise<void>
  batchStart(body: unknown): Promise<unknown>
  submit(body: unknown): Promise<SubmitAnswer>
  /** The trainer cancels a batch or some of its requests (reward-submitter.ts). */
  cancel(body: unknown): Promise<CancelAnswer>
  result(requestId: string, waitMs: number, signal?: AbortSignal): Promise<ResultAnswer>
  /** The leader's view of the reward service (asked of the acting leader; `options.timeoutMs` bounds the wait) and this agent's. */
  status(options?: LeaderCallOptions): Promise<RewardStatus & { local: RewardLocalView }>
  /** This agent's part of status() without asking the leader: requests submitted here and their results held, and the workers supervised here. */
  local(): RewardLocalView
  /**
   * A supervised worker takes its next request (long-poll). `caller`: the
   * calling process (SO_PEERCRED); ERR_FORBIDDEN unless it is the worker's
   * own process or one it started (null: the agent cannot tell).
   */
  fetchWork(body: WorkFetch, caller: Caller, signal?: AbortSignal): Promise<{ lease: RewardLease | null }>
  /** ... and posts its reward, output or error; the same check of `caller`. */
  completeWork(body: WorkComplete, caller: Caller): Promise<{ accepted: true }>
  /** The calling process registers as an external worker of a stage (ExternalWorkerBody): its worker ids. */
  registerWorker(body: unknown, caller: Caller): { stage: string, workerIds: string[] }
  /** The calling process's external workers leave: their ids. */
  leave(caller: Caller): { workerIds: string[] }
}

export function createRewardService (options: RewardServiceOptions, components: RewardServiceComponents): RewardService {
  const { config } = options
  validateRewardConfig(config)
  const { leader, selfId } = components
  const submitter: RewardSubmitter = createRewardSubmitter({
    maxPendingRequests: config.maxPendingRequests,
    resultRetentionMs: config.resultRetentionMs,
    unfetchedResultRetentionMs: config.unfetchedResultRetentionMs,
    abandonedBatchMs: config.abandonedBatchMs,
    timeoutReward: config.timeoutReward,
  }, { logger: components.logger, callLeader: (m, b, o) => leader.callLeader(m, b, o) })
  const supervisor: WorkerSupervisor = createWorkerSupervisor({
    stages: config.stages,
    socketPath: options.socketPath,
    nodeName: options.nodeName,
    cpuCores: config.cpuCores > 0 ? config.cpuCores : options.detectedCpuCores,
    gpus: options.gpus,
    heartbeatIntervalMs: config.heartbeatIntervalMs,
    workerRestartBackoffMs: config.workerRestartBackoffMs,
    workerStopGraceMs: config.workerStopGraceMs,
    workerStartConcurrency: config.workerStartConcurrency,
    workerNice: config.workerNice,
    workerKeepWarmMs: config.workerKeepWarmMs,
  }, { logger: components.logger, selfId, callLeader: (m, b, o) => leader.callLeader(m, b, o), desiredState: () => leader.desiredState(), onApplied: l => leader.onApplied(l) })
  // Per worker: the lease it runs, and the timer that terminates it once the
  // lease's stage timeout (plus a grace for the leader's clock being ahead of
  // ours) has run out. The leader has given the request its timeout result by
  // then; a worker still on it (e.g. generated code in an endless loop) would
  // hold its CPU or GPU for ever. The watch belongs to the process that
  // fetched the lease: a worker that crashed and was restarted meanwhile is
  // not on it, and is left alone.
  const local = (): RewardLocalView => ({ node: options.nodeName, ...submitter.counts(), workers: supervisor.workers() })
  const leaseWatch = new Map<string, { leaseId: string, timer: NodeJS.Timeout }>()
  const overrunGraceMs = Math.max(1000, config.heartbeatIntervalMs)
  const unwatch = (workerId: string): void => {
    const watch = leaseWatch.get(workerId)
    if (watch !== undefined) { clearTimeout(watch.timer); leaseWatch.delete(workerId) }
  }
  const watch = (workerId: string, lease: RewardLease): void => {
    unwatch(workerId)
    const pid = supervisor.pidOf(workerId)
    const timer = setTimeout(() => {
      leaseWatch.delete(workerId)
      if (supervisor.pidOf(workerId) !== pid) return
      supervisor.terminate(workerId, `request ${lease.requestId} ran past the ${lease.timeoutMs} ms timeout of stage ${lease.stage}`)
    }, lease.timeoutMs + overrunGraceMs)
    timer.unref()
    leaseWatch.set(workerId, { leaseId: lease.leaseId, timer })
  }

  const processes = components.processes ?? createProcfsProcessTable()
  /**
   * Work of a supervised worker is fetched and completed by that worker: its
   * own process or one it started (a wrapper that runs the real worker). Any
   * other process on the socket, even one of the agent's uid, is refused, so
   * nothing but the worker can take its requests or post its results.
   */
  const checkCaller = (workerId: string, caller: Caller, action: string): void => {
    const callerPid = pidOf(caller, `${action} for reward worker ${workerId}`)
    const pid = supervisor.pidOf(workerId)
    if (pid === undefined || !processes.descendsFrom(callerPid, pid)) {
      throw new AgentError('ERR_FORBIDDEN', `process ${callerPid} may not ${action} for reward worker ${workerId}: only the worker's own process (${pid === undefined ? 'none runs now' : `pid ${pid}`}) or one it started may`, { details: { worker: workerId, caller: callerPid } })
    }
  }

  // A new epoch's first decision: its leader gets the results held here that the trainer has not fetched.
  let appliedEpoch = -1
  let unsubscribeEpochs: (() => void) | undefined

  return {
    async start (o) {
      submitter.start(o)
      supervisor.start(o)
      unsubscribeEpochs = leader.onApplied(d => {
        if (d.epoch <= appliedEpoch) return
        appliedEpoch = d.epoch
        submitter.leaderChanged()
      })
    },
    async stop () {
      unsubscribeEpochs?.()
      for (const workerId of [...leaseWatch.keys()]) unwatch(workerId)
      await supervisor.stop()
      await submitter.stop()
    },
    batchStart: body => submitter.batchStart(body),
    submit: body => submitter.submit(body),
    cancel: body => submitter.cancel(body),
    result: (id, waitMs, signal) => submitter.result(id, waitMs, signal),
    async status (callOptions) {
      const cluster = await leader.callLeader('reward.status', {}, callOptions) as RewardStatus
      return { ...cluster, local: local() }
    },
    local,
    async fetchWork (body, caller, signal) {
      const stage = supervisor.stageOf(body.workerId)
      checkCaller(body.workerId, caller, 'fetch work')
      const pid = supervisor.pidOf(body.workerId)
      supervisor.workerUp(body.workerId)
      // The leader waits up to waitMs; the call itself may also span a failover (and may reach the leader twice: the
      // leader hands the same lease again to the same worker process).
      // A worker fetches when it is done with its earlier lease.
      unwatch(body.workerId)
      const answer = await leader.callLeader('reward.fetch', { node: selfId, workerId: body.workerId, stage, waitMs: body.waitMs, reportSeq: supervisor.reportSeq(), ...(pid !== undefined ? { pid } : {}) },
        { timeoutMs: body.waitMs + 10_000, ...(signal !== undefined ? { signal } : {}) }) as { lease: RewardLease | null }
      if (answer.lease !== null) watch(body.workerId, answer.lease)
      return answer
    },
    registerWorker (body, caller) {
      const b = validateExternalWorker.parse(body)
      return { stage: b.stage, workerIds: supervisor.registerExternal(b.stage, b.slots ?? 1, pidOf(caller, 'register as an external worker')) }
    },
    leave: caller => ({ workerIds: supervisor.leaveExternal(pidOf(caller, 'leave')) }),
    async completeWork (body, caller) {
      supervisor.stageOf(body.workerId)
      checkCaller(body.workerId, caller, 'complete work')
      if (body.reward !== undefined && !Number.isFinite(body.reward)) throw new AgentError('ERR_BAD_REQUEST', 'reward must be a finite number')
      if (leaseWatch.get(body.workerId)?.leaseId === body.leaseId) unwatch(body.workerId)
      return await leader.callLeader('reward.complete', body) as { accepted: true }
    },
  }
}
