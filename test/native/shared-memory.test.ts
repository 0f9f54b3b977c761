import { execFileSync } from 'node:child_process'
import t from 'tap'
import { checksum, checksumBytes, copyHost, createHostPool, openSharedMemory, populateHostRange } from '../../native/index.ts'
import { normalizeShmName } from '../../native/shared-memory.ts'
import { kernelHasPopulateWrite, makeShm, patternBytes } from './helpers.ts'

const MiB = 2 ** 20

const kernelPopulates = await kernelHasPopulateWrite()

t.test('maps an object made by Python multiprocessing.shared_memory', (t) => {
  const name = `agentd_py_${process.pid}`
  const script = [
    'import sys',
    'from multiprocessing import shared_memory, resource_tracker',
    'shm = shared_memory.SharedMemory(name=sys.argv[1], create=True, size=65536)',
    'shm.buf[:5] = b"hello"',
    'shm.buf[65535] = 42',
    'resource_tracker.unregister(shm._name, "shared_memory")', // leave it for the agent
    'shm.close()',
  ].join('\n')
  execFileSync('python3', ['-c', script, name])
  t.teardown(() => execFileSync('rm', ['-f', `/dev/shm/${name}`]))
  const shm = openSharedMemory(`/${name}`)
  t.teardown(() => shm.close())
  t.equal(shm.name, name, 'a leading slash (shm_open style) is accepted')
  t.equal(shm.sizeBytes, 65536, 'size from fstat')
  t.equal(shm.view(0, 5).toString(), 'hello')
  t.equal(shm.view(65535, 1)[0], 42)
  t.end()
})

t.test('reports a missing object, a too-small one and ranges past the end', (t) => {
  t.throws(() => openSharedMemory(`agentd-missing-${process.pid}`), { code: 'ERR_SHM_NOT_FOUND', message: /ENOENT/ })
  const name = makeShm(t, 4096)
  t.throws(() => openSharedMemory(name, { minBytes: 8192 }), { code: 'ERR_SHM_TOO_SMALL', message: /4096 bytes, 8192 required/ })
  t.throws(() => openSharedMemory(makeShm(t, 0)), { code: 'ERR_SHM_TOO_SMALL' }, 'an empty object')
  const shm = openSharedMemory(name, { minBytes: 4096 })
  t.teardown(() => shm.close())
  t.throws(() => shm.range(5000, 1), { code: 'ERR_OUT_OF_RANGE', message: /past the end/ })
  t.throws(() => shm.range(4000, 100), { code: 'ERR_OUT_OF_RANGE', message: /exceeds/ })
  t.throws(() => shm.view(4096, 1), { code: 'ERR_OUT_OF_RANGE' })
  t.same(shm.range(4096, 0), { memory: shm, offset: 4096, length: 0 }, 'an empty range at the end is fine')
  t.end()
})

t.test('rejects names shm_open would not take', (t) => {
  for (const bad of ['', '/', 'a/b', '..', 'x'.repeat(256), 'nul\0']) {
    t.throws(() => normalizeShmName(bad), { code: 'ERR_ARG_INVALID' }, JSON.stringify(bad))
  }
  t.end()
})

t.test('copies shm <-> pool extent at odd offsets, large and small, verified by checksum', async (t) => {
  const data = patternBytes(24 * MiB + 123, 99)
  const name = makeShm(t, data)
  const shm = openSharedMemory(name)
  const pool = await createHostPool({ sizeBytes: 64 * MiB })
  t.teardown(() => { shm.close(); pool.close() })
  const extent = pool.allocate(25 * MiB)
  const length = data.length - 77
  await copyHost(pool.range(extent, 0, length), shm.range(77, length))
  const expected = await checksumBytes(data.subarray(77))
  t.equal(await checksum(pool.range(extent, 0, length)), expected, 'multi-threaded copy shm -> pool')
  t.equal(await checksum(pool.range(extent, 0, length), { threads: 1 }), expected, 'single-thread checksum agrees')

  const back = makeShm(t, length)
  const target = openSharedMemory(back)
  t.teardown(() => target.close())
  await copyHost(target.range(0, 1000), pool.range(extent, 0, 1000), { threads: 1 })
  await copyHost(target.range(1000, length - 1000), pool.range(extent, 1000, length - 1000))
  t.equal(await checksum(target.range(0, length)), expected, 'pool -> shm')
  await t.rejects(copyHost(target.range(0, 10), pool.range(extent, 0, 11)), { code: 'ERR_ARG_INVALID' })
  await t.rejects(copyHost(target.range(0, 4096), target.range(100, 4096)), { code: 'ERR_ARG_INVALID', message: /overlap/ })
})

t.test('concurrent copies into disjoint extents all land', async (t) => {
  const pool = await createHostPool({ sizeBytes: 32 * MiB })
  t.teardown(() => pool.close())
  const sources = Array.from({ length: 6 }, (_, i) => patternBytes(3 * MiB + i * 4099, i + 1))
  const maps = sources.map((bytes) => openSharedMemory(makeShm(t, bytes)))
  t.teardown(() => { for (const m of maps) m.close() })
  const extents = sources.map((bytes) => pool.allocate(bytes.length))
  await Promise.all(maps.map((m, i) => copyHost(pool.range(extents[i]!, 0, m.sizeBytes), m.range(0, m.sizeBytes))))
  const sums = await Promise.all(extents.map((e, i) => checksum(pool.range(e, 0, sources[i]!.length))))
  const expected = await Promise.all(sources.map((bytes) => checksumBytes(bytes)))
  t.same(sums, expected)
})

t.test('the mapping outlives close() while a view exists', (t) => {
  const name = makeShm(t, Buffer.from('persist'))
  const shm = openSharedMemory(name)
  const view = shm.view(0, 7)
  shm.close()
  t.equal(view.toString(), 'persist')
  t.end()
})

t.test('populateHostRange faults pages in without changing a byte, holes included', { skip: kernelPopulates ? false : 'this kernel has no MADV_POPULATE_WRITE (Linux < 5.14): populateHostRange allocates nothing' }, async (t) => {
  const data = patternBytes(3 * MiB + 100, 9)
  const name = makeShm(t, data)
  const { truncateSync, statSync } = await import('node:fs')
  truncateSync(`/dev/shm/${name}`, 8 * MiB) // a hole after the data
  const shm = openSharedMemory(name)
  t.teardown(() => shm.close())
  t.ok(statSync(`/dev/shm/${name}`).blocks * 512 < 8 * MiB, 'the hole holds no pages before')
  t.equal(await populateHostRange(shm.range(100, 8 * MiB - 200)), true, 'done') // unaligned ends are rounded to pages
  t.ok(statSync(`/dev/shm/${name}`).blocks * 512 >= 8 * MiB, 'every page of the range is allocated, the rounded ends included')
  t.equal(await checksum(shm.range(0, data.length)), await checksumBytes(data), 'the data is unchanged')
  t.equal(await checksum(shm.range(data.length, 8 * MiB - data.length)), await checksumBytes(new Uint8Array(8 * MiB - data.length)), 'the hole reads as zeros')
  t.equal(statSync(`/dev/shm/${name}`).size, 8 * MiB, 'the size is unchanged')
  await t.rejects(populateHostRange({ memory: shm, offset: 8 * MiB, length: 1 }), { code: 'ERR_OUT_OF_RANGE' })
})
