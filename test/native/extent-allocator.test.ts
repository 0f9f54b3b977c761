import t from 'tap'
import { defaultAlignment, ExtentAllocator } from '../../native/extent-allocator.ts'

const MiB = 2 ** 20

t.test('allocates 4 KiB-rounded, aligned extents and frees them back into one span', (t) => {
  const a = new ExtentAllocator(16 * MiB)
  const small = a.allocate(1)
  t.same(small, { offset: 0, length: 4096 })
  const odd = a.allocate(5000)
  t.equal(odd.length, 8192)
  t.equal(odd.offset % 4096, 0)
  const big = a.allocate(3 * MiB)
  t.equal(big.offset % defaultAlignment(3 * MiB), 0, 'big extents get 64 KiB alignment')
  const aligned = a.allocate(4096, 2 * MiB)
  t.equal(aligned.offset % (2 * MiB), 0, 'explicit alignment honoured')
  t.equal(a.report().usedExtents, 4)
  for (const e of [odd, big, small, aligned]) a.free(e)
  t.same(a.report(), {
    totalBytes: 16 * MiB, usedBytes: 0, freeBytes: 16 * MiB, largestFreeBytes: 16 * MiB,
    freeExtents: 1, usedExtents: 0, fragmentation: 0,
  }, 'neighbours coalesce back into a single free extent')
  t.end()
})

t.test('best fit picks the smallest hole that fits', (t) => {
  const a = new ExtentAllocator(1 * MiB)
  const e = Array.from({ length: 8 }, () => a.allocate(64 * 1024, 4096))
  a.free(e[1]!) // 64 KiB hole
  a.free(e[4]!)
  a.free(e[5]!) // 128 KiB hole
  const got = a.allocate(60 * 1024, 4096)
  t.equal(got.offset, e[1]!.offset, 'the 64 KiB hole, not the 128 KiB one nor the tail')
  t.end()
})

t.test('reports fragmentation', (t) => {
  const a = new ExtentAllocator(1 * MiB)
  const e = Array.from({ length: 16 }, () => a.allocate(64 * 1024, 4096))
  for (let i = 0; i < 16; i += 2) a.free(e[i]!)
  const r = a.report()
  t.equal(r.freeBytes, 512 * 1024)
  t.equal(r.largestFreeBytes, 64 * 1024)
  t.equal(r.freeExtents, 8)
  t.equal(r.fragmentation, 1 - 1 / 8)
  t.throws(() => a.allocate(128 * 1024, 4096), { code: 'ERR_POOL_FULL' }, 'free bytes suffice but no hole does')
  t.end()
})

t.test('rejects double free, foreign offsets and wrong lengths', (t) => {
  const a = new ExtentAllocator(1 * MiB)
  const e = a.allocate(8192)
  t.throws(() => a.free({ offset: 4096, length: 4096 }), { code: 'ERR_EXTENT_INVALID', message: /not the start/ })
  t.throws(() => a.free({ offset: e.offset, length: 4096 }), { code: 'ERR_EXTENT_INVALID', message: /has length/ })
  a.free(e)
  t.throws(() => a.free(e), { code: 'ERR_EXTENT_INVALID', message: /double free/ })
  t.throws(() => a.free({ offset: 10 * MiB, length: 4096 }), { code: 'ERR_EXTENT_INVALID' })
  t.end()
})

t.test('validates arguments and exhaustion', (t) => {
  const a = new ExtentAllocator(64 * 1024)
  t.throws(() => a.allocate(0), { code: 'ERR_ARG_INVALID' })
  t.throws(() => a.allocate(1.5), { code: 'ERR_ARG_INVALID' })
  t.throws(() => a.allocate(4096, 3000), { code: 'ERR_ARG_INVALID' })
  t.throws(() => new ExtentAllocator(100), { code: 'ERR_ARG_INVALID' })
  a.allocate(64 * 1024)
  t.throws(() => a.allocate(4096), { code: 'ERR_POOL_FULL' })
  t.end()
})

t.test('random alloc/free keeps the books balanced', (t) => {
  const a = new ExtentAllocator(8 * MiB)
  const live: Array<{ offset: number, length: number }> = []
  let x = 12345
  const rand = (n: number) => { x = (x * 1103515245 + 12345) % 2 ** 31; return x % n }
  for (let i = 0; i < 2000; i++) {
    if (live.length > 0 && rand(3) === 0) {
      a.free(live.splice(rand(live.length), 1)[0]!)
    } else {
      try { live.push(a.allocate(1 + rand(256 * 1024))) } catch { /* full */ }
    }
  }
  const sorted = [...live].sort((p, q) => p.offset - q.offset)
  const overlapping = sorted.filter((e, i) => i > 0 && sorted[i - 1]!.offset + sorted[i - 1]!.length > e.offset)
  t.ok(live.length > 10, 'the run kept many extents live')
  t.same(overlapping, [], 'no two live extents overlap')
  t.equal(a.report().usedBytes, live.reduce((s, e) => s + e.length, 0))
  for (const e of live) a.free(e)
  t.equal(a.report().freeExtents, 1)
  t.end()
})
