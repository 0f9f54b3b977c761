/**
 * The placement trace read by `agentctl sim placement` and written by
 * `agentctl sim trace placement` (PlexRL §6.3 replay):
 *
 *   { "cluster": { "nodes", "gpusPerNode", "contextSwitchS"?, "maxJobsPerNode"? },
 *     "jobs": [ { "id", "submitS", "nodes", "periodS", "iterations",
 *                 "segments": [ { "offsetS", "durationS" } ], "maxSlowdown",
 *                 "profiled"?, "switchS"? } ] }
 *
 * - Times are seconds. `segments` are the GPU-busy parts of one period on the
 *   job's node group (the rest of the period it waits on rollout elsewhere);
 *   they are ordered, do not overlap and end within `periodS`.
 * - `nodes` is the gang size (whole nodes of `gpusPerNode` GPUs each).
 * - `maxSlowdown` (>= 1) bounds the job's slowdown for admission (§7.2).
 * - `profiled` (default true): false = no trace yet, the job cold-starts on
 *   dedicated nodes and is repacked after one profiled period (§4.3.2).
 * - `switchS`: the job's context-switch cost (offload + onload), default the
 *   cluster's `contextSwitchS` (default 10 s).
 */
import { Type, type Static } from '@sinclair/typebox'
import { createInputValidator } from '../../core/validate-input.ts'
import { createSeededRandom } from '../../core/seeded-random.ts'

export const segmentSchema = Type.Object({
  offsetS: Type.Number({ minimum: 0, description: 'start within the period, seconds' }),
  durationS: Type.Number({ exclusiveMinimum: 0, description: 'GPU-busy time, seconds' }),
}, { additionalProperties: false })

/** Upper bounds of the numbers that reach the placement horizon and the schedulers (a period of 1e308 s is not a job). */
export const maxPeriodS = 7 * 24 * 3600
export const maxIterations = 1_000_000_000

/** The fields of a job shared by traces and by jobs submitted to a live cluster (mesh/control/jobs/job-spec.ts). */
export const jobFields = {
  id: Type.String({ minLength: 1 }),
  nodes: Type.Integer({ minimum: 1 }),
  periodS: Type.Number({ exclusiveMinimum: 0, maximum: maxPeriodS, description: 'seconds, at most a week' }),
  iterations: Type.Integer({ minimum: 1, maximum: maxIterations }),
  segments: Type.Array(segmentSchema, { minItems: 1 }),
  maxSlowdown: Type.Number({ minimum: 1, maximum: 1000 }),
  profiled: Type.Optional(Type.Boolean()),
  switchS: Type.Optional(Type.Number({ minimum: 0, maximum: 3600, description: 'context switch cost, seconds (at most an hour)' })),
}

const jobSchema = Type.Object({
  ...jobFields,
  submitS: Type.Number({ minimum: 0 }),
  runScale: Type.Optional(Type.Number({ minimum: 0.1, maximum: 10, description: 'simulation only: the segments really take this factor of the traced durations (a stale or optimistic profile); default 1' })),
}, { additionalProperties: false })

export const placementTraceSchema = Type.Object({
  cluster: Type.Object({
    nodes: Type.Integer({ minimum: 1 }),
    gpusPerNode: Type.Integer({ minimum: 1 }),
    contextSwitchS: Type.Optional(Type.Number({ minimum: 0 })),
    maxJobsPerNode: Type.Optional(Type.Integer({ minimum: 1 })),
  }, { additionalProperties: false }),
  jobs: Type.Array(jobSchema, { minItems: 1 }),
}, { additionalProperties: false })

export type PlacementTrace = Static<typeof placementTraceSchema>
export type PlacementTraceJob = Static<typeof jobSchema>

export const defaultContextSwitchS = 10

