// Adoption of shared-memory objects on its own: the request plan, the mapping check, the per-region key count.
import t from 'tap'
import { pino } from 'pino'
import { createAdoptedShmRegions, mapForAdoption, planShmAdoption } from '../../../agent/state/adopted-shm-regions.ts'
import { parseKey } from '../../../agent/state/keys.ts'
import { openSharedMemory } from '../../../native/index.ts'
import { makeShm } from '../../native/helpers.ts'

const logger = pino({ level: 'silent' })
const key = (name: string, bytes: number): ReturnType<typeof parseKey> => parseKey(`job/a/${name}:param@[0]/[${bytes}]:u8#v1`)

t.test('planShmAdoption splits fresh from stored keys and rejects the first bad item in order', async t => {
  const a = key('a', 10)
  const b = key('b', 20)
  const c = key('c', 30)
  const stored = new Map([[b.text, { name: 'entry-b' }]])
  const writing = new Set([c.text])
  const plan = planShmAdoption([a, b], [0, 4096], text => stored.get(text), text => writing.has(text))
  t.same(plan.fresh, [{ key: a, offset: 0 }])
  t.same(plan.existing, [{ name: 'entry-b' }], 'a stored key is returned as its entry, to count as a replica')

  t.throws(() => planShmAdoption([a, c], [0, 64], text => stored.get(text), text => writing.has(text)),
    { code: 'ERR_BAD_REQUEST', message: /tensors\[1\].*being written/ })
  t.throws(() => planShmAdoption([a, a], [0, 64], () => undefined, () => false), { code: 'ERR_BAD_REQUEST', message: /tensors\[1\].*appears twice/ })
  for (const offset of [-1, 0.5, Number.NaN, 2 ** 60]) {
    t.throws(() => planShmAdoption([a], [offset], () => undefined, () => false), { code: 'ERR_BAD_REQUEST', message: /tensors\[0\]\.offset/ }, String(offset))
  }
  t.throws(() => planShmAdoption([a, c], [-1, 0], () => undefined, text => writing.has(text)), { message: /tensors\[0\]\.offset/ },
    'items are checked in order: the bad offset before the key in flight')
})

t.test('mapForAdoption maps by name, checks every range, and closes only what it opened', async t => {
  const name = makeShm(t, 8192)
  const fits = [{ key: key('a', 4096), offset: 4096 }]
  const tooFar = [{ key: key('a', 4096), offset: 4097 }]
  const object = mapForAdoption(name, fits)
  t.equal(object.sizeBytes, 8192)
  object.close()
  t.throws(() => mapForAdoption(name, tooFar), { code: 'ERR_SIZE_MISMATCH', message: /4096 bytes at offset 4097 exceed/ })
  t.throws(() => mapForAdoption('agentd-test-missing-object', fits), { code: 'ERR_SOURCE_NOT_FOUND' })

  const callers = openSharedMemory(name)
  t.teardown(() => callers.close())
  t.throws(() => mapForAdoption(callers, tooFar), { code: 'ERR_SIZE_MISMATCH' })
  t.equal(callers.view(0, 4).length, 4, "the caller's mapping is still open after a refusal")
  t.equal(mapForAdoption(callers, fits), callers, "the caller's mapping is used as is")
})

t.test('a region counts its keys and bytes and unmaps with its last key', async t => {
  const regions = createAdoptedShmRegions({ logger })
  let closed = 0
  const object = openSharedMemory(makeShm(t, 8192))
  t.teardown(() => object.close())
  const counted = Object.create(object, { close: { value: () => { closed++ } } }) as typeof object
  const region = regions.add(counted, [{ key: key('a', 100), offset: 0 }, { key: key('b', 200), offset: 4096 }])
  t.match(region, { name: object.name, keys: 2, bytes: 300 })
  t.same(regions.totals(), { regions: 1, bytes: 300 })
  t.equal(region.memory.viewBytes(4096, 4).length, 4, 'the region reads the mapping through one whole view')

  regions.release(region, 100)
  t.same(regions.totals(), { regions: 1, bytes: 200 })
  t.equal(closed, 0, 'still mapped while a key uses it')
  regions.release(region, 200)
  t.same(regions.totals(), { regions: 0, bytes: 0 })
  t.equal(closed, 1, 'unmapped with the last key')
})
