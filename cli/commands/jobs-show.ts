/**
 * agentctl jobs show ID: one job of the table this agent applied, with the
 * profile placement uses for it: the submitted one, or the one the leaders
 * measured on its live operations (once there are enough of them), and a
 * placement-auto job's worker groups.
 */
import { AgentError } from '../../core/errors.ts'
import { measuredOpsThreshold } from '../../mesh/control/jobs/job-spec.ts'
import type { JobRecord } from '../../mesh/control/jobs/job-table.ts'
import { UsageError, type Command } from './command.ts'
import { renderJobs } from './jobs-list.ts'

export const jobsShowCommand: Command = {
  summary: 'one job: state, nodes, placement, and whether placement uses its submitted or its measured profile',
  usage: 'ID',
  arguments: [{ name: 'ID', description: 'the job\'s id, as in its spec' }],
  examples: [
    { what: 'one job, and whether placement uses its measured profile', run: 'agentctl jobs show job42' },
  ],
  async run ({ client, positionals, signal }) {
    const id = positionals[0]
    if (id === undefined) throw new UsageError('jobs show: the job ID is required')
    const view = await client.jobs({ signal })
    const job = view.jobs.find(j => j.id === id)
    if (job === undefined) throw new AgentError('ERR_JOB_NOT_FOUND', `no job ${id} in the table this agent applied (revision ${view.revision})`)
    const m = job.measured
    const spec = job.spec
    const submitted = `submitted: period ${spec.periodS} s, busy ${spec.segments.reduce((n, s) => n + s.durationS, 0)} s per period, switch ${spec.switchS} s, max slowdown ${spec.maxSlowdown}`
    const measured = m === undefined
      ? 'measured: nothing yet'
      : `measured: ${m.ops} operations, ${m.runS.toFixed(3)} s running (busy ${(100 * m.busyFraction).toFixed(1)}%), ${m.switches} switches of ${m.switchS.toFixed(3)} s, ${m.queuedS.toFixed(3)} s queued, slowdown ${m.slowdown.toFixed(3)}`
    const uses = m !== undefined && m.ops >= measuredOpsThreshold ? 'placement uses the measured profile' : `placement uses the submitted profile (measured is used from ${measuredOpsThreshold} operations on)`
    return {
      json: { job, profile: m !== undefined && m.ops >= measuredOpsThreshold ? 'measured' : 'submitted' },
      human: [
        renderJobs([job], new Set(view.local), view.slotS),
        '',
        `${job.spec.live === true ? 'live' : 'modeled'} job; ${uses}`,
        `  ${submitted}`,
        `  ${measured}`,
        `  slowdown bound ${spec.maxSlowdown}: ${boundState(job)}`,
        ...(spec.layout === undefined ? [] : [`workflow laid out ${spec.layout.mode}, ${spec.layout.iterationS.toFixed(3)} s per iteration predicted; worker groups:`, ...spec.layout.groups.map(g => `  ${id}.${g.component}  GPUs ${g.gpus[0]}-${g.gpus[1] - 1} (${g.gpus[1] - g.gpus[0]})`)]),
        ...(job.events === undefined || job.events.length === 0 ? [] : ['events:', ...job.events.map(e => `  ${new Date(e.atMs).toISOString()}  ${e.message}`)]),
      ].join('\n'),
    }
  },
}

/** Whether the job is within its slowdown bound, as measured, and what the guard did about it. */
function boundState (job: JobRecord): string {
  const m = job.measured
  const evicted = (job.evictions ?? 0) > 0 ? `; evicted ${job.evictions} time(s) by the slowdown guard` : ''
  if (m === undefined) return `not measured yet${evicted}`
  return `${m.slowdown > job.spec.maxSlowdown + 1e-9 ? 'over it' : 'within it'} (measured ${m.slowdown.toFixed(3)} over ${m.ops} operations)${evicted}`
}
