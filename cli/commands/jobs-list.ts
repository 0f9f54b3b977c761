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
        ...(view.jobs.length > 0 ? ['', renderJobs(view.jobs, local, view.slotS)] : []),
      ].join('\n'),
    }
  },
}

/**
 * The jobs as a table. A placement shows its mode and when its schedule
 * starts (UTC; slots are absolute: slot s starts s·slotS seconds after the
 * epoch) and its period in time, not slot numbers.
 */
export function renderJobs (jobs: readonly JobRecord[], local: ReadonlySet<string> = new Set(), slotS = 1): string {
  const rows = jobs.map(j => {
    const p = j.placement
    const waitedS = ((j.startedAtMs ?? j.completedAtMs ?? Date.now()) - j.submittedAtMs) / 1000
    return [
      `${local.has(j.id) ? '*' : ''}${j.id}`,
      j.state,
      `${j.spec.nodes}x${j.spec.gpusPerNode}`,
      j.nodeNames.length > 0 ? j.nodeNames.join(',') : '-',
      p === null ? '-' : `${p.mode} from ${new Date(p.startSlot * slotS * 1000).toISOString().slice(11, 19)}Z`,
      p === null ? '-' : formatDuration(p.periodSlots * slotS),
      j.state === 'QUEUED' ? `${formatDuration(waitedS)} so far` : formatDuration(waitedS),
      j.completedBy ?? (j.requeues > 0 ? `requeued ${j.requeues}x` : '-'),
    ]
  })
  return formatTable(['JOB', 'STATE', 'NODESxGPUS', 'ON', 'PLACEMENT', 'PERIOD', 'WAIT', 'NOTE'], rows)
}
