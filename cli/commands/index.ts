/**
 * Every agentctl command, by its words ("status", "sim reward", "inspect
 * residency"). Adding a command = one module in this folder + one line here.
 */
import type { Command } from '../command.ts'
import { inspectResidencyCommand } from './inspect-residency.ts'
import { locksCommand } from './locks.ts'
import { nodeCommand } from './node.ts'
import { stateMaterializeCommand } from './state-materialize.ts'
import { simRewardCommand } from './sim-reward.ts'
import { simTraceRewardCommand } from './sim-trace-reward.ts'
import { statusCommand } from './status.ts'
import { versionCommand } from './version.ts'

export const commands: Record<string, Command> = {
  status: statusCommand,
  node: nodeCommand,
  version: versionCommand,
  locks: locksCommand,
  'inspect residency': inspectResidencyCommand,
  'state materialize': stateMaterializeCommand,
  'sim reward': simRewardCommand,
  'sim trace reward': simTraceRewardCommand,
}
