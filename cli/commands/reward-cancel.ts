/**
 * agentctl reward cancel TASK BATCH [--request ID]...: cancels a batch of the
 * reward service (every request of it not done yet; the batch ends) or only
 * the named requests (POST /v1/reward/cancel). Cancelled requests end with
 * status `cancelled` and the timeout reward; finished ones keep their result.
 */
import { UsageError, type Command } from './command.ts'

export const rewardCancelCommand: Command = {
  summary: 'cancel a reward batch (its requests not done yet end as cancelled; the batch ends) or some of its requests',
  usage: 'TASK BATCH [--request ID]...',
  arguments: [
    { name: 'TASK', description: 'the trainer\'s task' },
    { name: 'BATCH', description: 'the batch\'s index in its task' },
  ],
  options: {
    request: { type: 'string', multiple: true, value: 'ID', description: 'cancel only this request (repeat for more); default: the whole batch' },
  },
  examples: [
    { what: 'give up on batch 12 of task math', run: 'agentctl reward cancel math 12' },
    { what: 'cancel two requests of it', run: 'agentctl reward cancel math 12 --request math-12-3 --request math-12-9' },
  ],
  async run ({ client, positionals, values, signal }) {
    const [task, batchText] = positionals
    if (task === undefined || batchText === undefined) throw new UsageError('reward cancel: TASK and BATCH are required')
    if (!/^\d+$/.test(batchText)) throw new UsageError(`reward cancel: BATCH is a batch index (0, 1, …), got ${JSON.stringify(batchText)}`)
    const requestIds = values.request as string[] | undefined
    const answer = await client.rewardCancel({ task, batch: Number(batchText), ...(requestIds !== undefined ? { requestIds } : {}) }, { signal })
    const list = (ids: string[]): string => ids.length === 0 ? '' : `: ${ids.slice(0, 10).join(', ')}${ids.length > 10 ? `, … (${ids.length - 10} more)` : ''}`
    return {
      json: answer,
      human: [
        `batch ${batchText} of task ${task}${requestIds === undefined ? ' (the whole batch: it has ended)' : ''}`,
        `cancelled ${answer.cancelled.length}${list(answer.cancelled)}`,
        `already finished (results kept) ${answer.finished.length}${list(answer.finished)}`,
        ...(answer.unknown.length > 0 ? [`not in this batch ${answer.unknown.length}${list(answer.unknown)}`] : []),
      ].join('\n'),
    }
  },
}
