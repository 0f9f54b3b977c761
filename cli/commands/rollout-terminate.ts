/**
 * agentctl rollout terminate [--instance ID]... [--reason R]: the termination
 * notice of a preemptible node (POST /v1/rollout/terminate). The node's
 * instances (or those named) are marked terminating in its availability
 * record; every step moves their requests now, from their collected tokens.
 */
import type { Command } from './command.ts'

export const rolloutTerminateCommand: Command = {
  summary: 'termination notice: this node\'s rollout instances (or those named) will be preempted; steps move their requests now',
  usage: '[--instance ID]... [--reason R]',
  options: {
    instance: { type: 'string', multiple: true, value: 'ID', description: 'only this instance (repeat for more); default: every instance of this node' },
    reason: { type: 'string', value: 'R', description: 'why, for the logs and the steps\' reports' },
  },
  examples: [
    { what: 'from a spot-instance reclaim hook', run: 'agentctl rollout terminate --reason spot-reclaim' },
  ],
  async run ({ client, values, signal }) {
    const instances = values.instance as string[] | undefined
    const answer = await client.rolloutTerminate({ ...(instances !== undefined ? { instances } : {}), ...(typeof values.reason === 'string' ? { reason: values.reason } : {}) }, { signal })
    return { json: answer, human: answer.terminating.length === 0 ? 'no rollout instance registered here' : `terminating: ${answer.terminating.map(i => i.id).join(', ')}` }
  },
}
