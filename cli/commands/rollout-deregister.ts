/** agentctl rollout deregister ID: this node's instance leaves the rotation (DELETE /v1/rollout/instances/:id). */
import { UsageError, type Command } from './command.ts'

export const rolloutDeregisterCommand: Command = {
  summary: 'deregister a rollout instance of this node (running steps see it leave and move its requests)',
  usage: 'ID',
  arguments: [{ name: 'ID', description: 'the instance\'s id on this node' }],
  examples: [{ what: 'take an engine out before stopping it', run: 'agentctl rollout deregister vllm0' }],
  async run ({ client, positionals, signal }) {
    const id = positionals[0]
    if (id === undefined) throw new UsageError('rollout deregister: the instance ID is required')
    const answer = await client.rolloutDeregister(id, { signal })
    return { json: answer, human: `rollout instance ${answer.id} deregistered` }
  },
}
