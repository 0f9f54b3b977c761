import t from 'tap'
import { rmSync, writeFileSync } from 'node:fs'
import { createShmMappingCache } from '../../../agent/state/shm-mapping-cache.ts'
import { makeShm } from '../../native/helpers.ts'

t.test('a mapping is reused while the object is the same, remapped when it was recreated', async t => {
  const cache = createShmMappingCache({ maxEntries: 2, idleMs: 1000 })
  t.teardown(() => cache.close())
  const name = makeShm(t, Buffer.alloc(8192, 1))
  const a = cache.acquire(name)
  a.release()
  const b = cache.acquire(name)
  t.equal(b.object, a.object, 'same mapping reused')
  b.release()
  rmSync(`/dev/shm/${name}`)
  writeFileSync(`/dev/shm/${name}`, Buffer.alloc(16384, 2))
  const c = cache.acquire(name)
  t.not(c.object, a.object, 'recreated object gets a new mapping')
  t.equal(c.object.sizeBytes, 16384)
  t.equal(c.object.view(0, 1)[0], 2, 'and sees the new bytes')
  c.release()
  rmSync(`/dev/shm/${name}`)
  t.throws(() => cache.acquire(name), { code: 'ERR_SHM_NOT_FOUND' }, 'a removed object is not served from the cache')
})

t.test('idle and excess mappings are closed, held ones never', async t => {
  const cache = createShmMappingCache({ maxEntries: 1, idleMs: 1000 })
  t.teardown(() => cache.close())
  const held = cache.acquire(makeShm(t, 4096))
  const other = cache.acquire(makeShm(t, 4096))
  other.release()
  cache.sweep(Date.now() + 5000)
  t.equal(held.object.view(0, 4).length, 4, 'a held mapping stays usable after a sweep')
  t.throws(() => other.object.view(0, 4), /closed|ERR_RESOURCE_CLOSED/, 'the idle one was unmapped')
  held.release()
})
