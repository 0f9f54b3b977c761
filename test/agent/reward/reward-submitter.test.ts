/**
 * The submitting agent's side from a stub leader (no network): a request the
 * leader reported as having used its one retry after a lost worker is
 * submitted to the next leader marked `retried`, so a leader change does not
 * reset the count; a new leader gets the batches in flight with their age
 * and finished requests' timings (the planner's history of them).
 */
import t from 'tap'
import pino from 'pino'
import { createRewardSubmitter } from '../../../agent/reward/reward-submitter.ts'
import { AgentError } from '../../../core/errors.ts'

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

t.test('results the trainer has not fetched are handed to a new leader; fetches are reported; unknown ids are asked of the leader', async t => {
  const calls: Array<{ method: string, body: any }> = []
  const done = (id: string): unknown => ({ requestId: id, task: 't', batch: 0, status: 'ok', reward: 1, stageS: [0.1] })
  const submitter = createRewardSubmitter({ maxPendingRequests: 10, resultRetentionMs: 60_000, timeoutReward: -1, awaitWaitMs: 10 }, {
    logger: pino({ level: 'silent' }),
    async callLeader (method, body: any) {
      calls.push({ method, body })
      if (method === 'reward.await') { await new Promise(resolve => setTimeout(resolve, 5)); return { results: body.ids.map(done), unknown: [] } }
      if (method === 'reward.result') return body.requestId === 'elsewhere' ? { requestId: 'elsewhere', state: 'done', result: done('elsewhere') } : { requestId: body.requestId, state: 'pending' }
      return { duplicate: false }
    },
  })
  const controller = new AbortController()
  submitter.start({ signal: controller.signal })
  await submitter.batchStart({ task: 't', batch: 0, size: 2 })
  await submitter.submit({ task: 't', batch: 0, requestId: 'a', payload: 1 })
  await submitter.submit({ task: 't', batch: 0, requestId: 'b', payload: 2 })
  while (submitter.counts().done < 2) await new Promise(resolve => setTimeout(resolve, 5))
  t.match(await submitter.result('a', 0), { state: 'done', result: { requestId: 'a' } }, 'the trainer fetches a here')
  for (const deadline = performance.now() + 2000; !calls.some(c => c.method === 'reward.await' && c.body.ack.includes('a')) && performance.now() < deadline;) await new Promise(resolve => setTimeout(resolve, 5))
  t.ok(calls.some(c => c.method === 'reward.await' && c.body.ack.includes('a')), 'the fetch is reported to the leader')
  t.notOk(calls.some(c => c.method === 'reward.await' && c.body.ack.includes('b')), 'b, not fetched, is not')

  submitter.leaderChanged()
  for (const deadline = performance.now() + 2000; !calls.some(c => c.method === 'reward.resync') && performance.now() < deadline;) await new Promise(resolve => setTimeout(resolve, 5))
  const resync = calls.find(c => c.method === 'reward.resync')
  t.match(resync?.body, { batches: [{ task: 't', batch: 0, size: 2, doneIds: ['a', 'b'] }], results: [{ result: { requestId: 'b' } }] }, 'the new leader gets b (unfetched) and the batch it completed')
  t.equal(resync?.body.results.length, 1, 'not a, which the trainer has')
  const batch = resync?.body.batches[0]
  t.ok(batch.ageMs > 0, 'with the batch\'s age, for its start at the new leader')
  t.match(batch.finished, [{ requestId: 'a', offsetMs: Number, stageS: [0.1] }, { requestId: 'b', offsetMs: Number, stageS: [0.1] }], 'and its finished requests\' timings, for the planner\'s history')
  t.ok(batch.finished.every((f: { offsetMs: number }) => f.offsetMs >= 0 && f.offsetMs <= batch.ageMs))
  t.match(resync?.body.results[0].digest, /^[0-9a-f]{64}$/)

  t.match(await submitter.result('elsewhere', 0), { state: 'done', result: { requestId: 'elsewhere' } }, 'a request submitted through another agent: asked of the leader')
  t.match(await submitter.result('elsewhere', 0), { state: 'done' }, 'and kept for a repeated fetch')
  t.equal(calls.filter(c => c.method === 'reward.result').length, 1)
  controller.abort()
  await submitter.stop()
})

