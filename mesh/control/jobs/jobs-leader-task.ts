/**
 * The leader-only `jobs` task: placement (job-scheduler.ts) and the runtime
 * schedule (job-runtime.ts) over the live membership, published as fenced
 * `jobs` decisions carrying the whole job table (job-table.ts).
 *
 * Contract:
 * - It starts from the desired state the previous leader left (the latest
 *   applied `jobs` payload); it never requeues or moves a job because it
 *   just took over. A job's node is gone when the mesh holds it dead, or
 *   when it has been unknown for `unknownNodeGraceMs` since this task
 *   started (dead members are forgotten after mesh.deadRetentionMs).
 * - Leader calls (leader-calls.ts):
 *     jobs.submit   { spec }  → { job, created, decision }   idempotent by job id
 *     jobs.complete { id }    → { job, decision }            idempotent
 *   Both answer only after the decision holding the change is committed (or,
 *   when nothing changes, once the log it answers from is committed), so a
 *   later leader has every acknowledged job. A submission with an invalid
 *   spec, or refused, changes nothing.
 * - Changes are applied one at a time (a chain): each builds the next table
 *   from the last published one, publishes it, and only then adopts it.
 *   When publishing fails (leadership lost) the change is dropped and the
 *   caller gets the error (leader calls retry it on the next leader).
 * - Placement rounds run on every membership change, every completion and
 *   every `rescheduleIntervalMs`; a round that changes nothing publishes
 *   nothing.
 * - Live jobs (spec.live): their operations are admitted by the operation
 *   scheduler (op-scheduler.ts), reached by two more leader calls:
 *     jobs.op  OpRequest → OpAnswer, or { pending: true } after a long-poll
 *              round of opLongPollMs (the caller asks again, same opId)
 *     jobs.top {}        → JobsTop
 *   Every placement.measuredPublishMs the figures it measured are written
 *   into the live jobs' records (`measured`), so placement after a requeue,
 *   the admission bound and `agentctl jobs show` use measured figures; then
 *   the slowdown guard (job-scheduler.ts guardSlowdowns) evicts the latest
 *   colocation beside a job measured over its bound, and what fits is
 *   placed. The modeled runtime schedule (job-runtime.ts) tracks the other
 *   jobs only.
 */
import type { Logger } from 'pino'
import { AgentError } from '../../../core/errors.ts'
import type { LeaderContext, LeaderTask } from '../../election/leader-service.ts'
import type { Mesh } from '../../membership/mesh-service.ts'
import { parseJobSpec } from './job-spec.ts'
import { completeJob, guardSlowdowns, placeQueued, requeueLost, submitJob, type LiveNode } from './job-scheduler.ts'
import type { GuardEviction } from '../../policies/placement/slowdown-guard.ts'
import { emptyJobTable, jobTableOf, jobTableProblem, type JobRecord, type JobTable } from './job-table.ts'
import type { JobCompleteAnswer as CompleteAnswer, JobSubmitAnswer as SubmitAnswer } from './job-table.ts'
import { createJobRuntime } from './job-runtime.ts'
import type { PlacementConfig } from './jobs-config.ts'
import type { OpDispatch } from './op-dispatch.ts'
import { createOpScheduler, type MeasuredJob } from './op-scheduler.ts'
import { parseOpRequest } from './op-wire.ts'

export const jobsDecisionKind = 'jobs'

export interface JobsLeaderTaskOptions {
  config: PlacementConfig
  /** Largest JSON size of the job table, bytes (it must fit in one mesh message). */
  maxTableBytes: number
  /** How long a job's node may be unknown to a new leader before it counts as gone, ms. Default 10000. */
  unknownNodeGraceMs?: number
  /** How long one jobs.op call waits before answering { pending: true }, ms (under the leader call's 30 s). Default 20000. */
  opLongPollMs?: number
}

