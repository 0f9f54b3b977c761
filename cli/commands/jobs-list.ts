/** agentctl jobs list: the job table this agent applied (no leader contact): state, nodes, placement, times. */
import type { JobRecord } from '../../mesh/control/jobs/job-table.ts'
import type { Command } from './command.ts'
import { formatDuration, formatTable } from './table.ts'

export const jobsListCommand: Command = {
  summary: 'jobs in the cluster as this agent knows them: state, nodes, phase and period, waits; * marks jobs placed on this node',
  examples: [
    { what: 'every job this agent knows of', run: 'agentctl jobs list' },
  ],
  async run ({ client, signal }) {
    const view = await client.jobs({ signal })
    const from = view.decision === null ? 'no jobs decision applied yet' : `decision ${view.decision.epoch}/${view.decision.seq}, revision ${view.revision}`
    const local = new Set(view.local)
    return {
      json: view,
      human: [
        `${view.jobs.length} jobs (${from}; leader ${view.leaderId ?? 'unknown'}; ${view.contextSwitches} context switches)`,
        ...(view.jobs.length > 0 ? ['', renderJobs(view.jobs, local)] : []),
      ].join('\n'),
    }
  },
}

export function renderJobs (jobs: readonly JobRecord[], local: ReadonlySet<string> = new Set()): string {
  const rows = jobs.map(j => {
    const p = j.placement
    const waitedS = ((j.startedAtMs ?? j.completedAtMs ?? Date.now()) - j.submittedAtMs) / 1000
    return [
      `${local.has(j.id) ? '*' : ''}${j.id}`,
      j.state,
      `${j.spec.nodes}x${j.spec.gpusPerNode}`,
      j.nodeNames.length > 0 ? j.nodeNames.join(',') : '-',
      p === null ? '-' : `${p.mode} slot ${p.startSlot}`,
      p === null ? '-' : `${p.periodSlots} slots`,
      j.state === 'QUEUED' ? `${formatDuration(waitedS)} so far` : formatDuration(waitedS),
      j.completedBy ?? (j.requeues > 0 ? `requeued ${j.requeues}x` : '-'),
    ]
  })
  return formatTable(['JOB', 'STATE', 'NODESxGPUS', 'ON', 'PLACEMENT', 'PERIOD', 'WAIT', 'NOTE'], rows)
}
