/**
 * The job table's transitions, as pure functions of (table, live nodes,
 * time): the leader task (jobs-leader-task.ts) calls them and publishes the
 * result; the tests call them directly. Nothing here reads a clock or the
 * network. Every function returns a new table (the input is not modified) or
 * the same object when nothing changed.
 *
 * Placement (PlexRL §4.3, mesh/policies/placement/): for each QUEUED job in
 * submission order, a ClusterHorizon is built over the live nodes that have
 * the job's `gpusPerNode`, every RUNNING job's footprint is reserved on those
 * of its nodes, and `planPlacement` chooses nodes, phase, stretched period
 * and micro-shifts. `spread-backfill` lets later jobs start while an earlier
 * one does not fit, EASY style: the first job that does not fit claims the
 * nodes whose residents end soonest (claimNodes), and later jobs may use
 * those only if they end before then, so a gang needing idle nodes is not
 * overtaken forever; the other policies keep strict FIFO (the head blocks).
 * A job that fits nowhere stays QUEUED; the leader retries on every
 * membership change and completion.
 *
 * A RUNNING job any of whose nodes is gone goes back to QUEUED (restarting
 * its iterations; the job's own checkpointing is outside this table), and so
 * does the latest colocation beside a job measured over its slowdown bound
 * (guardSlowdowns).
 */
import { AgentError } from '../../../core/errors.ts'
import { ClusterHorizon } from '../../policies/placement/cluster-horizon.ts'
import { footprintEnd } from '../../policies/placement/footprint.ts'
import { claimNodes, planPlacement, type NodeClaim, type PlacementPolicyName } from '../../policies/placement/placement-policy.ts'
import { durationSlots } from '../../policies/placement/ring-horizon.ts'
import { groupId, groupsOf } from './job-groups.ts'
import { measuredOpsThreshold, normalizedSpec, placementJobOf, sameJobSpec, type JobSpec } from './job-spec.ts'
import { maxJobEvents, type JobRecord, type JobTable } from './job-table.ts'
import { guardEviction, type GuardEviction } from '../../policies/placement/slowdown-guard.ts'

/** A node the leader may place on: alive, with its advertised GPU count. */
export interface LiveNode {
  peerId: string
  name: string
  gpus: number
}

export interface PlacementRoundOptions {
  policy: PlacementPolicyName
  /** Most jobs resident on one node. */
  maxJobsPerNode: number
  /** Horizon window, slots. Default 28,800. */
  horizonSlots?: number
  /** With backfill, queued jobs tried that do not fit before the round stops. Default defaultBackfillDepth. */
  backfillDepth?: number
}

export interface SubmitOptions {
  /** Switch cost of a spec that names none, seconds. */
  contextSwitchS: number
  /** Most QUEUED + RUNNING jobs. */
  maxActiveJobs: number
  /** Largest JSON size of the table, bytes (it travels in one mesh message). */
  maxTableBytes: number
  /** COMPLETED jobs kept (oldest dropped first). */
  completedRetained: number
}

export interface SubmitResult { table: JobTable, job: JobRecord, created: boolean }

/** Absolute slot containing `ms` (ms since the epoch). */
export function slotOf (ms: number, slotS: number): number {
  return Math.floor(ms / 1000 / slotS + 1e-9)
}

/**
 * Adds a QUEUED job. The same id with the same spec returns the existing job
 * (created: false, table unchanged); another spec under that id is
 * ERR_JOB_CONFLICT; a full table is ERR_JOBS_FULL (nothing changes).
 */
export function submitJob (table: JobTable, spec: JobSpec, nowMs: number, options: SubmitOptions): SubmitResult {
  const normalized = normalizedSpec(spec, options.contextSwitchS)
  const existing = table.jobs.find(j => j.id === spec.id)
  if (existing !== undefined) {
    if (!sameJobSpec(existing.spec, normalized)) throw new AgentError('ERR_JOB_CONFLICT', `job ${spec.id} exists with another spec (${existing.state}); submit it under a new id`)
    return { table, job: existing, created: false }
  }
  // A worker group's id (job-groups.ts) must name nothing else.
  const taken = new Set(table.jobs.flatMap(j => [j.id, ...groupsOf(j).map(g => g.id)]))
  const clash = [spec.id, ...(normalized.layout?.groups.map(g => groupId(spec.id, g.component)) ?? [])].find(id => taken.has(id))
  if (clash !== undefined) throw new AgentError('ERR_JOB_CONFLICT', `${clash} already names a job or a workflow job's worker group; submit under another id`)
  const active = table.jobs.filter(j => j.state !== 'COMPLETED').length
  if (active >= options.maxActiveJobs) throw new AgentError('ERR_JOBS_FULL', `the cluster already holds ${active} queued or running jobs (placement.maxActiveJobs)`)
  const job: JobRecord = { id: spec.id, spec: normalized, state: 'QUEUED', nodes: [], nodeNames: [], placement: null, submittedAtMs: nowMs, startedAtMs: null, completedAtMs: null, completedBy: null, requeues: 0 }
  const next = trimCompleted({ ...table, revision: table.revision + 1, jobs: [...table.jobs, job] }, options.completedRetained)
  const bytes = Buffer.byteLength(JSON.stringify(next))
  if (bytes > options.maxTableBytes) throw new AgentError('ERR_JOBS_FULL', `the job table would take ${bytes} bytes, more than the ${options.maxTableBytes} one mesh message carries; wait for jobs to complete`)
  return { table: next, job, created: true }
}