const validator = createInputValidator(placementTraceSchema, 'ERR_TRACE_INVALID', 'placement trace', (trace, add) => {
  const ids = new Set<string>()
  trace.jobs.forEach((job, j) => {
    const at = `jobs[${j}]`
    if (ids.has(job.id)) add(`${at}.id`, `duplicate job id "${job.id}"`)
    ids.add(job.id)
    if (job.nodes > trace.cluster.nodes) add(`${at}.nodes`, `needs ${job.nodes} nodes, the cluster has ${trace.cluster.nodes}`)
    checkJobSegments(job, at, add)
  })
})

/**
 * Slack, seconds, when segment ends are compared with the next offset or the
 * period: offsets are written in decimal and an end is computed in binary
 * floating point (172.2 + 0 reads back as 172.20000000000002 after a sum), so
 * segments that touch must not be read as overlapping. A millionth of the
 * time compared, at least a nanosecond: far below any real segment.
 */
function segmentSlackS (atS: number): number {
  return Math.max(1e-9, Math.abs(atS) * 1e-6)
}

/** The segments of one period are ordered, disjoint (touching allowed) and end within it; each problem is added under `at`. */
export function checkJobSegments (job: { periodS: number, segments: ReadonlyArray<{ offsetS: number, durationS: number }> }, at: string, add: (path: string, message: string) => void): void {
  const prefix = at === '' ? '' : `${at}.`
  let end = 0
  job.segments.forEach((s, i) => {
    if (s.offsetS < end - segmentSlackS(end)) add(`${prefix}segments[${i}].offsetS`, `starts at ${s.offsetS} s, before the previous segment ends at ${end} s (segments are ordered and disjoint)`)
    end = s.offsetS + s.durationS
    if (end > job.periodS + segmentSlackS(job.periodS)) add(`${prefix}segments[${i}]`, `ends at ${end} s, after the ${job.periodS} s period`)
  })
}

/** Parses trace JSON text (or an already parsed value); throws AgentError ERR_TRACE_INVALID naming the bad fields. */
export function parsePlacementTrace (input: unknown, source = 'trace'): PlacementTrace {
  return validator.parse(input, source)
}

export interface PlacementTraceOptions {
  jobs: number
  nodes: number
  seed: number
  /** GPUs per node. Default 8. */
  gpusPerNode?: number
  /**
   * Offered load: isolated node-seconds submitted per node-second of cluster
   * capacity over the submission span. Default 3 (a backlog builds, as in a
   * busy shared cluster; makespan then measures throughput).
   */
  load?: number
  /** Share of jobs without a profiled trace (cold start). Default 0.2. */
  coldStartShare?: number
  /** Every job's maxSlowdown. Default: drawn from U(1.2, 1.5) per job. */
  maxSlowdown?: number
  /**
   * `gap` (default): log-prob, a 1–5 s reward/advantage gap, then update +
   * sync as one segment. `back-to-back`: log-prob, update and sync as three
   * segments that touch, offsets written in decimal (as PlexRL's cycle table
   * gives them).
   */
  segments?: 'gap' | 'back-to-back'
  /** Gang sizes: each family's own (default), or drawn uniformly from [min, max] nodes (capped at the cluster). */
  gangs?: { min: number, max: number }
}

/**
 * Model families of PlexRL Table (cycle time, compute_log_prob, update_actor,
 * sync_weight, seconds; bubble ratios 80.1 %, 70.7 %, 81.1 %), with the gang
 * sizes (nodes) each uses and its context-switch cost (§6.2: 19 s to load
 * the 30B optimizer state from host memory).
 */
const families = [
  { name: '7b', weight: 0.5, cycleS: 289.03, logProbS: 9.66, updateS: 38.08, syncS: 9.76, gangs: [1, 1, 2], switchS: 8 },
  { name: '30b', weight: 0.35, cycleS: 284.8, logProbS: 19.62, updateS: 56.35, syncS: 7.57, gangs: [2, 4], switchS: 19 },
  { name: '235b', weight: 0.15, cycleS: 589.71, logProbS: 20.11, updateS: 82.39, syncS: 8.89, gangs: [4, 8], switchS: 30 },
] as const

