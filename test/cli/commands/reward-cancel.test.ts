// agentctl reward cancel TASK BATCH [--request ID]...: what it sends, what it prints, what it refuses.
import t from 'tap'
import { rewardCancelCommand } from '../../../cli/commands/reward-cancel.ts'
import { UsageError } from '../../../cli/commands/command.ts'
import type { AgentClient } from '../../../agent/client/client.ts'

function run (positionals: string[], values: Record<string, string[] | undefined> = {}) {
  const sent: unknown[] = []
  const client = { rewardCancel: async (body: unknown) => { sent.push(body); return { cancelled: ['m-1', 'm-2'], finished: ['m-0'], unknown: values.request !== undefined ? ['zz'] : [] } } } as unknown as AgentClient
  const result = rewardCancelCommand.run({ client, positionals, values, json: false, signal: new AbortController().signal })
  return { result, sent }
}

t.test('the whole batch, or the named requests', async t => {
  const whole = run(['math', '12'])
  const out = await whole.result
  t.same(whole.sent, [{ task: 'math', batch: 12 }], 'no requestIds: the whole batch')
  t.match(out.human, /batch 12 of task math \(the whole batch: it has ended\)\ncancelled 2: m-1, m-2\nalready finished \(results kept\) 1: m-0/)
  const some = run(['math', '12'], { request: ['m-1', 'zz'] })
  t.match((await some.result).human, /not in this batch 1: zz/)
  t.same(some.sent, [{ task: 'math', batch: 12, requestIds: ['m-1', 'zz'] }])
})

t.test('usage errors send nothing', async t => {
  for (const positionals of [[], ['math'], ['math', 'twelve'], ['math', '-1']]) {
    const r = run(positionals)
    await t.rejects(r.result, UsageError, JSON.stringify(positionals))
    t.same(r.sent, [])
  }
})
