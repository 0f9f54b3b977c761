/**
 * The reward planner's history as the `reward-history` decision carries it:
 * rounded to 0.1 ms, cut to its byte budget (thinned, the last-ending request
 * kept; least recently completed task dropped last resort), decoded to the
 * same numbers the leader plans from, and malformed payloads refused.
 */
import t from 'tap'
import { decodeRewardHistory, encodeRewardHistory, rewardHistoryProblem, type TaskHistory } from '../../../../mesh/control/reward/planner-history.ts'
import { earliestCompletionOffsetS } from '../../../../mesh/policies/reward-scaling/request-information.ts'

const batchOf = (n: number, batch = 0): TaskHistory => ({
  batch,
  requests: Array.from({ length: n }, (_, i) => ({ offsetS: i * 0.01, stageS: [0.1 + (i % 7) * 0.05, i === 3 ? 9.87654 : 0.2] })),
})

t.test('round trip: the planner gets what was published, to 0.1 ms', async t => {
  const payload = encodeRewardHistory([{ task: 'a', history: batchOf(4, 7) }], 16_384)
  t.same(payload.tasks[0]!.requests[3], [30, 250, 9876.5])
  const decoded = decodeRewardHistory(JSON.parse(JSON.stringify(payload)), 2)
  t.same([...decoded.keys()], ['a'])
  t.equal(decoded.get('a')!.batch, 7)
  t.equal(decoded.get('a')!.requests[3]!.stageS[1], 9.8765)
  t.same(decodeRewardHistory(payload, 3), new Map(), 'a task recorded with other stages is left out')
  t.same(decodeRewardHistory(undefined, 2), new Map(), 'no decision yet: no history')
})

t.test('cut to the byte budget: the largest task is thinned, keeping the request that ends last', async t => {
  const big = batchOf(400)
  const payload = encodeRewardHistory([{ task: 'small', history: batchOf(5) }, { task: 'big', history: big }], 4096)
  t.ok(JSON.stringify(payload).length <= 4096, 'fits')
  const decoded = decodeRewardHistory(payload, 2)
  t.equal(decoded.get('small')!.requests.length, 5, 'the small task is whole')
  const thinned = decoded.get('big')!.requests
  t.ok(thinned.length > 20 && thinned.length < 400, `big thinned to ${thinned.length}`)
  t.equal(earliestCompletionOffsetS(decoded.get('big')!), Math.round(earliestCompletionOffsetS(big) * 10_000) / 10_000, 'its estimated completion is unchanged')
  t.ok(thinned.every((r, i) => i === 0 || r.offsetS >= thinned[i - 1]!.offsetS), 'in arrival order')

  const many = Array.from({ length: 50 }, (_, i) => ({ task: `task-${i}`, history: batchOf(3) }))
  const cut = encodeRewardHistory(many, 1024)
  t.ok(JSON.stringify(cut).length <= 1024)
  t.equal(cut.tasks.at(-1)!.task, 'task-49', 'the most recently completed tasks stay')
  t.ok(cut.tasks.length < 50 && cut.tasks.every(x => x.requests.length === 1), 'the others go once every task is down to one request')
})

t.test('payload check', async t => {
  t.equal(rewardHistoryProblem({ tasks: [] }), undefined)
  t.equal(rewardHistoryProblem(encodeRewardHistory([{ task: 'a', history: batchOf(3) }], 4096)), undefined)
  t.match(rewardHistoryProblem(null), /tasks/)
  t.match(rewardHistoryProblem({ tasks: [{ task: 'a', batch: -1, requests: [] }] }), /tasks\[0\]/)
  t.match(rewardHistoryProblem({ tasks: [{ task: 'a', batch: 0, requests: [[1, -2]] }] }), /requests/)
  t.match(rewardHistoryProblem({ tasks: [{ task: 'a', batch: 0, requests: [['1', 2]] }] }), /requests/)
})
