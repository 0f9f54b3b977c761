import t from 'tap'
import { toRingRanges, ringPosition, durationSlots, slotAt } from '../../../../mesh/policies/placement/ring-horizon.ts'
import { createFreeNodeProfile } from '../../../../mesh/policies/placement/free-node-profile.ts'
import { FreeIntervalSet } from '../../../../mesh/policies/placement/free-interval-set.ts'
import { createSeededRandom } from '../../../../core/seeded-random.ts'

t.test('ring positions and ranges wrap around the end of the ring', async t => {
  t.equal(ringPosition(28_805, 28_800), 5)
  t.equal(ringPosition(-1, 10), 9)
  t.same(toRingRanges(3, 7, 10), [{ from: 3, to: 7 }])
  t.same(toRingRanges(8, 13, 10), [{ from: 8, to: 10 }, { from: 0, to: 3 }])
  t.same(toRingRanges(20, 30, 10), [{ from: 0, to: 10 }])
  t.same(toRingRanges(5, 5, 10), [])
  t.throws(() => toRingRanges(0, 11, 10), RangeError)
  t.equal(durationSlots(0.2, 1), 1)
  t.equal(durationSlots(10, 1), 10)
  t.equal(durationSlots(10, 4), 3)
  t.equal(slotAt(9.99, 1), 9)
})

t.test('free-node profile: range add and range minimum match a brute-force array, across the wrap', async t => {
  const slots = 37
  const profile = createFreeNodeProfile(slots, 8)
  const ref = new Array<number>(slots).fill(8)
  const rnd = createSeededRandom(3)
  for (let step = 0; step < 400; step++) {
    const a = rnd.int(0, 200)
    const b = a + rnd.int(0, slots)
    const delta = rnd.int(-2, 2)
    profile.add(a, b, delta)
    for (let s = a; s < b; s++) ref[s % slots]! += delta
    const qa = rnd.int(0, 200)
    const qb = qa + rnd.int(1, slots)
    let expect = Infinity
    for (let s = qa; s < qb; s++) expect = Math.min(expect, ref[s % slots]!)
    t.equal(profile.minFree(qa, qb), expect, `min over [${qa}, ${qb})`)
    const n = rnd.int(0, 10)
    let first = -1
    for (let s = qa; s < qb; s++) if (ref[s % slots]! < n) { first = s; break }
    t.equal(profile.firstBelow(qa, qb, n), first, `first below ${n} in [${qa}, ${qb})`)
  }
  t.equal(profile.minFree(4, 4), Infinity)
})

t.test('free-node profile: a gang check prunes windows where too few nodes are free', async t => {
  const profile = createFreeNodeProfile(28_800, 4)
  profile.add(28_790, 28_810, -3) // busy across the wrap
  t.equal(profile.minFree(28_780, 28_789), 4)
  t.equal(profile.minFree(28_805, 28_815), 1)
  t.equal(profile.freeAt(5), 1, 'slot 28,805 lives at ring position 5')
  t.equal(profile.firstBelow(28_700, 28_900, 2), 28_790)
  t.equal(profile.firstBelow(28_800, 28_900, 2), 28_800)
})

t.test('interval set: fits, earliestFit, reserve and release with edge cases', async t => {
  const set = FreeIntervalSet.free(0, 100)
  t.ok(set.fits(0, 100), 'the whole window')
  t.ok(set.fits(40, 40), 'an empty range fits')
  t.notOk(set.fits(-1, 5), 'before the window')
  t.notOk(set.fits(90, 101), 'past the window')
  set.reserve(10, 20)
  set.reserve(30, 35)
  t.same(set.intervals(), [[0, 10], [20, 30], [35, 100]])
  t.equal(set.freeSlots, 85)
  t.ok(set.fits(0, 10), 'exactly a free interval')
  t.notOk(set.fits(5, 11), 'one slot into a reservation')
  t.ok(set.fits(20, 30), 'touching both neighbours')
  t.notOk(set.fits(19, 21))
  t.equal(set.earliestFit(0, 10), 0)
  t.equal(set.earliestFit(1, 10), 20)
  t.equal(set.earliestFit(21, 10), 35)
  t.equal(set.earliestFit(21, 10, 30), -1, 'latest start bounds the search')
  t.equal(set.earliestFit(0, 65), 35)
  t.equal(set.earliestFit(0, 65, 34), -1)
  t.equal(set.earliestFit(0, 200), -1)
  t.throws(() => set.reserve(5, 15), /not free/)
  t.same(set.intervals(), [[0, 10], [20, 30], [35, 100]], 'a failed reserve changes nothing')
  t.same(set.busyWithin(0, 100), [[10, 20], [30, 35]])
  t.same(set.busyWithin(12, 32), [[12, 20], [30, 32]])
  t.same(set.containing(25), [20, 30])
  t.equal(set.containing(15), undefined)
  set.release(30, 35)
  t.same(set.intervals(), [[0, 10], [20, 100]], 'release merges both neighbours')
  t.throws(() => set.release(15, 25), /already partly free/)
  set.release(10, 12)
  t.same(set.intervals(), [[0, 12], [20, 100]], 'merges left')
  set.release(18, 20)
  t.same(set.intervals(), [[0, 12], [18, 100]], 'merges right')
  set.release(14, 16)
  t.same(set.intervals(), [[0, 12], [14, 16], [18, 100]], 'stands alone')
  set.reserve(0, 12)
  t.same(set.intervals(), [[14, 16], [18, 100]], 'a whole interval')
  set.trimBefore(50)
  t.same(set.intervals(), [[50, 100]])
  t.equal(set.freeSlots, 50)
})

t.test('interval set: random reserve/release agrees with a slot array', async t => {
  const rnd = createSeededRandom(11)
  const set = FreeIntervalSet.free(0, 64)
  const free = new Array<boolean>(64).fill(true)
  for (let step = 0; step < 2000; step++) {
    const a = rnd.int(0, 63)
    const b = a + rnd.int(1, 64 - a)
    const allFree = free.slice(a, b).every(x => x)
    const allBusy = free.slice(a, b).every(x => !x)
    t.equal(set.fits(a, b), allFree)
    if (allFree && rnd.next() < 0.5) { set.reserve(a, b); free.fill(false, a, b) } else if (allBusy) { set.release(a, b); free.fill(true, a, b) }
    const len = rnd.int(1, 8)
    let expect = -1
    for (let s = a; s + len <= 64; s++) if (free.slice(s, s + len).every(x => x)) { expect = s; break }
    if (set.earliestFit(a, len) !== expect) t.fail(`earliestFit(${a}, ${len})`)
  }
  t.equal(set.freeSlots, free.filter(x => x).length)
})
