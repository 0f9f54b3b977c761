/**
 * agentctl jobs top: the acting leader's operation scheduler (GET
 * /v1/jobs/top): per node the resident job and the operation holding its
 * lock; per job its queue, operations run, switches, and time spent
 * switching vs running vs waiting; each job's measured time per
 * iteration of its workflow components (what `plan workflow --job` uses);
 * and for jobs with placement auto, the plan's groups and its predicted
 * iteration time against the measured one.
 */
import type { JobsTop } from '../../agent/api/wire/workers.ts'
import type { Command } from './command.ts'
import { formatTable } from './table.ts'

export const jobsTopCommand: Command = {
  summary: 'live execution on the leader: which job is resident on each node, queues, switches, time switching vs running',
  examples: [
    { what: 'what each node runs and how long switching takes', run: 'agentctl jobs top' },
  ],
  async run ({ client, signal }) {
    const top = await client.jobsTop({ signal })
    const s = (ms: number): string => `${(ms / 1000).toFixed(2)} s`
    const share = top.runMs + top.switchMs > 0 ? ` (${(100 * top.switchMs / (top.runMs + top.switchMs)).toFixed(1)}% of device time switching)` : ''
    return {
      json: top,
      human: [
        `scheduler ${top.scheduler}, epoch ${top.epoch}: ${top.switches} switches, ${s(top.switchMs)} switching, ${s(top.runMs)} running${share}`,
        '',
        formatTable(['NODE', 'DEVICE', 'RESIDENT', 'RUNNING'], top.nodes.map(n => [n.node.slice(-8), n.device, n.residentJob ?? '-', n.runningOp ?? '-'])),
        '',
        formatTable(['JOB', 'PENDING', 'RUNNING', 'OPS', 'FAILED', 'SWITCHES', 'RUN', 'SWITCH', 'QUEUED', 'SLOWDOWN'], top.jobs.map(j => [
          j.job, String(j.pending), j.running ?? '-', String(j.ops), String(j.failed), String(j.switches), s(j.runMs), s(j.switchMs), s(j.queuedMs), j.measuredSlowdown === null ? '-' : j.measuredSlowdown.toFixed(2),
        ])),
        ...components(top),
        ...workflows(top),
      ].join('\n'),
    }
  },
}

/** The measured workflow components, a row per (job, component, GPUs, granularity); nothing when none was measured. */
function components (top: JobsTop): string[] {
  const rows = top.jobs.flatMap(j => j.components.map(c => [j.job, c.component, String(c.gpus), c.granularity === null ? '-' : String(c.granularity), String(c.iterations), String(c.ops), `${(c.iterationMs / 1000).toFixed(3)} s`]))
  return rows.length === 0 ? [] : ['', formatTable(['JOB', 'COMPONENT', 'GPUS', 'GRANULARITY', 'ITERATIONS', 'OPS', 'PER_ITERATION'], rows)]
}

/** Jobs with placement auto: mode, groups, predicted vs measured iteration time; nothing when there are none. */
function workflows (top: JobsTop): string[] {
  if (top.workflows.length === 0) return []
  const rows = top.workflows.map(w => [
    w.job, w.mode, w.groups.map(g => `${g.component} ${g.gpus[0]}-${g.gpus[1] - 1}`).join(', '),
    `${w.predictedIterationS.toFixed(3)} s`,
    w.measuredIterationS === null ? '-' : `${w.measuredIterationS.toFixed(3)} s`,
    w.measuredIterationS === null ? '-' : `${(100 * (w.measuredIterationS / w.predictedIterationS - 1)).toFixed(1)}%`,
    String(w.iterations),
  ])
  return ['', formatTable(['JOB', 'MODE', 'GROUPS (GPUS)', 'PREDICTED', 'MEASURED', 'DIFF', 'ITERATIONS'], rows)]
}