t.test('cancel ends pending requests here at once (no later leader gets them again); an abandoned batch is cancelled', async t => {
  const calls: Array<{ method: string, body: any }> = []
  let leaderKnowsBatch = true
  const submitter = createRewardSubmitter({ maxPendingRequests: 10, resultRetentionMs: 60_000, timeoutReward: -1, awaitWaitMs: 10, abandonedBatchMs: 300 }, {
    logger: pino({ level: 'silent' }),
    async callLeader (method, body: any) {
      calls.push({ method, body })
      if (method === 'reward.await') { await new Promise(resolve => setTimeout(resolve, 5)); return { results: [], unknown: [] } }
      if (method === 'reward.cancel') {
        if (!leaderKnowsBatch) throw new AgentError('ERR_NOT_FOUND', 'no batch')
        return { cancelled: body.requestIds ?? ['a', 'b'], finished: [], unknown: [] }
      }
      return { duplicate: false }
    },
  })
  const controller = new AbortController()
  submitter.start({ signal: controller.signal })
  await submitter.batchStart({ task: 't', batch: 0, size: 3 })
  for (const id of ['a', 'b', 'c']) await submitter.submit({ task: 't', batch: 0, requestId: id, payload: 1 })
  await t.rejects(submitter.cancel({ task: 't', batch: 0, requestIds: [] }), { code: 'ERR_BAD_REQUEST' }, 'an empty list is refused')
  t.same(calls.filter(c => c.method === 'reward.cancel'), [], 'and not sent')
  t.same(await submitter.cancel({ task: 't', batch: 0, requestIds: ['a'] }), { cancelled: ['a'], finished: [], unknown: [] })
  t.match(await submitter.result('a', 0), { state: 'done', result: { status: 'cancelled', reward: -1 } }, 'a ends here at once')
  t.match(await submitter.result('b', 0), { state: 'pending' }, 'b is not touched')
  leaderKnowsBatch = false // a new leader that has not heard of the batch yet
  t.same(await submitter.cancel({ task: 't', batch: 0 }), { cancelled: ['b', 'c'], finished: [], unknown: [] }, 'cancelled here though the leader did not know the batch')
  t.same(submitter.counts(), { pending: 0, done: 3 })
  const handedOver = (): string[] => calls.filter(c => c.method === 'reward.resync').flatMap(c => (c.body.results ?? []).map((r: { result: { requestId: string } }) => r.result.requestId))
  for (const deadline = performance.now() + 5000; !handedOver().includes('c') && performance.now() < deadline;) await new Promise(resolve => setTimeout(resolve, 20))
  t.same(handedOver().sort(), ['b', 'c'], 'a leader that did not cancel them is handed those results (a fetch through another agent finds them); not a, which it cancelled')

  // Batch 1 is abandoned: nobody touches it for abandonedBatchMs.
  leaderKnowsBatch = true
  await submitter.batchStart({ task: 't', batch: 1, size: 1 })
  await submitter.submit({ task: 't', batch: 1, requestId: 'd', payload: 1 })
  const t0 = performance.now()
  while (calls.filter(c => c.method === 'reward.cancel').length < 3) {
    if (performance.now() - t0 > 5000) throw new Error('the abandoned batch was not cancelled')
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  t.ok(performance.now() - t0 >= 250, 'not before abandonedBatchMs')
  t.same(calls.filter(c => c.method === 'reward.cancel').at(-1)!.body, { task: 't', batch: 1, requestIds: ['d'] }, 'the leader is told')
  t.match(await submitter.result('d', 0), { state: 'done', result: { status: 'cancelled', message: /abandoned/ } })
  controller.abort()
  await submitter.stop()
})
