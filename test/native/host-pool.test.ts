import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { capabilities, checksum, checksumBytes, copyHost, createHostPool, viewHostRange } from '../../native/index.ts'
import { patternBytes } from './helpers.ts'

const MiB = 2 ** 20

t.test('reserves, locks and describes the pool', async (t) => {
  const pool = await createHostPool({ sizeBytes: 8 * MiB })
  t.teardown(() => pool.close())
  const info = pool.info()
  t.equal(info.kind, 'hostPool')
  t.equal(info.bytes, 8 * MiB)
  t.equal(info.locked, true)
  t.ok(['hugetlb', 'transparent', 'none'].includes(info.hugePages))
  t.equal(info.cudaRegistered, capabilities.cuda.available, 'registered with CUDA exactly when CUDA is usable')
  t.equal(pool.fragmentation().freeBytes, 8 * MiB)
})

t.test('extents are views over the same native bytes, and free returns them', async (t) => {
  const pool = await createHostPool({ sizeBytes: 8 * MiB })
  t.teardown(() => pool.close())
  const a = pool.allocate(100_000)
  const b = pool.allocate(100_000)
  const data = patternBytes(100_000, 7)
  data.copy(pool.view(a))
  await copyHost(pool.range(b, 0, 100_000), pool.range(a, 0, 100_000))
  t.equal(Buffer.compare(pool.view(b).subarray(0, 100_000), data), 0, 'copied through native threads')
  t.equal(await checksum(pool.range(b, 0, 100_000)), await checksumBytes(data), 'checksums agree')
  t.equal(pool.fragmentation().usedExtents, 2)
  t.equal(pool.view(a).buffer, pool.view(b).buffer, 'every view shares one backing store (no new external memory per view)')
  t.equal(viewHostRange(pool.range(b, 10, 20)).buffer, pool.view(b).buffer)
  t.equal(viewHostRange(pool.range(b, 10, 20)).byteOffset, pool.view(b).byteOffset + 10)
  pool.free(a)
  t.throws(() => pool.free(a), { code: 'ERR_EXTENT_INVALID' }, 'double free rejected')
  t.throws(() => pool.view(a), { code: 'ERR_EXTENT_INVALID' }, 'no view of a freed extent')
  t.throws(() => pool.range(b, 0, b.length + 1), { code: 'ERR_OUT_OF_RANGE' })
  pool.free(b)
  t.equal(pool.fragmentation().freeExtents, 1)
})

t.test('a view keeps the memory mapped after close; closed pools reject work', async (t) => {
  const pool = await createHostPool({ sizeBytes: 4 * MiB })
  const e = pool.allocate(4096)
  const view = pool.view(e)
  view.fill(0x5a)
  pool.close()
  pool.close()
  t.equal(view[4095], 0x5a, 'the view still reads the bytes')
  t.throws(() => pool.viewBytes(0, 4096), { code: 'ERR_RESOURCE_CLOSED' }, 'no new view of a closed pool')
  await t.rejects(checksum({ memory: pool, offset: 0, length: 4096 }), { code: 'ERR_RESOURCE_CLOSED' })
})

t.test('validates options', async (t) => {
  await t.rejects(createHostPool({ sizeBytes: 100 }), { code: 'ERR_ARG_INVALID' })
  await t.rejects(createHostPool({ sizeBytes: MiB, cudaRegistrationChunkBytes: 3 * MiB }), { code: 'ERR_ARG_INVALID' })
})

t.test('a pool over RLIMIT_MEMLOCK fails with how to raise it', (t) => {
  // A child without CAP_IPC_LOCK (which would bypass the limit) and a 64 KiB limit.
  const child = fileURLToPath(new URL('./memlock-child.ts', import.meta.url))
  const script = `ulimit -l 64 && exec "${process.execPath}" "${child}"`
  const asRoot = process.getuid?.() === 0
  const command = asRoot ? 'setpriv' : 'sh'
  const args = asRoot
    ? ['--inh-caps=-ipc_lock', '--bounding-set=-ipc_lock', 'sh', '-c', script]
    : ['-c', script]
  const result = spawnSync(command, args, { encoding: 'utf8', env: { ...process.env, AGENTD_MEMLOCK_CHILD: '1' } })
  t.equal(result.status, 0, `child ran: ${result.stderr}`)
  const report = JSON.parse(result.stdout) as { code: string, message: string, limit: number }
  t.equal(report.limit, 64 * 1024, 'capabilities.memlockLimitBytes shows the limit')
  t.equal(report.code, 'ERR_MEMLOCK_LIMIT')
  t.match(report.message, /LimitMEMLOCK=infinity/)
  t.match(report.message, /ulimit -l/)
  t.end()
})
