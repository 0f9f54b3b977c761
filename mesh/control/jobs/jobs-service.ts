/**
 * Jobs on every agent: the job table of the latest `jobs` decision this
 * agent applied (or adopted from a snapshot), answered without contacting
 * the leader, and submissions / completion reports forwarded to the acting
 * leader (leader calls, jobs-leader-task.ts). A spec is validated here first,
 * so a bad file is refused without a round trip; the leader validates again.
 */
import type { Logger } from 'pino'
import type { LeaderService } from '../../election/leader-service.ts'
import { parseJobSpec } from './job-spec.ts'
import { jobTableOf, jobTableProblem, type JobTable, type JobsView } from './job-table.ts'
import { jobsDecisionKind, type CompleteAnswer, type SubmitAnswer } from './jobs-leader-task.ts'
import { parseOpRequest, type JobsTop, type OpAnswer } from './op-wire.ts'
import { AgentError } from '../../../core/errors.ts'
import { randomUUID } from 'node:crypto'

export interface JobsServiceOptions {
  /** Seconds per slot shown before any table arrived. */
  slotS: number
  /** How long a submission waits for an acting leader, ms (covers a failover). Default 15000. */
  callTimeoutMs?: number
}

export interface JobsServiceComponents {
  logger: Logger
  leader: Pick<LeaderService, 'onApplied' | 'desiredState' | 'view' | 'callLeader'>
  /** This agent's peer id (which jobs are placed here). */
  selfPeerId: string
}

export interface JobsService {
  start(): void
  stop(): void
  list(): JobsView
  submit(spec: unknown, options?: { signal?: AbortSignal }): Promise<SubmitAnswer>
  complete(id: string, options?: { signal?: AbortSignal }): Promise<CompleteAnswer>
  /**
   * Runs an operation of a live job (op-scheduler.ts) and resolves once every
   * rank ran it. `body` is { name, args?, opId? } (opId default: a fresh id).
   * Long-polls the acting leader with the same opId until the answer comes,
   * across leader changes; `signal` (the caller went away) stops asking — the
   * operation itself is not cancelled.
   */
  runOp(job: string, body: unknown, options?: { signal?: AbortSignal }): Promise<OpAnswer>
  top(): Promise<JobsTop>
}

export function createJobsService (options: JobsServiceOptions, components: JobsServiceComponents): JobsService {
  const { leader, logger: log } = components
  /** The payload applied last, and the decision it came from (compared by identity with the desired state). */
  let applied: { payload: unknown, epoch: number, seq: number } | undefined
  let unsubscribe: (() => void) | undefined
  const timeoutMs = options.callTimeoutMs ?? 15_000

  return {
    start () {
      unsubscribe ??= leader.onApplied(d => {
        if (d.kind !== jobsDecisionKind) return
        if (jobTableOf(d.payload) === undefined) log.error({ epoch: d.epoch, seq: d.seq, problem: jobTableProblem(d.payload) }, 'jobs: decision without a valid job table ignored')
        applied = { payload: d.payload, epoch: d.epoch, seq: d.seq }
      })
    },
    stop () { unsubscribe?.(); unsubscribe = undefined },
    list () {
      const payload = leader.desiredState()[jobsDecisionKind]
      const view = leader.view()
      // A snapshot replaced the desired state after the last decision seen here: its position is the applied one.
      const decision = payload === undefined ? null : applied?.payload === payload ? { epoch: applied.epoch, seq: applied.seq } : { epoch: view.applied.epoch, seq: view.applied.seq }
      const table: JobTable = jobTableOf(payload) ?? { slotS: options.slotS, revision: 0, contextSwitches: 0, jobs: [] }
      const local = table.jobs.filter(j => j.state === 'RUNNING' && j.nodes.includes(components.selfPeerId)).map(j => j.id)
      return { decision, leaderId: view.leaderId, ...table, local }
    },
    async submit (spec, o = {}) {
      const parsed = parseJobSpec(spec)
      return await leader.callLeader('jobs.submit', { spec: parsed }, { timeoutMs, ...o }) as SubmitAnswer
    },
    async complete (id, o = {}) {
      return await leader.callLeader('jobs.complete', { id }, { timeoutMs, ...o }) as CompleteAnswer
    },
    async runOp (job, body, o = {}) {
      const b = body !== null && typeof body === 'object' && !Array.isArray(body) ? body as Record<string, unknown> : undefined
      if (b === undefined) throw new AgentError('ERR_BAD_REQUEST', 'an operation is { name, args?, opId? }')
      const request = parseOpRequest({ ...b, job, opId: b.opId ?? `op-${randomUUID()}` })
      for (;;) {
        if (o.signal?.aborted === true) throw new AgentError('ERR_UNAVAILABLE', 'the caller went away')
        const answer = await leader.callLeader('jobs.op', request, { timeoutMs, ...o }) as OpAnswer | { pending: true }
        if (!('pending' in answer)) return answer
      }
    },
    async top () {
      return await leader.callLeader('jobs.top', {}, { timeoutMs }) as JobsTop
    },
  }
}
