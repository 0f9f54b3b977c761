// gatherHost: strided runs packed into contiguous bytes on native threads, checked against a JS reference; bad shapes rejected.
import t from 'tap'
import { createHostPool, gatherHost } from '../../native/index.ts'
import { patternBytes } from './helpers.ts'

const MiB = 2 ** 20

t.test('gathers strided runs (one thread and all threads) exactly like a row-by-row copy', async t => {
  const pool = await createHostPool({ sizeBytes: 32 * MiB, lock: false })
  t.teardown(() => pool.close())
  const src = pool.allocate(12 * MiB)
  const data = patternBytes(12 * MiB, 3)
  data.copy(pool.view(src))
  for (const [runBytes, runs, stride, threads] of [[4096, 1024, 8192, 0], [3, 1000, 7, 1], [2752, 2000, 2752 * 2, 0], [1 << 20, 5, 2 << 20, 0]] as const) {
    const dst = pool.allocate(runBytes * runs)
    await gatherHost(pool.range(dst, 0, runBytes * runs), pool.range(src, 100, stride * (runs - 1) + runBytes), { runBytes, runs, srcStride: stride }, { threads })
    const expected = Buffer.concat(Array.from({ length: runs }, (_, i) => data.subarray(100 + i * stride, 100 + i * stride + runBytes)))
    t.ok(pool.view(dst).subarray(0, runBytes * runs).equals(expected), `${runs} runs of ${runBytes} bytes, stride ${stride}, threads ${threads}`)
    pool.free(dst)
  }
})

t.test('rejects a stride shorter than a run, a short source and a wrong destination length', async t => {
  const pool = await createHostPool({ sizeBytes: 4 * MiB, lock: false })
  t.teardown(() => pool.close())
  const a = pool.allocate(MiB)
  const b = pool.allocate(MiB)
  await t.rejects(gatherHost(pool.range(b, 0, 100), pool.range(a, 0, 1000), { runBytes: 10, runs: 10, srcStride: 5 }), { code: 'ERR_ARG_INVALID' })
  await t.rejects(gatherHost(pool.range(b, 0, 100), pool.range(a, 0, 100), { runBytes: 10, runs: 10, srcStride: 20 }), { code: 'ERR_ARG_INVALID', message: /shorter than the gather's span/ })
  await t.rejects(gatherHost(pool.range(b, 0, 99), pool.range(a, 0, 1000), { runBytes: 10, runs: 10, srcStride: 20 }), { code: 'ERR_ARG_INVALID' })
})
