// The stage-queue orders of the replay simulator: Earliest-Batch-First and FCFS over a binary heap.
import t from 'tap'
import { createPriorityHeap } from '../../../../core/priority-heap.ts'
import { earliestBatchFirst, firstComeFirstServed, queueOrder, type QueueKey } from '../../../../mesh/policies/reward-scaling/queue-order.ts'

const key = (name: string, priorityS: number, enqueuedS: number, seq: number): QueueKey & { name: string } => ({ name, priorityS, enqueuedS, seq })
const keys = [key('late batch, first in', 50, 1, 0), key('early batch, second in', 20, 2, 1), key('early batch, third in', 20, 3, 2), key('early batch, tie on time', 20, 3, 3)]

function drain (before: (a: QueueKey, b: QueueKey) => boolean): string[] {
  const heap = createPriorityHeap(before)
  for (const k of [...keys].reverse()) heap.push(k)
  const out: string[] = []
  while (heap.size > 0) out.push((heap.pop() as typeof keys[number]).name)
  return out
}

t.test('EBF: earliest estimated batch completion first, then queue entry, then sequence', async t => {
  t.same(drain(earliestBatchFirst), ['early batch, second in', 'early batch, third in', 'early batch, tie on time', 'late batch, first in'])
  t.equal(queueOrder('ebf'), earliestBatchFirst)
})

t.test('FCFS: queue entry, then sequence, whatever the batch', async t => {
  t.same(drain(firstComeFirstServed), ['late batch, first in', 'early batch, second in', 'early batch, third in', 'early batch, tie on time'])
  t.equal(queueOrder('fcfs'), firstComeFirstServed)
})

t.test('the heap: peek, pop on empty, clear', async t => {
  const heap = createPriorityHeap<number>((a, b) => a < b)
  t.equal(heap.pop(), undefined)
  for (const n of [5, 1, 4, 1, 3]) heap.push(n)
  t.equal(heap.peek(), 1)
  t.same([heap.pop(), heap.pop(), heap.pop()], [1, 1, 3])
  heap.clear()
  t.equal(heap.size, 0)
})
