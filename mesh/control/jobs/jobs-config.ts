/** The `placement` config section: the leader's job placement and runtime schedule (mesh/control/jobs/). */
import { Type, type Static } from '@sinclair/typebox'
import { placementPolicyNames } from '../../policies/placement/placement-policy.ts'
import { runtimeSchedulerNames } from '../../policies/runtime/hrrs.ts'

export const PlacementSection = Type.Object({
  policy: Type.Union(placementPolicyNames.map(p => Type.Literal(p)), {
    description: `Placement policy the leader runs over the live nodes (PlexRL §4.3): ${placementPolicyNames.join(', ')}. spread-backfill lets later jobs start while an earlier one does not fit, EASY style (the first job that does not fit claims the nodes whose residents end soonest; later jobs use them only if they end before then; a round tries at most 32 jobs that do not fit); the others keep the queue FIFO. Default: "spread-backfill".`,
  }),
  runtime: Type.Union(runtimeSchedulerNames.map(p => Type.Literal(p)), {
    description: `Runtime scheduler of the jobs' GPU segments on shared node groups (PlexRL §4.4): ${runtimeSchedulerNames.join(', ')}. Default: "hrrs".`,
  }),
  maxJobsPerNode: Type.Integer({
    minimum: 1,
    maximum: 64,
    description: 'Most jobs placed on one node (host memory holds the offloaded state of each). Default: 4.',
  }),
  contextSwitchS: Type.Number({
    minimum: 0,
    maximum: 3600,
    description: 'Context-switch cost (offload + onload of a job\'s state) of a job spec that names no switchS, in seconds. Default: 10.',
  }),
  slotS: Type.Number({
    exclusiveMinimum: 0,
    maximum: 60,
    description: 'Seconds per slot of the placement horizon (28,800 slots ahead). Change it only on an empty cluster: placements of running jobs are in slots. Default: 1.',
  }),
  maxActiveJobs: Type.Integer({
    minimum: 1,
    maximum: 1000,
    description: 'Most queued + running jobs; a submission beyond it is refused (ERR_JOBS_FULL). The job table also must fit in one mesh message (mesh.maxRecordBytes / 2). Default: 64.',
  }),
  completedJobsRetained: Type.Integer({
    minimum: 0,
    maximum: 1000,
    description: 'Completed jobs kept in the job table (oldest dropped first). Default: 16.',
  }),
  overlapSwitches: Type.Boolean({
    description: 'A live job\'s context switch loads the incoming job\'s state while the outgoing job\'s is offloaded (the copies run in opposite directions), where the device has room for both; a worker without room loads after the offload. false: always one after the other. Default: true.',
  }),
  rescheduleIntervalMs: Type.Integer({
    minimum: 50,
    maximum: 600_000,
    description: 'The leader re-checks membership (jobs on dead nodes, queued jobs that now fit) at least this often, besides on every membership change and completion, in milliseconds. Default: 1000.',
  }),
  measuredPublishMs: Type.Integer({
    minimum: 100,
    maximum: 600_000,
    description: 'The leader writes the live jobs\' measured profiles (operations, run, switch and queued time, slowdown) into the job table this often, in milliseconds; the slowdown guard acts on them then. Default: 5000.',
  }),
  slowdownGuard: Type.Boolean({
    description: 'A live job measured (over at least 3 operations) beyond its maxSlowdown sends the latest colocation on its nodes back to the queue, with the reason in both jobs\' events (PlexRL §4.3, mesh/policies/placement/slowdown-guard.ts). The evicted job\'s queued operations fail with ERR_JOB_NOT_RUNNING and its workers register again where it is placed next. false: the bound is enforced at admission only. Default: true.',
  }),
}, { additionalProperties: false })

export type PlacementConfig = Static<typeof PlacementSection>

export const defaultPlacementConfig: PlacementConfig = {
  policy: 'spread-backfill',
  runtime: 'hrrs',
  maxJobsPerNode: 4,
  contextSwitchS: 10,
  slotS: 1,
  maxActiveJobs: 64,
  completedJobsRetained: 16,
  overlapSwitches: true,
  rescheduleIntervalMs: 1000,
  measuredPublishMs: 5000,
  slowdownGuard: true,
}
