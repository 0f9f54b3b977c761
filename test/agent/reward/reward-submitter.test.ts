/**
 * The submitting agent's side from a stub leader (no network): a request the
 * leader reported as having used its one retry after a lost worker is
 * submitted to the next leader marked `retried`, so a leader change does not
 * reset the count.
 */
import t from 'tap'
import pino from 'pino'
import { createRewardSubmitter } from '../../../agent/reward/reward-submitter.ts'

t.test('the retry count of a request survives a leader change', async t => {
  const calls: Array<{ method: string, body: any }> = []
  let epoch = 1
  const submitter = createRewardSubmitter({ maxPendingRequests: 10, resultRetentionMs: 60_000, timeoutReward: -1, awaitWaitMs: 10 }, {
    logger: pino({ level: 'silent' }),
    async callLeader (method, body: any) {
      calls.push({ method, body })
      if (method === 'reward.await') {
        await new Promise(resolve => setTimeout(resolve, 5))
        // Leader 1: r lost its worker once. Leader 2 does not know r (it took over).
        if (epoch === 1) return { results: [], unknown: [], retried: body.ids.filter((id: string) => id === 'r') }
        if (calls.some(c => c.method === 'reward.submit' && c.body.requestId === 'r' && c.body.retried === true)) {
          return { results: [{ requestId: 'r', task: 't', batch: 0, status: 'failed', reward: -1, stageS: [] }], unknown: [] }
        }
        return { results: [], unknown: body.ids }
      }
      return { duplicate: false }
    },
  })
  const controller = new AbortController()
  submitter.start({ signal: controller.signal })
  await submitter.batchStart({ task: 't', batch: 0, size: 2 })
  await submitter.submit({ task: 't', batch: 0, requestId: 'r', payload: 1 })
  await submitter.submit({ task: 't', batch: 0, requestId: 's', payload: 2 })
  while (!calls.some(c => c.method === 'reward.await' && c.body.ids.includes('r'))) await new Promise(resolve => setTimeout(resolve, 5))
  await new Promise(resolve => setTimeout(resolve, 30))
  epoch = 2
  const answer = await submitter.result('r', 5000)
  t.match(answer, { state: 'done', result: { status: 'failed' } })
  const resubmits = calls.filter(c => c.method === 'reward.submit').slice(2)
  t.ok(resubmits.some(c => c.body.requestId === 'r' && c.body.retried === true && c.body.batchSize === 2), 'r again, marked retried')
  t.ok(resubmits.every(c => c.body.requestId !== 's' || c.body.retried === undefined), 's again, not marked')
  t.ok(resubmits.some(c => c.body.requestId === 's'), 's resubmitted')
  t.ok(calls.some(c => c.method === 'reward.resync'), 'its batch resynced first')
  controller.abort()
  await submitter.stop()
})