export interface JobsLeaderTaskComponents {
  logger: Logger
  mesh: Pick<Mesh, 'peers' | 'subscribe'>
  /** This agent as a placement target (peers() lists only the others). */
  self(): LiveNode
  /** Wall clock, ms since the epoch. Default Date.now. */
  clockMs?: () => number
  /** Sends live operations to the nodes (op-dispatch.ts); without it jobs.op answers ERR_UNAVAILABLE. */
  dispatch?: OpDispatch
}

/** The answers' schemas live with the job table's views (job-table.ts), declared once for the API. */
export type { SubmitAnswer, CompleteAnswer }

const defaultUnknownNodeGraceMs = 10_000

export function createJobsLeaderTask (options: JobsLeaderTaskOptions, components: JobsLeaderTaskComponents): LeaderTask {
  const { config } = options
  const clockMs = components.clockMs ?? Date.now
  const log = components.logger
  return {
    name: 'jobs',
    kinds: { [jobsDecisionKind]: p => jobTableOf(p) === undefined ? jobTableProblem(p) : undefined },
    start (context: LeaderContext) {
      const startedMs = clockMs()
      const previous = context.desiredState()[jobsDecisionKind]
      if (previous !== undefined && jobTableOf(previous) === undefined) {
        // Never start empty over acknowledged jobs: refuse, loudly, until an operator repairs the state.
        const problem = jobTableProblem(previous)
        log.error({ problem }, 'jobs: the committed desired state holds no valid job table; the jobs task refuses to run rather than start empty')
        const refuse = async (): Promise<never> => { throw new AgentError('ERR_ELECTION_STATE', `the committed job table is invalid (${problem}); the leader refuses to replace it with an empty one`) }
        for (const method of ['jobs.submit', 'jobs.complete', 'jobs.op', 'jobs.top']) context.handleCalls(method, refuse)
        return
      }
      let table: JobTable = jobTableOf(previous) ?? emptyJobTable(config.slotS)
      let chain: Promise<unknown> = Promise.resolve()
      const switchesBase = table.contextSwitches
      const runtime = createJobRuntime({ scheduler: config.runtime, slotS: table.slotS }, {
        clockMs,
        onJobDone: id => { void change(t => completeJob(t, id, clockMs(), 'elapsed', config.completedJobsRetained)).catch(err => log.warn({ err: (err as Error).message, job: id }, 'jobs: completion not published')) },
      })

      /** Applies `transform` to the current table; publishes and adopts the result when it differs. */
      const change = <T>(transform: (t: JobTable) => JobTable | { table: JobTable, answer: T }): Promise<{ answer: T | undefined, decision: { epoch: number, seq: number } | null }> => {
        const run = chain.then(async () => {
          if (context.signal.aborted) throw new AgentError('ERR_NOT_LEADER', 'this agent stopped acting as leader')
          const out = transform(table)
          const next = 'answer' in out ? out.table : out
          const answer = 'answer' in out ? out.answer : undefined
          // Nothing to decide, but the answer rests on the log's state: only once that is committed (an idempotent repeat of a submission whose commit failed).
          if (next === table) return { answer, decision: await context.barrier() }
          const withSwitches = { ...next, contextSwitches: Math.max(next.contextSwitches, table.contextSwitches, switchesBase + runtime.contextSwitches) }
          const decision = await context.decide(jobsDecisionKind, withSwitches)
          table = withSwitches
          runtime.sync(modeledRunning(table))
          ops?.tableChanged()
          return { answer, decision }
        })
        chain = run.catch(() => {})
        return run
      }

      const liveNodes = (): LiveNode[] => [components.self(), ...components.mesh.peers()
        .filter(p => p.state === 'alive' && p.record !== null)
        .map(p => ({ peerId: p.peerId, name: p.node, gpus: p.record!.gpus.length }))]

      const gone = (): ((peerId: string) => boolean) => {
        const self = components.self().peerId
        const states = new Map(components.mesh.peers().map(p => [p.peerId, p.state]))
        const graceOver = clockMs() - startedMs >= (options.unknownNodeGraceMs ?? defaultUnknownNodeGraceMs)
        return peerId => peerId !== self && (states.get(peerId) === 'dead' || (graceOver && !states.has(peerId)))
      }

      const reschedule = (why: string): void => {
        void change(t => {
          const lost = requeueLost(t, gone(), clockMs())
          if (lost.requeued.length > 0) log.info({ jobs: lost.requeued, why }, 'jobs: requeued (a node of their group is gone)')
          const round = placeQueued(lost.table, liveNodes(), clockMs(), { policy: config.policy, maxJobsPerNode: config.maxJobsPerNode })
          if (round.placed.length > 0) log.info({ jobs: round.placed, why }, 'jobs: placed')
          return round.table
        }).catch(err => log.warn({ err: (err as Error).message, why }, 'jobs: placement round not published'))
      }

      context.handleCalls('jobs.submit', async body => {
        const spec = parseJobSpec((body as { spec?: unknown } | null)?.spec ?? body)
        const submitted = await change(t => {
          const r = submitJob(t, spec, clockMs(), { contextSwitchS: config.contextSwitchS, maxActiveJobs: config.maxActiveJobs, maxTableBytes: options.maxTableBytes, completedRetained: config.completedJobsRetained })
          if (!r.created) return { table: t, answer: { job: r.job, created: false } }
          // Placed in the same decision when it fits now.
          const round = placeQueued(r.table, liveNodes(), clockMs(), { policy: config.policy, maxJobsPerNode: config.maxJobsPerNode })
          return { table: round.table, answer: { job: round.table.jobs.find(j => j.id === spec.id)!, created: true } }
        })
        return { ...submitted.answer!, decision: submitted.decision } satisfies SubmitAnswer
      })

      context.handleCalls('jobs.complete', async body => {
        const id = (body as { id?: unknown } | null)?.id
        if (typeof id !== 'string' || id === '') throw new AgentError('ERR_BAD_REQUEST', 'jobs.complete takes { id }')
        const done = await change(t => {
          const next = completeJob(t, id, clockMs(), 'reported', config.completedJobsRetained)
          const round = placeQueued(next, liveNodes(), clockMs(), { policy: config.policy, maxJobsPerNode: config.maxJobsPerNode })
          return { table: round.table, answer: next.jobs.find(j => j.id === id) ?? t.jobs.find(j => j.id === id)! }
        })
        return { job: done.answer!, decision: done.decision } satisfies CompleteAnswer
      })

      const ops = components.dispatch === undefined
        ? undefined
        : createOpScheduler({ scheduler: config.runtime, epoch: context.epoch }, { logger: log, dispatch: components.dispatch, table: () => table, clockMs })
      const firstOpMs = new Map<string, number>()
      context.handleCalls('jobs.op', async body => {
        if (ops === undefined) throw new AgentError('ERR_UNAVAILABLE', 'this leader runs no operation scheduler')
        const request = parseOpRequest(body)
        if (!firstOpMs.has(request.job)) firstOpMs.set(request.job, clockMs())
        let timer: NodeJS.Timeout | undefined
        const pending = new Promise<{ pending: true }>(resolve => { timer = setTimeout(() => resolve({ pending: true }), options.opLongPollMs ?? 20_000) })
        try {
          return await Promise.race([ops.submit(request), pending])
        } finally {
          clearTimeout(timer)
        }
      })
      context.handleCalls('jobs.top', async () => {
        if (ops === undefined) throw new AgentError('ERR_UNAVAILABLE', 'this leader runs no operation scheduler')
        return ops.top()
      })
      const publishMeasured = (): void => {
        if (ops === undefined || ops.measured().size === 0) return
        void change(t => {
          const round = measuredRound(t, ops.measured(), firstOpMs, clockMs(), config.slowdownGuard)
          if (round.evicted.length === 0) return round.table
          for (const e of round.evicted) log.warn({ job: e.evict, reason: e.reason }, 'jobs: evicted by the slowdown guard')
          return placeQueued(round.table, liveNodes(), clockMs(), { policy: config.policy, maxJobsPerNode: config.maxJobsPerNode }).table
        }).catch(err => log.warn({ err: (err as Error).message }, 'jobs: measured profiles not published'))
      }
      const measuredTimer = setInterval(publishMeasured, config.measuredPublishMs)
      measuredTimer.unref()

      const unsubscribe = components.mesh.subscribe(e => reschedule(`member ${e.node || e.peerId} ${e.to}`))
      const timer = setInterval(() => reschedule('interval'), config.rescheduleIntervalMs)
      timer.unref()
      context.signal.addEventListener('abort', () => {
        clearInterval(timer)
        clearInterval(measuredTimer)
        unsubscribe()
        runtime.stop()
        ops?.stop()
      }, { once: true })
      // Resume the runtime schedule of the jobs the previous leader left running, then place what fits.
      runtime.sync(modeledRunning(table))
      reschedule('took over')
    },
  }
}

