/**
 * agentctl rollout status: the rollout instances registered with this agent
 * (state: up, down, terminating), every instance it sees in the cluster, and
 * the steps running through it (GET /v1/rollout).
 */
import type { Command } from './command.ts'
import { formatTable } from './table.ts'

export const rolloutStatusCommand: Command = {
  summary: 'rollout instances registered here and seen in the cluster, and the steps running through this agent',
  examples: [{ what: 'which engines take rollout requests', run: 'agentctl rollout status' }],
  async run ({ client, signal }) {
    const body = await client.rollout({ signal })
    const local = body.local.map(i => [i.id, i.url, i.model, i.weightVersion !== undefined ? String(i.weightVersion) : '-', i.gpus?.join(',') ?? '-', i.state, i.reason ?? ''])
    const cluster = body.cluster.map(i => [i.id, i.url, i.model, i.terminating ? 'terminating' : 'in rotation'])
    const steps = body.steps.map(s => [s.stepId, s.model ?? '-', String(s.requests), String(s.instances), new Date(s.startedAtMs).toISOString()])
    return {
      json: body,
      human: [
        local.length > 0 ? formatTable(['INSTANCE', 'URL', 'MODEL', 'WEIGHTS', 'GPUS', 'STATE', 'WHY'], local) : `no rollout instance registered on ${body.node}`,
        cluster.length > 0 ? formatTable(['CLUSTER INSTANCE', 'URL', 'MODEL', 'STATE'], cluster) : 'no rollout instance in the cluster',
        ...(steps.length > 0 ? [formatTable(['STEP', 'MODEL', 'REQUESTS', 'INSTANCES', 'STARTED'], steps)] : []),
      ].join('\n\n'),
    }
  },
}
