import { readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { checksum, checksumBytes, createHostPool, openDirectFile, probeDirectIo, type HostPool } from '../../native/index.ts'
import { diskDir, noDirectIoDir, patternBytes } from './helpers.ts'

const MiB = 2 ** 20

async function poolFor (t: Test, bytes: number): Promise<HostPool> {
  const pool = await createHostPool({ sizeBytes: bytes })
  t.teardown(() => pool.close())
  return pool
}

t.test('a disk directory gets O_DIRECT with an alignment of at least 4096', (t) => {
  const info = probeDirectIo(diskDir(t))
  t.equal(info.directIo, true)
  t.equal(info.directIoReason, null)
  t.ok(info.alignment >= 4096 && info.memoryAlignment >= 4096)
  t.ok(info.alignmentSource === 'statx' || info.alignmentSource === 'blockSize')
  t.end()
})

t.test('round trips of odd sizes and offsets, checksummed', async (t) => {
  const dir = diskDir(t)
  const pool = await poolFor(t, 32 * MiB)
  const file = openDirectFile(join(dir, 'odd.bin'), { create: true })
  t.teardown(() => file.close())
  t.equal(file.info().directIo, true)
  // [file offset, length, region offset within the extent]
  const cases: Array<[number, number, number]> = [
    [0, 1, 0], [0, 4095, 0], [0, 4096, 0], [4096, 4097, 0], [123, 5000, 0],
    [8192, 3 * MiB + 17, 0], [3 * MiB + 4000, 1 * MiB, 512], [5, 2 * MiB, 3],
  ]
  const src = pool.allocate(4 * MiB)
  const dst = pool.allocate(4 * MiB)
  for (const [fileOffset, length, regionOffset] of cases) {
    const data = patternBytes(length, fileOffset + length)
    data.copy(pool.view(src), regionOffset)
    const written = await file.write(pool.range(src, regionOffset, length), fileOffset, { queueDepth: 4, blockBytes: 256 * 1024 })
    t.equal(written.bytes, length)
    pool.view(dst).fill(0)
    await file.read(pool.range(dst, regionOffset, length), fileOffset, { queueDepth: 3 })
    t.equal(await checksum(pool.range(dst, regionOffset, length)), await checksumBytes(data),
      `offset ${fileOffset} length ${length} region+${regionOffset}`)
  }
  // The file holds exactly what was written last over each byte; check one
  // earlier write survived a later unaligned read-modify-write next to it.
  const onDisk = readFileSync(join(dir, 'odd.bin'))
  t.equal(onDisk.length, 3 * MiB + 4000 + 1 * MiB, 'size ends at the furthest write, no padding left')
  t.equal(Buffer.compare(onDisk.subarray(3 * MiB + 4000, 3 * MiB + 4000 + 100),
    patternBytes(1 * MiB, 3 * MiB + 4000 + 1 * MiB).subarray(0, 100)), 0)
})

t.test('appending at an unaligned offset across several I/O blocks (short read at EOF in the read-modify-write)', async (t) => {
  const pool = await poolFor(t, 8 * MiB)
  const extent = pool.allocate(4 * MiB)
  const data = patternBytes(3 * MiB + 17, 21)
  data.copy(pool.view(extent))
  const path = join(diskDir(t), 'append.bin')
  const file = openDirectFile(path, { create: true })
  t.teardown(() => file.close())
  await file.write(pool.range(extent, 0, 5), 0)
  await file.write(pool.range(extent, 0, data.length), 5)
  const back = readFileSync(path)
  t.equal(back.length, 5 + data.length)
  t.ok(back.subarray(5).equals(data), 'bytes after the unaligned start are exact')
})

t.test('aligned transfers go straight through; an unaligned tail is bounced', async (t) => {
  const pool = await poolFor(t, 8 * MiB)
  const file = openDirectFile(join(diskDir(t), 'tail.bin'), { create: true })
  t.teardown(() => file.close())
  const e = pool.allocate(4 * MiB)
  patternBytes(4 * MiB, 1).copy(pool.view(e))
  const aligned = await file.write(pool.range(e, 0, 4 * MiB), 0, { blockBytes: MiB })
  t.equal(aligned.bouncedChunks, 0)
  const tail = await file.write(pool.range(e, 0, 2 * MiB + 10), 0, { blockBytes: MiB, sync: true })
  t.equal(tail.bouncedChunks, 1, 'only the last chunk')
  t.equal(statSync(file.path).size, 4 * MiB, 'a shorter rewrite inside the file keeps its size')
  await t.rejects(file.read(pool.range(e, 0, 4096), 4 * MiB - 100), { code: 'ERR_OUT_OF_RANGE', message: /past the end/ })
  await file.sync()
})

t.test('buffered fallback on a filesystem without O_DIRECT', async (t) => {
  const { dir, reason } = noDirectIoDir(t)
  const probe = dir === null ? null : probeDirectIo(dir)
  if (dir === null || probe === null) {
    t.plan(0, `no filesystem without O_DIRECT available: ${reason}`)
    return
  }
  t.equal(probe.directIo, false)
  t.match(probe.directIoReason, /does not support O_DIRECT/)
  const pool = await poolFor(t, 4 * MiB)
  const file = openDirectFile(join(dir, 'buffered.bin'), { create: true })
  t.teardown(() => file.close())
  t.equal(file.info().directIo, false, 'visible in the file info')
  const e = pool.allocate(MiB)
  const data = patternBytes(300_001, 5)
  data.copy(pool.view(e))
  await file.write(pool.range(e, 0, data.length), 77, { sync: true })
  const back = pool.allocate(MiB)
  await file.read(pool.range(back, 0, data.length), 77)
  t.equal(Buffer.compare(pool.view(back).subarray(0, data.length), data), 0)
  t.equal(statSync(file.path).size, 77 + data.length)
})

t.test('O_DIRECT can be disabled by configuration', async (t) => {
  const pool = await poolFor(t, 4 * MiB)
  const file = openDirectFile(join(diskDir(t), 'configured.bin'), { create: true, directIo: false })
  t.teardown(() => file.close())
  t.equal(file.info().directIo, false)
  t.match(file.info().directIoReason, /disabled by configuration/)
  const e = pool.allocate(8192)
  pool.view(e).fill(9)
  await file.write(pool.range(e, 0, 5555), 1, { sync: true })
  t.same(readFileSync(file.path).subarray(1), Buffer.alloc(5555, 9))
})

t.test('concurrent transfers to different files and ranges', async (t) => {
  const dir = diskDir(t)
  const pool = await poolFor(t, 48 * MiB)
  const files = [0, 1, 2].map((i) => openDirectFile(join(dir, `c${i}.bin`), { create: true }))
  t.teardown(() => { for (const f of files) f.close() })
  const jobs = files.flatMap((file, i) => [0, 1].map((j) => ({ file, at: j * 4 * MiB, data: patternBytes(4 * MiB - j * 3, i * 10 + j) })))
  const src = jobs.map((job) => { const e = pool.allocate(4 * MiB); job.data.copy(pool.view(e)); return e })
  await Promise.all(jobs.map((job, k) => job.file.write(pool.range(src[k]!, 0, job.data.length), job.at, { queueDepth: 8 })))
  const dst = jobs.map(() => pool.allocate(4 * MiB))
  await Promise.all(jobs.map((job, k) => job.file.read(pool.range(dst[k]!, 0, job.data.length), job.at, { queueDepth: 8 })))
  const got = await Promise.all(jobs.map((job, k) => checksum(pool.range(dst[k]!, 0, job.data.length))))
  const want = await Promise.all(jobs.map((job) => checksumBytes(job.data)))
  t.same(got, want)
})

t.test('validation and errors', async (t) => {
  const dir = diskDir(t)
  t.throws(() => openDirectFile(join(dir, 'missing.bin')), { code: 'ERR_NOT_FOUND', message: /ENOENT/ })
  t.throws(() => openDirectFile(''), { code: 'ERR_ARG_INVALID' })
  writeFileSync(join(dir, 'ro.bin'), 'x')
  const pool = await poolFor(t, MiB)
  const file = openDirectFile(join(dir, 'ro.bin'))
  const e = pool.allocate(4096)
  await t.rejects(file.write(pool.range(e), 0), { code: 'ERR_IO', message: /EBADF/ }, 'read-only file')
  await t.rejects(file.read(pool.range(e), 0, { queueDepth: 65 }), { code: 'ERR_ARG_INVALID' })
  file.close()
  t.throws(() => file.info(), { code: 'ERR_RESOURCE_CLOSED' })
})