/**
 * A synthetic trace shaped like PlexRL §6.3: mixed model families, gang sizes
 * and periods (each job's cycle scaled by ±10 %), bubble ratios 70–80 %, a
 * short advantage/reward gap between log-prob and the actor update, Poisson
 * submissions. Deterministic for a seed.
 */
export function generatePlacementTrace (options: PlacementTraceOptions): PlacementTrace {
  const { jobs: count, nodes, seed } = options
  if (!Number.isInteger(count) || count < 1) throw new RangeError(`jobs must be a positive integer, got ${count}`)
  if (!Number.isInteger(nodes) || nodes < 1) throw new RangeError(`nodes must be a positive integer, got ${nodes}`)
  const { gangs } = options
  if (gangs !== undefined && (!Number.isInteger(gangs.min) || !Number.isInteger(gangs.max) || gangs.min < 1 || gangs.max < gangs.min)) throw new RangeError(`gangs must be integers 1 <= min <= max, got ${gangs.min}-${gangs.max}`)
  if (options.maxSlowdown !== undefined && !(options.maxSlowdown >= 1 && options.maxSlowdown <= 1000)) throw new RangeError(`maxSlowdown must be in [1, 1000], got ${options.maxSlowdown}`)
  const rnd = createSeededRandom(seed)
  const load = options.load ?? 3
  const coldShare = options.coldStartShare ?? 0.2
  const backToBack = options.segments === 'back-to-back'
  const drafts = Array.from({ length: count }, (_, j) => {
    const family = families[rnd.weightedIndex(families.map(f => f.weight))]!
    const scale = rnd.uniform(0.9, 1.1)
    const periodS = round(family.cycleS * scale)
    // Every draw is made whatever the options, so that a seed gives the same jobs with or without them.
    const gapS = round(rnd.uniform(1, 5))
    const logProbS = round(family.logProbS * scale)
    const updateS = round(family.updateS * scale)
    const syncS = round(family.syncS * scale)
    const iterations = rnd.int(30, 120)
    const gang = gangs === undefined ? rnd.pick(family.gangs) : rnd.int(gangs.min, gangs.max)
    let segments: Array<{ offsetS: number, durationS: number }>
    if (backToBack) {
      const logProbAt = round(periodS - logProbS - updateS - syncS)
      const updateAt = round(logProbAt + logProbS)
      segments = [{ offsetS: logProbAt, durationS: logProbS }, { offsetS: updateAt, durationS: updateS }, { offsetS: round(updateAt + updateS), durationS: syncS }]
    } else {
      const rolloutS = round(periodS - (logProbS + gapS + updateS + syncS) - 0.05)
      segments = [{ offsetS: rolloutS, durationS: logProbS }, { offsetS: round(rolloutS + logProbS + gapS), durationS: round(updateS + syncS) }]
    }
    const maxSlowdown = round(rnd.uniform(1.2, 1.5))
    return {
      id: `${family.name}-${String(j).padStart(4, '0')}`,
      submitS: 0,
      nodes: Math.min(nodes, gang),
      periodS,
      iterations,
      segments,
      maxSlowdown: options.maxSlowdown ?? maxSlowdown,
      profiled: rnd.next() >= coldShare,
      switchS: family.switchS,
    }
  })
  const work = drafts.reduce((s, d) => s + d.nodes * d.periodS * d.iterations, 0)
  const meanGapS = work / count / (nodes * load)
  let t = 0
  for (const d of drafts) {
    d.submitS = round(t)
    t += rnd.exponential(meanGapS)
  }
  return { cluster: { nodes, gpusPerNode: options.gpusPerNode ?? 8, contextSwitchS: defaultContextSwitchS }, jobs: drafts }
}

function round (x: number): number {
  return Math.round(x * 100) / 100
}
