/**
 * Types of the reward-service scaling policies (DistRS, NSDI'26, §5). All
 * times are seconds on one clock (the simulator's or the leader's); a policy
 * never reads a clock itself: `nowS` comes in the snapshot.
 */

/** One stage of the reward computation (DistRS §4: worker_j runs stage j). */
export interface RewardStage {
  readonly name: string
  /** Resource one worker of this stage holds exclusively. */
  readonly resource: 'cpu' | 'gpu'
  /** C_j: cost of one worker (Alg. 1 line 7 searches the costliest stage first). > 0. */
  readonly cost: number
  /** T_j: the stage's timeout; a request never runs longer than this at the stage. > 0. */
  readonly timeoutS: number
}

/** One request of a completed batch, as the planner remembers it (Alg. 1/2 inputs). */
export interface HistoricalRequest {
  /** r_i: arrival at the service, seconds after the batch's start (the trainer's batch-start hint). >= 0. */
  readonly offsetS: number
  /** s_ij: running time at each stage (0 for a stage the request never reached). Length M. */
  readonly stageS: readonly number[]
}

/** The previous completed batch of a task: the planner's whole history of it. */
export interface BatchHistory {
  readonly requests: readonly HistoricalRequest[]
}

/** An arrived, unfinished request of an active batch: queued or running at `stage`. */
export interface InFlightRequest {
  /** Stage index (0-based, pipeline order) the request waits for or runs at. */
  readonly stage: number
  /** e_ik: seconds it has run at `stage` so far; null while it waits in the stage's queue. */
  readonly elapsedS: number | null
  /** When a waiting request entered the stage's queue, seconds (its FCFS rank within its batch). */
  readonly queuedSinceS?: number
}

/**
 * A request the planner expects to be served from now on (Alg. 2 output):
 * ready at `readyS`, then `stageS[j]` seconds at each stage j in pipeline
 * order, skipping stages with 0.
 */
export interface EstimatedRequest {
  /** Index of its batch in PlannerSnapshot.batches. */
  readonly batch: number
  readonly readyS: number
  readonly stageS: readonly number[]
  /** True when it already holds a worker at its first stage (a Running_k request): it starts at once. */
  readonly running: boolean
  /**
   * For a request already waiting at its first stage: when it entered that
   * queue (<= readyS). Orders it FCFS among its batch; it still cannot start
   * before readyS. Default readyS.
   */
  readonly queuedSinceS?: number
}

/** A batch that has started (trainer hint) and not completed. */
export interface ActiveBatch {
  readonly task: string
  /** The batch's index in its task (0, 1, …). */
  readonly index: number
  /** AT: the batch's start, seconds. */
  readonly startS: number
  /** Number of requests the trainer announced (batch size B). */
  readonly size: number
  /** Requests of the batch that have finished. size − completed − inFlight.length have not arrived yet. */
  readonly completed: number
  /**
   * The batch's estimated earliest completion T (Eq. 1–2), fixed when it
   * started, seconds: its EBF priority and the T of its constraint T + D.
   */
  readonly priorityS: number
  /** Requests that arrived and are not finished. */
  readonly inFlight: readonly InFlightRequest[]
  /**
   * Perfect knowledge, given only to a policy that declares `perfectKnowledge`
   * (the `ideal` baseline): every unfinished request of the batch with its true
   * arrival and remaining stage times (`batch` fields are ignored).
   */
  readonly exactRemaining?: readonly EstimatedRequest[]
}

/** Everything a scaling decision sees. Plain data: the leader, the simulator and the tests build it. */
export interface PlannerSnapshot {
  readonly nowS: number
  /** Stages in pipeline order. */
  readonly stages: readonly RewardStage[]
  /** D: the tolerable extra delay of a batch beyond its earliest completion, seconds. */
  readonly maxExtraDelayS: number
  readonly batches: readonly ActiveBatch[]
  /** The last completed batch of each task, by task id. */
  readonly history: Readonly<Record<string, BatchHistory>>
  /** Seeds Alg. 2's sampling; the same snapshot and seed give the same decision. */
  readonly seed: number
}

/** Order in which a stage's queue serves requests. */
export type QueueDiscipline = 'ebf' | 'fcfs'

/** A set of workers per stage serving some tasks. */
export interface WorkerPool {
  /** Stable across decisions: the simulator and the supervisor match pools by id. */
  readonly id: string
  /** Task ids it serves, or 'all' (a shared, multi-tenant pool). */
  readonly tasks: 'all' | readonly string[]
  /** N_j: whole workers per stage (pipeline order). */
  readonly workers: readonly number[]
}

export interface ScalingDecision {
  /** Pools to hold until the next decision; a pool missing here holds no workers. */
  readonly pools: readonly WorkerPool[]
  /** How many requests the decision simulated (Alg. 2 output size). */
  readonly estimatedRequests: number
}

export interface RewardScalingPolicy {
  readonly name: string
  /** Discipline of the stage queues, in the planner's SIMULATE and in the service. */
  readonly discipline: QueueDiscipline
  /** True when the policy needs ActiveBatch.exactRemaining (an oracle: simulation only). */
  readonly perfectKnowledge: boolean
  /**
   * EBF priority of a batch that starts now: its estimated completion, seconds
   * (DistRS §5.2, estimated with Eq. 1–2). `exactEarliestS` is the true value,
   * given only to a perfect-knowledge policy.
   */
  batchPriorityS(start: { startS: number, history: BatchHistory | undefined, stages: readonly RewardStage[], exactEarliestS?: number }): number
  /** Called at every batch start and batch completion (DistRS §5.2). Pure. */
  decide(snapshot: PlannerSnapshot): ScalingDecision
}
