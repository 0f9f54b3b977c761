/**
 * agentctl jobs op JOB NAME [--args JSON] [--op-id ID] [--component C
 * [--iteration I] [--granularity N]]: runs an operation on every rank of a
 * live job through this agent (POST /v1/jobs/:id/ops) and prints each rank's
 * result and the measured times. The same --op-id again answers the first
 * run instead of running it twice. --component puts its run time into the
 * job's measured profile (mesh/control/jobs/component-profile.ts).
 */
import { AgentError } from '../../core/errors.ts'
import { UsageError, type Command } from './command.ts'
import { integerFlag } from './flags.ts'
import { formatTable } from './table.ts'

export const jobsOpCommand: Command = {
  summary: 'run an operation on every rank of a live job (its workers registered it); prints each rank\'s result and the switch/run times',
  usage: 'JOB NAME [--args JSON] [--op-id ID] [--component C [--iteration I] [--granularity N]]',
  arguments: [
    { name: 'JOB', description: 'the live job\'s id' },
    { name: 'NAME', description: 'the operation, as its workers registered it' },
  ],
  options: {
    args: { type: 'string', value: 'JSON', description: 'the operation\'s arguments, one JSON value handed to every rank' },
    'op-id': { type: 'string', value: 'ID', description: 'a name for this run: the same ID again answers the first run instead of running twice' },
    component: { type: 'string', value: 'C', description: 'the workflow component it is part of (rollout, inference, actor; env, env_rollout): its run time goes into the job\'s measured profile (agentctl plan workflow --job)' },
    iteration: { type: 'string', value: 'I', description: 'the training iteration it belongs to: a component\'s operations of one iteration add up (default: an iteration of its own)' },
    granularity: { type: 'string', value: 'N', description: 'what it processed at once: environments per instance for env components, the batch otherwise' },
  },
  examples: [
    { what: 'run a training step on every rank of job42', run: 'agentctl jobs op job42 train_step --args \'{"lr":0.0001}\'' },
    { what: 'a retry-safe run', run: 'agentctl jobs op job42 rollout --op-id step-1200-rollout' },
    { what: 'a rollout step of iteration 7, recorded in the job\'s measured profile', run: 'agentctl jobs op job42 generate --component rollout --iteration 7' },
  ],
  async run ({ client, positionals, values, signal }) {
    const [job, name] = positionals
    if (job === undefined || name === undefined) throw new UsageError('jobs op: JOB and NAME are required')
    let args: unknown
    if (typeof values.args === 'string') {
      try { args = JSON.parse(values.args) } catch (err) { throw new AgentError('ERR_BAD_REQUEST', `--args is not JSON: ${(err as Error).message}`) }
    }
    if (typeof values.component !== 'string' && (values.iteration !== undefined || values.granularity !== undefined)) throw new UsageError('jobs op: --iteration and --granularity describe a --component\'s operation: give --component too')
    const profile = {
      ...(typeof values.component === 'string' ? { component: values.component } : {}),
      ...(values.iteration !== undefined ? { iteration: integerFlag('jobs op', values.iteration, 'iteration', 0) } : {}),
      ...(values.granularity !== undefined ? { granularity: integerFlag('jobs op', values.granularity, 'granularity', 1) } : {}),
    }
    const answer = await client.runOp(job, { name, ...(args !== undefined ? { args } : {}), ...(typeof values['op-id'] === 'string' ? { opId: values['op-id'] } : {}), ...profile }, { signal })
    const ms = (x: number): string => `${x.toFixed(1)} ms`
    return {
      json: answer,
      human: [
        `${answer.job} ${answer.name} (${answer.opId}): queued ${ms(answer.queuedMs)}, ${answer.switched ? `switch ${ms(answer.switchMs)} (offload ${ms(answer.offloadMs)}, onload ${ms(answer.onloadMs)}), ` : ''}run ${ms(answer.runMs)}, total ${ms(answer.totalMs)}`,
        '',
        formatTable(['RANK', 'NODE', 'RUN', 'RESULT'], answer.ranks.map(r => [String(r.rank), r.node.slice(-8), ms(r.durationMs), JSON.stringify(r.result).slice(0, 80)])),
      ].join('\n'),
    }
  },
}
