/** agentctl reward status: the live reward service from the leader — queues per stage, batches in flight, tasks, workers per stage per node. */
import type { Command } from './command.ts'
import { formatTable } from './table.ts'

export const rewardStatusCommand: Command = {
  summary: 'reward service: queue lengths and workers per stage, batches in flight, tasks, workers per stage per node',
  examples: [
    { what: 'queues and workers of the reward service', run: 'agentctl reward status' },
  ],
  async run ({ client, signal }) {
    const s = await client.rewardStatus({ signal })
    const stageNames = s.stages.map(st => st.name)
    const stages = s.stages.map(st => [st.name, st.resource, String(st.queued), String(st.running), String(st.workers), String(s.plan?.wanted[st.name] ?? 0), String(s.plan?.unplaced[st.name] ?? 0)])
    const batches = s.batches.map(b => [b.task, String(b.batch), `${b.done}/${b.size}`, String(b.queued), String(b.running), `${b.ageS.toFixed(1)} s`])
    const tasks = s.tasks.map(tk => [tk.task, String(tk.activeBatches), String(tk.completedBatches), String(tk.historyRequests)])
    const nodes = s.nodes.map(n => [n.nodeName, n.node.slice(-8), String(n.cpuCores), String(n.gpus), ...stageNames.map(name => `${n.workers[name] ?? 0}/${s.plan?.workers[n.node]?.[name] ?? 0}`)])
    const capacity = s.plan?.capacity
    const sum = (counts: Record<string, number>): number => Object.values(counts).reduce((a, b) => a + b, 0)
    const perStage = (counts: Record<string, number>): string => stageNames.map(name => `${name} ${counts[name] ?? 0}`).join(', ')
    const capacityLine = capacity === undefined
      ? []
      : capacity.bound
        ? [`plan capacity-bound: wants ${sum(capacity.unconstrained)} workers (${perStage(capacity.unconstrained)}), ${capacity.cpuCores} cores and ${capacity.gpus} GPUs hold ${sum(s.plan!.wanted)} (${perStage(s.plan!.wanted)}): short by ${sum(capacity.shortBy)}` +
          (capacity.waiting.length > 0 ? `; stages waiting for a worker (they take turns): ${capacity.waiting.join(', ')}` : '')]
        : [`plan within capacity (${capacity.cpuCores} cores, ${capacity.gpus} GPUs)`]
    return {
      json: s,
      human: [
        `leader ${s.leaderId}; requests held ${s.requests.held} (queued ${s.requests.queued}, running ${s.requests.running}, done ${s.requests.done}); this agent (${s.local.node}) waits for ${s.local.pending}`,
        ...capacityLine,
        stages.length > 0 ? formatTable(['STAGE', 'RESOURCE', 'QUEUED', 'RUNNING', 'WORKERS', 'WANTED', 'UNPLACED'], stages) : 'no stages configured (reward.stages)',
        batches.length > 0 ? formatTable(['TASK', 'BATCH', 'DONE', 'QUEUED', 'RUNNING', 'AGE'], batches) : 'no batches in flight',
        ...(tasks.length > 0 ? [formatTable(['TASK', 'ACTIVE BATCHES', 'COMPLETED', 'HISTORY REQUESTS'], tasks)] : []),
        nodes.length > 0 ? formatTable(['NODE', 'PEER', 'CORES', 'GPUS', ...stageNames.map(n => `${n.toUpperCase()} (LIVE/PLANNED)`)], nodes) : 'no agent reports reward capacity',
      ].join('\n\n'),
    }
  },
}
