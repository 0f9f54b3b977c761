/**
 * Every agentctl command, by its words ("status", "sim reward", "inspect
 * residency"), in the order help lists them. Adding a command = one module in
 * this folder + one line here; help, usage errors and shell completion follow.
 * (help and completion read this table, so they live above it: cli/command-table.ts.)
 */
import type { Command } from './command.ts'
import { inspectResidencyCommand } from './inspect-residency.ts'
import { jobsListCommand } from './jobs-list.ts'
import { jobsSubmitCommand } from './jobs-submit.ts'
import { jobsOpCommand } from './jobs-op.ts'
import { jobsShowCommand } from './jobs-show.ts'
import { jobsTopCommand } from './jobs-top.ts'
import { keygenCommand } from './keygen.ts'
import { leaderCommand } from './leader.ts'
import { locksCommand } from './locks.ts'
import { meshCommand } from './mesh.ts'
import { nodeCommand } from './node.ts'
import { peersCommand } from './peers.ts'
import { rewardCancelCommand } from './reward-cancel.ts'
import { rewardStatusCommand } from './reward-status.ts'
import { rolloutDeregisterCommand } from './rollout-deregister.ts'
import { rolloutGenerateCommand } from './rollout-generate.ts'
import { rolloutRegisterCommand } from './rollout-register.ts'
import { rolloutStatusCommand } from './rollout-status.ts'
import { rolloutTerminateCommand } from './rollout-terminate.ts'
import { planWorkflowCommand } from './plan-workflow.ts'
import { simPlacementCommand } from './sim-placement.ts'
import { simRewardCommand } from './sim-reward.ts'
import { simRolloutCommand } from './sim-rollout.ts'
import { simSeedingCommand } from './sim-seeding.ts'
import { simTracePlacementCommand } from './sim-trace-placement.ts'
import { simTraceRewardCommand } from './sim-trace-reward.ts'
import { simTraceRolloutCommand } from './sim-trace-rollout.ts'
import { stateMaterializeCommand } from './state-materialize.ts'
import { statusCommand } from './status.ts'
import { versionCommand } from './version.ts'
import { weightsListCommand } from './weights-list.ts'
import { weightsPublishCommand } from './weights-publish.ts'
import { weightsPullCommand } from './weights-pull.ts'
import { weightsRetireCommand } from './weights-retire.ts'

export const commands: Record<string, Command> = {
  status: statusCommand,
  node: nodeCommand,
  version: versionCommand,
  locks: locksCommand,
  peers: peersCommand,
  mesh: meshCommand,
  leader: leaderCommand,
  keygen: keygenCommand,
  'inspect residency': inspectResidencyCommand,
  'state materialize': stateMaterializeCommand,
  'sim reward': simRewardCommand,
  'sim trace reward': simTraceRewardCommand,
  'sim rollout': simRolloutCommand,
  'sim trace rollout': simTraceRolloutCommand,
  'sim seeding': simSeedingCommand,
  'sim placement': simPlacementCommand,
  'sim trace placement': simTracePlacementCommand,
  'plan workflow': planWorkflowCommand,
  'weights publish': weightsPublishCommand,
  'weights pull': weightsPullCommand,
  'weights list': weightsListCommand,
  'weights retire': weightsRetireCommand,
  'jobs submit': jobsSubmitCommand,
  'jobs list': jobsListCommand,
  'jobs show': jobsShowCommand,
  'jobs op': jobsOpCommand,
  'jobs top': jobsTopCommand,
  'reward status': rewardStatusCommand,
  'reward cancel': rewardCancelCommand,
  'rollout status': rolloutStatusCommand,
  'rollout register': rolloutRegisterCommand,
  'rollout deregister': rolloutDeregisterCommand,
  'rollout terminate': rolloutTerminateCommand,
  'rollout generate': rolloutGenerateCommand,
}