/** Drops the oldest COMPLETED jobs beyond `retained`. */
export function trimCompleted (table: JobTable, retained: number): JobTable {
  const completed = table.jobs.filter(j => j.state === 'COMPLETED').sort((a, b) => (a.completedAtMs ?? 0) - (b.completedAtMs ?? 0))
  if (completed.length <= retained) return table
  const drop = new Set(completed.slice(0, completed.length - retained).map(j => j.id))
  return { ...table, jobs: table.jobs.filter(j => !drop.has(j.id)) }
}

/**
 * Marks a RUNNING job COMPLETED. Completing a COMPLETED job returns the table
 * unchanged (idempotent); a QUEUED job is ERR_JOB_CONFLICT, an unknown id
 * ERR_JOB_NOT_FOUND.
 */
export function completeJob (table: JobTable, id: string, nowMs: number, by: 'elapsed' | 'reported', completedRetained: number): JobTable {
  const job = table.jobs.find(j => j.id === id)
  if (job === undefined) throw new AgentError('ERR_JOB_NOT_FOUND', `no job ${id}`)
  if (job.state === 'COMPLETED') return table
  if (job.state === 'QUEUED') throw new AgentError('ERR_JOB_CONFLICT', `job ${id} is QUEUED, not running: it cannot complete`)
  const done: JobRecord = { ...job, state: 'COMPLETED', completedAtMs: nowMs, completedBy: by }
  return trimCompleted(replaceJob(table, done), completedRetained)
}

/** Puts RUNNING jobs with a node that is gone back in the queue. */
export function requeueLost (table: JobTable, gone: (peerId: string) => boolean, nowMs: number): { table: JobTable, requeued: string[] } {
  const requeued = table.jobs.filter(j => j.state === 'RUNNING' && j.nodes.some(gone)).map(j => j.id)
  if (requeued.length === 0) return { table, requeued }
  const ids = new Set(requeued)
  return {
    table: {
      ...table,
      revision: table.revision + 1,
      jobs: table.jobs.map(j => {
        if (!ids.has(j.id)) return j
        const lost = j.nodes.flatMap((p, i) => gone(p) ? [j.nodeNames[i] ?? p] : [])
        return withEvent({ ...j, state: 'QUEUED', nodes: [], nodeNames: [], placement: null, startedAtMs: null, requeues: j.requeues + 1 }, nowMs, `requeued: node ${lost.join(', ')} of its group is gone`)
      }),
    },
    requeued,
  }
}

/** The job with `message` appended to its events (the oldest dropped beyond maxJobEvents). */
function withEvent (job: JobRecord, atMs: number, message: string): JobRecord {
  const events = [...(job.events ?? []), { atMs: Math.floor(atMs), message: message.slice(0, 400) }]
  return { ...job, events: events.slice(-maxJobEvents) }
}

/**
 * The slowdown guard, live (mesh/policies/placement/slowdown-guard.ts): a
 * RUNNING job measured (over at least measuredOpsThreshold operations since
 * the guard last acted for it) beyond its maxSlowdown sends the latest
 * colocation on its nodes back to the queue, its measured profile kept for
 * its next placement. Jobs in order of their excess over the bound; each job
 * is evicted at most once a round. Both jobs get the reason in their events.
 * The evicted job's queued operations fail (ERR_JOB_NOT_RUNNING) and its
 * workers must register again wherever it is placed next; the slowed job's
 * nodes take no new colocation while it stays over its bound (placeQueued).
 */
