import t from 'tap'
import { createSortedList } from '../../core/sorted-list.ts'
import { createSeededRandom } from '../../core/seeded-random.ts'

t.test('inserts, removes and seeks like a sorted array, across block splits and empty blocks', async t => {
  const list = createSortedList<{ k: string, v: number }>(item => item.k, 4)
  const reference = new Map<string, number>()
  const rng = createSeededRandom(7)
  const random = (): number => rng.next()
  const keyOf = (n: number): string => `k${String(n).padStart(4, '0')}`
  for (let step = 0; step < 5000; step++) {
    const k = keyOf(Math.floor(random() * 300))
    if (random() < 0.6) {
      list.insert({ k, v: step })
      reference.set(k, step)
    } else {
      t.equal(list.remove(k), reference.delete(k), `remove ${k}`)
    }
    if (step % 250 === 0 || step === 4999) {
      const sorted = [...reference].sort(([a], [b]) => a < b ? -1 : 1)
      t.equal(list.size, reference.size)
      t.same([...list.from('')].map(i => [i.k, i.v]), sorted, `in order after step ${step}`)
      const at = keyOf(Math.floor(random() * 300))
      t.same([...list.from(at)].map(i => i.k), sorted.map(([k]) => k).filter(k => k >= at), `from ${at}`)
      t.same([...list.from(at, true)].map(i => i.k), sorted.map(([k]) => k).filter(k => k > at), `after ${at}`)
    }
  }
  t.same([...list.from('zzz')], [], 'nothing past the last key')
})
