/**
 * agentctl jobs submit F: submits the job spec in file F (JSON, format in
 * mesh/control/jobs/job-spec.ts) to the cluster through this agent, which forwards it
 * to the acting leader. Answers once the leader published it: placed
 * (RUNNING, with its nodes) or QUEUED. Resubmitting the same spec is a no-op.
 * A `workflow` given as a string is the path of an RLinf config (YAML),
 * relative to F: it is read and sent in its place.
 */
import { dirname, resolve } from 'node:path'
import { AgentError } from '../../core/errors.ts'
import { parseJobSpec } from '../../mesh/control/jobs/job-spec.ts'
import { parseRlinfRoot } from '../../mesh/policies/workflow/rlinf-config.ts'
import { UsageError, type Command } from './command.ts'
import { readInputFile } from './flags.ts'
import { renderJobs } from './jobs-list.ts'

export const jobsSubmitCommand: Command = {
  summary: 'submit a job spec (JSON) to the cluster: the leader places it or queues it; same id + same spec again is a no-op',
  usage: 'F',
  arguments: [{ name: 'F', description: 'the job spec, JSON (mesh/control/jobs/job-spec.ts)', complete: 'file' }],
  examples: [
    { what: 'submit a job; again with the same spec changes nothing', run: 'agentctl jobs submit job42.json' },
  ],
  async run ({ client, positionals, signal }) {
    const path = positionals[0]
    if (path === undefined) throw new UsageError('jobs submit: the job spec file F is required')
    // Checked here too, so a bad file is reported with its path before any agent is asked.
    const spec = parseJobSpec(await withWorkflowFile(await readInputFile(path, 'job spec'), path), path)
    const answer = await client.submitJob(spec, { signal, idleTimeoutMs: 0 })
    const how = answer.created ? 'submitted' : 'already submitted with this spec'
    const where = answer.decision === null ? '' : ` (decision ${answer.decision.epoch}/${answer.decision.seq})`
    return { json: answer, human: `job ${answer.job.id} ${how}${where}\n\n${renderJobs([answer.job])}` }
  },
}

/** The spec text parsed, with a `workflow` path replaced by the config it names (other input as it is, for parseJobSpec to judge). */
async function withWorkflowFile (text: string, specPath: string): Promise<unknown> {
  let spec: unknown
  try { spec = JSON.parse(text) } catch { return text }
  if (spec === null || typeof spec !== 'object' || typeof (spec as { workflow?: unknown }).workflow !== 'string') return spec
  const file = resolve(dirname(specPath), (spec as { workflow: string }).workflow)
  try {
    return { ...spec, workflow: parseRlinfRoot(await readInputFile(file, 'workflow'), file) }
  } catch (err) {
    if (err instanceof AgentError && err.code === 'ERR_WORKFLOW_INVALID') throw new AgentError('ERR_JOB_INVALID', `${specPath}: workflow: ${err.message}`, { cause: err })
    throw err
  }
}
