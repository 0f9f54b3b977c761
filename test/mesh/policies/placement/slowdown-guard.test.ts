import t from 'tap'
import { guardEviction } from '../../../../mesh/policies/placement/slowdown-guard.ts'

const job = (id: string, nodes: string[], placedSeq: number) => ({ id, nodes, placedSeq })

t.test('within its bound, or alone on its nodes: nothing to undo', async t => {
  t.equal(guardEviction({ ...job('a', ['n1'], 1), slowdown: 1.25, maxSlowdown: 1.25 }, [job('b', ['n1'], 2)]), undefined, 'at the bound is within it')
  t.equal(guardEviction({ ...job('a', ['n1'], 1), slowdown: 1.4, maxSlowdown: 1.25 }, [job('b', ['n2'], 2)]), undefined, 'no neighbour shares a node')
  t.equal(guardEviction({ ...job('a', ['n1'], 1), slowdown: 1.4, maxSlowdown: 1.25 }, []), undefined)
})

t.test('over its bound: the latest colocation on its nodes goes back to the queue', async t => {
  const others = [job('b', ['n1'], 2), job('c', ['n2', 'n3'], 5), job('d', ['n9'], 9), job('a', ['n1'], 1)]
  const e = guardEviction({ ...job('a', ['n1', 'n2'], 1), slowdown: 1.4, maxSlowdown: 1.25 }, others)
  t.equal(e?.evict, 'c', 'c, placed after b, shares n2; d shares nothing; a itself in the list is ignored')
  t.match(e?.reason, /job a: measured slowdown 1\.400 over its bound 1\.25; the latest colocation on its nodes, c, back to the queue/)
  const self = guardEviction({ ...job('z', ['n1'], 7), slowdown: 2, maxSlowdown: 1.5 }, others)
  t.equal(self?.evict, 'z', 'the slowed job was the last to arrive: it goes back itself')
  t.match(self?.reason, /it was the latest colocation on its nodes \(beside b, a\), back to the queue/)
})

t.test('a neighbour running over its plan goes first, whoever arrived last', async t => {
  const others = [job('b', ['n1'], 2), { ...job('c', ['n1'], 3), overrun: 1.04 }, { ...job('d', ['n1'], 1), overrun: 1.3 }, { ...job('e', ['n1'], 0), overrun: 1.6 }, { ...job('f', ['n7'], 0), overrun: 3 }]
  const e = guardEviction({ ...job('a', ['n1'], 9), slowdown: 1.4, maxSlowdown: 1.25 }, others)
  t.equal(e?.evict, 'e', 'the largest overrun beyond 5 % among those sharing a node (f shares none; c is within 5 %)')
  t.match(e?.reason, /job a: measured slowdown 1\.400 over its bound 1\.25; e, running 1\.60x the busy time it was placed with, back to the queue/)
  t.equal(guardEviction({ ...job('a', ['n1'], 9), slowdown: 1.4, maxSlowdown: 1.25 }, [job('b', ['n1'], 2), { ...job('c', ['n1'], 3), overrun: 1.04 }])?.evict, 'a', 'no overrun: the latest colocation, a itself')
})