export function guardSlowdowns (table: JobTable, nowMs: number): { table: JobTable, evicted: GuardEviction[] } {
  const slowed = table.jobs
    .filter(j => j.state === 'RUNNING' && j.measured !== undefined && j.measured.ops - (j.guardedAtOps ?? 0) >= measuredOpsThreshold && j.measured.slowdown > j.spec.maxSlowdown + 1e-9)
    .sort((a, b) => b.measured!.slowdown / b.spec.maxSlowdown - a.measured!.slowdown / a.spec.maxSlowdown)
  if (slowed.length === 0) return { table, evicted: [] }
  const evicted: GuardEviction[] = []
  const gone = new Set<string>()
  let jobs = table.jobs
  const placedSeq = (j: JobRecord): number => j.startedAtMs ?? 0
  for (const s of slowed) {
    if (gone.has(s.id)) continue
    const others = jobs.filter(j => j.state === 'RUNNING' && !gone.has(j.id)).map(j => ({ id: j.id, nodes: j.nodes, placedSeq: placedSeq(j) }))
    const e = guardEviction({ id: s.id, nodes: s.nodes, placedSeq: placedSeq(s), slowdown: s.measured!.slowdown, maxSlowdown: s.spec.maxSlowdown }, others)
    if (e === undefined) continue
    evicted.push(e)
    gone.add(e.evict)
    jobs = jobs.map(j => {
      if (j.id === e.evict) {
        const back: JobRecord = { ...j, state: 'QUEUED', nodes: [], nodeNames: [], placement: null, startedAtMs: null, evictions: (j.evictions ?? 0) + 1, guardedAtOps: j.measured?.ops ?? j.guardedAtOps }
        return withEvent(back, nowMs, `evicted by the slowdown guard: ${e.reason}`)
      }
      if (j.id === s.id) return withEvent({ ...j, guardedAtOps: s.measured!.ops }, nowMs, `slowdown guard: ${e.reason}`)
      return j
    })
  }
  if (evicted.length === 0) return { table, evicted }
  return { table: { ...table, revision: table.revision + 1, jobs }, evicted }
}

/** Queued jobs a backfill round tries beyond those it places (the simulator's bound too): later ones wait for a later round. */
export const defaultBackfillDepth = 32

/**
 * Places what fits of the QUEUED jobs on `nodes` at `nowMs`; returns the ids
 * placed, in order. One placement view is built per GPU-count class of the
 * queued jobs and kept current as jobs are placed, so a round costs one view
 * build plus one planPlacement per job tried; with backfill, at most
 * `backfillDepth` jobs that do not fit are tried.
 */
export function placeQueued (table: JobTable, nodes: readonly LiveNode[], nowMs: number, options: PlacementRoundOptions): { table: JobTable, placed: string[] } {
  const backfill = options.policy === 'spread-backfill'
  const depth = options.backfillDepth ?? defaultBackfillDepth
  const nowSlot = Math.ceil(nowMs / 1000 / table.slotS - 1e-9)
  const byPeer = [...nodes].sort((a, b) => a.peerId < b.peerId ? -1 : a.peerId > b.peerId ? 1 : 0)
  // The admission bound, live (PlexRL §4.3): no new colocation beside a job whose measured slowdown already exceeds its bound.
  const overloaded = new Set(table.jobs.filter(j => j.state === 'RUNNING' && j.measured !== undefined && j.measured.ops >= measuredOpsThreshold && j.measured.slowdown > j.spec.maxSlowdown).flatMap(j => j.nodes))
  const views = new Map<number, PlacementView>()
  const viewFor = (gpusPerNode: number): PlacementView => {
    let view = views.get(gpusPerNode)
    if (view === undefined) {
      const eligible = byPeer.filter(n => n.gpus >= gpusPerNode && !overloaded.has(n.peerId))
      view = { eligible, index: new Map(eligible.map((n, i) => [n.peerId, i])), horizon: eligible.length === 0 ? undefined : horizonOf(table, eligible, nowSlot, options) }
      views.set(gpusPerNode, view)
    }
    return view
  }
  let current = table
  const placed: string[] = []
  let misses = 0
  /** The first job that did not fit: its claim on nodes (by peer id) that backfilled jobs must leave by `fromSlot`. */
  let claim: PeerClaim | undefined
  for (const queued of table.jobs.filter(j => j.state === 'QUEUED')) {
    const outcome = placeOne(viewFor(queued.spec.gpusPerNode), queued, nowSlot, nowMs, options, claim, backfill && claim === undefined)
    if (outcome.job === undefined) {
      if (!backfill || ++misses >= depth) break
      claim ??= outcome.claim
      continue
    }
    current = replaceJob(current, outcome.job)
    placed.push(outcome.job.id)
    for (const view of views.values()) if (view.horizon !== undefined) reserveRecord(view.horizon, view.index, outcome.job, table.slotS, nowSlot)
  }
  return { table: current, placed }
}

