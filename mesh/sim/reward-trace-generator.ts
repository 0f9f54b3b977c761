/**
 * Generates a CUDA-reward-like trace (DistRS §3) for `agentctl sim trace reward`.
 * Every constant below is the workload model, in seconds unless named otherwise:
 *
 * - Two stages (Fig. 4a): compile on CPU (~50 s, timeout 120 s), execute on
 *   GPU (a few seconds, timeout 60 s).
 * - Colocated training (§3.1, Fig. 5b): a rollout of up to ROLLOUT_CAP_S, no
 *   request in its first part, then a rapid rise to a peak and a long tail
 *   (generation time = ARRIVAL_DEAD_S + log-normal, capped at the max length);
 *   after the batch's last possible reward the trainer trains for about as
 *   long as the rollout, so about half of each iteration has no request.
 *   The arrival distribution drifts slowly across iterations (Fig. 5c).
 * - Outcome mix shifting across iterations (Fig. 6b): generation failed and
 *   compile failed decline, execute error rises then falls, success grows.
 * - Long runs (Fig. 6c, "a small fraction take significantly longer"): 1% of
 *   compiles run to their timeout; 5% of failing executions (infinite loops)
 *   and 0.5% of successful ones run to theirs, about 1–2% of all executions.
 *   The figures of the DistRS benchmark depend on this share (each long run
 *   holds a GPU for 60 s): see test/bench/reward-scaling.bench.ts.
 * - Tasks start staggered within a short window (§6.1); task k's first batch
 *   starts at k × staggerS.
 */
import { createSeededRandom, type SeededRandom } from '../../core/seeded-random.ts'
import type { RewardTrace, RewardTraceRequest } from './reward-trace.ts'

export interface RewardTraceOptions {
  /** Concurrent training tasks (>= 1). */
  tasks: number
  /** Requests per batch, B (>= 1). */
  batchSize: number
  /** Batches per task (>= 2: the first one is the planner's history). */
  iterations: number
  /** PRNG seed (integer). */
  seed: number
  /** Offset between consecutive tasks' first batches, seconds. Default 20. */
  staggerS?: number
  /** D written into the trace, seconds. Default 2. */
  maxExtraDelayS?: number
}

const COMPILE_TIMEOUT_S = 120
const EXECUTE_TIMEOUT_S = 60
const ROLLOUT_CAP_S = 320
const ARRIVAL_DEAD_S = 70
const ARRIVAL_MEDIAN_AFTER_DEAD_S = 70
const ARRIVAL_SIGMA = 0.55
/** Per-iteration growth of the median generation time (responses lengthen slowly). */
const ARRIVAL_DRIFT_PER_ITERATION = 0.01
const TRAINING_S = 300
const COMPILE_TIMEOUT_FRACTION = 0.01
const EXECUTE_ERROR_TIMEOUT_FRACTION = 0.05
const SUCCESS_TIMEOUT_FRACTION = 0.005

/** Outcome probabilities at training progress p in [0, 1] (Fig. 6b). */
export function outcomeMix (p: number): { generationFailed: number, compileFailed: number, executeError: number, success: number } {
  const generationFailed = 0.35 - 0.25 * p
  const compileFailed = 0.30 - 0.18 * p
  const executeError = 0.15 + 0.15 * Math.sin(Math.PI * p)
  return { generationFailed, compileFailed, executeError, success: 1 - generationFailed - compileFailed - executeError }
}

export function generateRewardTrace (options: RewardTraceOptions): RewardTrace {
  for (const [name, min] of [['tasks', 1], ['batchSize', 1], ['iterations', 2]] as const) {
    if (!Number.isInteger(options[name]) || options[name] < min) throw new RangeError(`${name} must be an integer >= ${min}, got ${options[name]}`)
  }
  const staggerS = options.staggerS ?? 20
  if (!(staggerS >= 0)) throw new RangeError(`staggerS must be >= 0, got ${staggerS}`)
  const random = createSeededRandom(options.seed)
  const tasks: RewardTrace['tasks'] = []
  for (let t = 0; t < options.tasks; t++) {
    const taskScale = random.uniform(0.9, 1.1)
    const batches: RewardTrace['tasks'][number]['batches'] = []
    let startS = t * staggerS
    for (let i = 0; i < options.iterations; i++) {
      const progress = options.iterations === 1 ? 0 : i / (options.iterations - 1)
      const medianS = ARRIVAL_MEDIAN_AFTER_DEAD_S * taskScale * Math.exp(ARRIVAL_DRIFT_PER_ITERATION * i)
      const requests: RewardTraceRequest[] = []
      for (let r = 0; r < options.batchSize; r++) {
        const generationS = Math.min(ROLLOUT_CAP_S - random.uniform(0, 3), ARRIVAL_DEAD_S + medianS * Math.exp(ARRIVAL_SIGMA * normal(random)))
        requests.push({ arrivalS: round(startS + generationS), stageS: stageTimes(random, progress) })
      }
      requests.sort((a, b) => a.arrivalS - b.arrivalS)
      batches.push({ startS: round(startS), requests })
      const lastRewardS = Math.max(...requests.map(r => r.arrivalS + r.stageS[0]! + r.stageS[1]!))
      startS = lastRewardS + TRAINING_S * random.uniform(0.95, 1.05)
    }
    tasks.push({ id: `task-${t}`, batches })
  }
  return {
    stages: [
      { name: 'compile', resource: 'cpu', cost: 1, timeoutS: COMPILE_TIMEOUT_S },
      { name: 'execute', resource: 'gpu', cost: 8, timeoutS: EXECUTE_TIMEOUT_S },
    ],
    maxExtraDelayS: options.maxExtraDelayS ?? 2,
    tasks,
  }
}

function stageTimes (random: SeededRandom, progress: number): number[] {
  const mix = outcomeMix(progress)
  const outcome = random.weightedIndex([mix.generationFailed, mix.compileFailed, mix.executeError, mix.success])
  if (outcome === 0) return [0, 0]
  if (random.next() < COMPILE_TIMEOUT_FRACTION) return [COMPILE_TIMEOUT_S, 0]
  if (outcome === 1) return [round(clamp(35 + 8 * normal(random), 5, 110)), 0]
  const compileS = round(clamp(50 + 8 * normal(random), 20, 110))
  if (outcome === 2) {
    if (random.next() < EXECUTE_ERROR_TIMEOUT_FRACTION) return [compileS, EXECUTE_TIMEOUT_S]
    return [compileS, round(clamp(1.5 * Math.exp(0.5 * normal(random)), 0.2, 50))]
  }
  if (random.next() < SUCCESS_TIMEOUT_FRACTION) return [compileS, EXECUTE_TIMEOUT_S]
  return [compileS, round(clamp(3 * Math.exp(0.4 * normal(random)), 0.5, 50))]
}

/** Standard normal by Box–Muller (one draw per call). */
function normal (random: SeededRandom): number {
  return Math.sqrt(-2 * Math.log(1 - random.next())) * Math.cos(2 * Math.PI * random.next())
}

function clamp (x: number, min: number, max: number): number {
  return Math.min(max, Math.max(min, x))
}

/** Milliseconds are enough and keep the JSON small. */
function round (x: number): number {
  return Math.round(x * 1000) / 1000
}
