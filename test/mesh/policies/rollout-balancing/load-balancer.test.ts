// RLBoost Algorithm 2 as pure functions: delayed-dispatch JSQ, one CONTINUOUSLB move, the plateau.
import t from 'tap'
import { batchingPlateau, rebalance, selectInstance, selectRoundRobin, selectShortestQueue, type InstanceLoad } from '../../../../mesh/policies/rollout-balancing/load-balancer.ts'

const load = (id: string, pending: number, executing: number): InstanceLoad => ({ id, pending, executing })

t.test('selectInstance: the fewest pending under Θ, ties to the fewest executing, none when all are at Θ', async t => {
  t.equal(selectInstance([load('a', 2, 1), load('b', 1, 9), load('c', 3, 0)], 4), 'b')
  t.equal(selectInstance([load('a', 1, 5), load('b', 1, 2)], 4), 'b', 'tie on pending: fewer executing')
  t.equal(selectInstance([load('a', 1, 2), load('b', 1, 2)], 4), 'a', 'full tie: the first')
  t.equal(selectInstance([load('a', 4, 0), load('b', 5, 0)], 4), null, 'every instance at Θ: the request waits (delayed dispatch)')
  t.equal(selectInstance([load('a', 4, 0), load('b', 3, 50)], 4), 'b', 'under Θ counts, however busy')
  t.equal(selectInstance([], 4), null)
})

t.test('rebalance: a pending request to an instance with an empty queue, one at a time', async t => {
  t.same(rebalance([load('a', 5, 8), load('b', 0, 8), load('c', 2, 8)], null), { from: 'a', to: 'b', kind: 'pending', count: 1 })
  t.same(rebalance([load('a', 1, 8), load('b', 0, 8), load('c', 0, 2)], 16), { from: 'a', to: 'c', kind: 'pending', count: 1 }, 'to the emptiest queue with the fewest executing')
  t.equal(rebalance([load('a', 1, 8), load('b', 2, 8)], 4), null, 'every instance has a queue: nothing to move to')
})

t.test('rebalance: executing requests beyond the plateau to an idle instance, only with a profile', async t => {
  t.same(rebalance([load('a', 0, 40), load('b', 0, 0), load('c', 0, 20)], 16), { from: 'a', to: 'b', kind: 'executing', count: 24 })
  t.equal(rebalance([load('a', 0, 12), load('b', 0, 0)], 16), null, 'at or below the plateau moving costs throughput: stay')
  t.equal(rebalance([load('a', 0, 40), load('b', 0, 0)], null), null, 'first step (no profile): executing requests stay')
  t.equal(rebalance([load('a', 0, 40), load('b', 0, 3)], 16), null, 'no idle instance')
  t.equal(rebalance([load('a', 0, 40)], 16), null, 'one instance')
})

t.test('batchingPlateau: the smallest batch within 5% of the best throughput', async t => {
  const profile = [{ batch: 64, tokensPerS: 3000 }, { batch: 1, tokensPerS: 50 }, { batch: 16, tokensPerS: 2900 }, { batch: 8, tokensPerS: 1800 }, { batch: 32, tokensPerS: 3050 }]
  t.equal(batchingPlateau(profile), 16)
  t.equal(batchingPlateau(profile, 0), 32)
  t.equal(batchingPlateau([]), null)
})

t.test('the baselines: shortest queue counts everything outstanding; round-robin cycles', async t => {
  t.equal(selectShortestQueue([load('a', 0, 9), load('b', 3, 2), load('c', 4, 4)]), 'b')
  t.equal(selectShortestQueue([]), null)
  t.same([0, 1, 2, 3].map(turn => selectRoundRobin([load('a', 9, 9), load('b', 0, 0), load('c', 0, 0)], turn)), ['a', 'b', 'c', 'a'])
  t.equal(selectRoundRobin([], 3), null)
})