/** RUNNING jobs the modeled runtime schedule replays: those without live workers. */
function modeledRunning (table: JobTable): JobRecord[] {
  return table.jobs.filter(j => j.state === 'RUNNING' && j.spec.live !== true)
}

/**
 * One publication of measured profiles: the table with them (withMeasured),
 * then, with `slowdownGuard`, the guard's evictions (job-scheduler.ts
 * guardSlowdowns). The caller places what fits after an eviction.
 */
export function measuredRound (table: JobTable, measured: ReadonlyMap<string, MeasuredJob>, firstOpMs: ReadonlyMap<string, number>, nowMs: number, slowdownGuard: boolean): { table: JobTable, evicted: GuardEviction[] } {
  const next = withMeasured(table, measured, firstOpMs, nowMs)
  return slowdownGuard ? guardSlowdowns(next, nowMs) : { table: next, evicted: [] }
}

/**
 * The table with each live job's measured profile (op-scheduler.ts figures of
 * this leader); the same table object when no figure changed (nothing to publish).
 */
export function withMeasured (table: JobTable, measured: ReadonlyMap<string, MeasuredJob>, firstOpMs: ReadonlyMap<string, number>, nowMs: number): JobTable {
  let changed = false
  const jobs = table.jobs.map(j => {
    const m = measured.get(j.id)
    if (m === undefined || m.ops === 0 || j.state !== 'RUNNING') return j
    const runS = m.runMs / 1000
    const lostS = (m.switchMs + m.queuedMs) / 1000
    // Wall time since its first operation: its controller's own work between operations included.
    const wallS = Math.max((nowMs - (firstOpMs.get(j.id) ?? nowMs)) / 1000, runS + lostS, 1e-9)
    const round = (x: number): number => Math.round(x * 1e6) / 1e6
    const profile = {
      ops: m.ops,
      runS: round(runS),
      switches: m.switches,
      switchS: round(m.switches > 0 ? m.switchMs / m.switches / 1000 : 0),
      queuedS: round(m.queuedMs / 1000),
      // The job is serial: every second lost to sharing lengthens its run by a second (PlexRL's slowdown).
      slowdown: round(m.runMs > 0 ? Math.max(1, wallS / Math.max(wallS - lostS, runS, 1e-9)) : 1),
      busyFraction: round(Math.min(1, runS / wallS)),
    }
    if (j.measured !== undefined && j.measured.ops === profile.ops && j.measured.switches === profile.switches) return j
    changed = true
    return { ...j, measured: { ...profile, updatedAtMs: Math.floor(nowMs) } }
  })
  return changed ? { ...table, revision: table.revision + 1, jobs } : table
}