interface PeerClaim { jobId: string, peerIds: readonly string[], fromSlot: number }

/** A round's view of the nodes one class of jobs may use (node i = eligible[i]; no horizon without nodes). */
interface PlacementView { eligible: readonly LiveNode[], index: ReadonlyMap<string, number>, horizon: ClusterHorizon | undefined }

/**
 * Places `queued` if it fits in `view`. When it does not and `wantClaim` is
 * set, also returns its claim over the nodes it could run on, from the same view.
 */
function placeOne (view: PlacementView, queued: JobRecord, nowSlot: number, nowMs: number, options: PlacementRoundOptions, peerClaim: PeerClaim | undefined, wantClaim: boolean): { job: JobRecord } | { job: undefined, claim: PeerClaim | undefined } {
  const { eligible, index, horizon } = view
  if (horizon === undefined || eligible.length < queued.spec.nodes) return { job: undefined, claim: undefined }
  const claim: NodeClaim | undefined = peerClaim === undefined
    ? undefined
    : { jobId: peerClaim.jobId, fromSlot: peerClaim.fromSlot, nodes: peerClaim.peerIds.map(p => index.get(p)).filter((i): i is number => i !== undefined).sort((a, b) => a - b) }
  const job = placementJobOf(queued.spec, queued.spec.iterations, queued.measured)
  const decision = planPlacement(horizon, job, { policy: options.policy, nowSlot, maxJobsPerNode: options.maxJobsPerNode, claim })
  if (decision === undefined) {
    const own = wantClaim ? claimNodes(horizon, job, nowSlot) : undefined
    return { job: undefined, claim: own === undefined ? undefined : { jobId: own.jobId, peerIds: own.nodes.map(i => eligible[i]!.peerId), fromSlot: own.fromSlot } }
  }
  const chosen = decision.nodes.map(i => eligible[i]!)
  const f = decision.footprint
  return {
    job: {
      ...queued,
      state: 'RUNNING',
      nodes: chosen.map(n => n.peerId),
      nodeNames: chosen.map(n => n.name),
      placement: { mode: decision.mode, startSlot: f.startSlot, periodSlots: f.periodSlots, periods: f.periods, busy: f.busy.map(([a, b]) => [a, b] as [number, number]), shiftSlots: decision.shiftSlots, predictedSlowdown: decision.predictedSlowdown, strict: decision.strict },
      startedAtMs: nowMs,
    },
  }
}

/**
 * The placement view over `eligible` (node i = eligible[i]) at `nowSlot`: the
 * footprint of every RUNNING job reserved on those of its nodes that are
 * eligible, as admitted (conflicts included, never re-checked).
 */
export function horizonOf (table: JobTable, eligible: readonly LiveNode[], nowSlot: number, options: Pick<PlacementRoundOptions, 'horizonSlots'> = {}): ClusterHorizon {
  const index = new Map(eligible.map((n, i) => [n.peerId, i]))
  const horizon = new ClusterHorizon({ nodes: eligible.length, slotS: table.slotS, startSlot: nowSlot, ...(options.horizonSlots !== undefined ? { slots: options.horizonSlots } : {}) })
  for (const r of table.jobs) reserveRecord(horizon, index, r, table.slotS, nowSlot)
  return horizon
}

/** Reserves a RUNNING job's footprint on those of its nodes in `index` (nothing for other jobs or a footprint already over). */
function reserveRecord (horizon: ClusterHorizon, index: ReadonlyMap<string, number>, r: JobRecord, slotS: number, nowSlot: number): void {
  if (r.state !== 'RUNNING' || r.placement === null) return
  const on = r.nodes.map(p => index.get(p)).filter((i): i is number => i !== undefined)
  const footprint = { startSlot: r.placement.startSlot, periodSlots: r.placement.periodSlots, periods: r.placement.periods, busy: r.placement.busy }
  if (on.length === 0 || footprintEnd(footprint) <= nowSlot) return
  const basePeriodSlots = Math.max(1, durationSlots(r.spec.periodS, slotS))
  const dedicated = r.placement.mode === 'dedicated'
  // Conflict costs between running jobs are not in the job table: a resident's prediction is its plan's stretch.
  horizon.reserve({ jobId: r.id, nodes: on, footprint, basePeriodSlots, dedicated, maxSlowdown: r.spec.maxSlowdown, planSlowdown: dedicated ? 1 : r.placement.periodSlots / basePeriodSlots }, { allowConflicts: true })
}

function replaceJob (table: JobTable, job: JobRecord): JobTable {
  return { ...table, revision: table.revision + 1, jobs: table.jobs.map(j => j.id === job.id ? job : j) }
}
