/**
 * Region hand-out is refused up front when the publish could not succeed
 * (publisher.ts "Region lifecycle"): a bad tensor table, a region larger than
 * /dev/shm can hold, one the namespace quota would refuse at publish; and a
 * pre-fault the kernel fails leaves no object, mapping or reservation behind.
 */
import { readdirSync, statfsSync, truncateSync } from 'node:fs'
import t from 'tap'
import pino from 'pino'
import { createPublisher, type TensorSpec } from '../../../agent/weights/publisher.ts'
import { populateHostRange, type HostRange } from '../../../native/index.ts'
import { logger, MiB, sharedKey, versionStoreNode, weightsNode } from './weights-fixtures.ts'
import { kernelHasPopulateWrite } from '../../native/helpers.ts'

const regionObjects = (): string[] => readdirSync('/dev/shm').filter(n => n.startsWith('agentd-weights-'))

t.test('bad tensor tables and sizes are refused with a clear error; nothing is created and the version stays free', async t => {
  const a = await weightsNode(t, sharedKey())
  const before = new Set(regionObjects())
  const bad = async (tensors: unknown, code: string, message: RegExp, why: string): Promise<void> => {
    await t.rejects(a.weights.createRegion('h', 3, tensors as TensorSpec[]), { code, message }, why)
  }
  const free = statfsSync('/dev/shm').bavail * statfsSync('/dev/shm').bsize
  await bad([{ name: 'huge.weight', dtype: 'u8', shape: [2 * free] }], 'ERR_TIER_FULL', /region of \d+ bytes does not fit in \/dev\/shm: \d+ bytes free/, 'twice the free space of /dev/shm')
  await bad([{ name: 'a', dtype: 'bf16', shape: [2 ** 40, 2 ** 20] }], 'ERR_BAD_REQUEST', /larger than \d+ bytes/, 'a size past 2^53')
  await bad([{ name: 'a', dtype: 'f32', shape: [4, 0] }], 'ERR_BAD_REQUEST', /shape must be up to 8 positive integers/, 'size 0')
  await bad([{ name: 'a', dtype: 'f32', shape: [-4] }], 'ERR_BAD_REQUEST', /shape must be up to 8 positive integers/, 'a negative size')
  await bad([{ name: 'a', dtype: 'f32', shape: [1.5] }], 'ERR_BAD_REQUEST', /positive integers/, 'a fractional size')
  await bad([], 'ERR_BAD_REQUEST', /at least one tensor/, 'no tensors')
  await bad([{ name: 'a', dtype: 'f32', shape: [4] }, { name: 'a', dtype: 'f32', shape: [4] }], 'ERR_BAD_REQUEST', /appears twice/, 'a duplicate name')
  await bad([{ name: 'a', dtype: 'f33', shape: [4] }], 'ERR_BAD_REQUEST', /unknown dtype "f33"/, 'an unknown dtype')
  await bad([{ name: '../a', dtype: 'f32', shape: [4] }], 'ERR_BAD_REQUEST', /tensor name/, 'a name with a slash')
  await bad([null], 'ERR_BAD_REQUEST', /list of \{ name, dtype, shape \}/, 'not an object')
  await bad({ name: 'a' }, 'ERR_BAD_REQUEST', /list of/, 'not a list')
  t.same(regionObjects().filter(n => !before.has(n)), [], 'no object left in /dev/shm')
  t.same(a.sm.residency().shm, { regions: 0, bytes: 0 }, 'nothing mapped')
  t.equal((await a.weights.createRegion('h', 3, [{ name: 'a', dtype: 'f32', shape: [4] }])).version, 3, 'the version was never taken')
})

t.test('the namespace quota the publish would apply is checked at hand-out, counting the model\'s other open regions', async t => {
  const { sm, versions, dir } = await versionStoreNode(t, { 'weights/q': 3 * MiB })
  const publisher = createPublisher({ chunkBytes: 65536, durable: false, owner: dir }, { stateManager: sm, versions, logger })
  t.teardown(() => publisher.close())
  const before = new Set(regionObjects())
  const mib = (name: string, n: number): TensorSpec => ({ name, dtype: 'u8', shape: [n * MiB] })
  await t.rejects(publisher.createRegion('q', 1, [mib('a', 2), mib('b', 2)]), { code: 'ERR_QUOTA_EXCEEDED', message: /namespace weights\/q would hold 4194304 bytes, over its quota of 3145728/ }, 'one region over the quota')
  const first = await publisher.createRegion('q', 1, [mib('a', 2)])
  await t.rejects(publisher.createRegion('q', 2, [mib('a', 2)]), { code: 'ERR_QUOTA_EXCEEDED' }, 'two regions of the model together over the quota')
  t.equal((await publisher.createRegion('other', 1, [mib('a', 2)])).model, 'other', 'another model\'s namespace is not charged')
  await publisher.discardRegion(first.region)
  t.equal((await publisher.createRegion('q', 2, [mib('a', 2)])).version, 2, 'fits again once the first region is given back')
  const racing = await Promise.allSettled([publisher.createRegion('q', 3, [mib('a', 1)]), publisher.createRegion('q', 4, [mib('a', 1)])])
  t.same(racing.map(r => r.status).sort(), ['fulfilled', 'rejected'], 'two concurrent hand-outs over the quota together: one is refused')
  t.match(racing.find(r => r.status === 'rejected'), { reason: { code: 'ERR_QUOTA_EXCEEDED' } })
  t.same(regionObjects().filter(n => !before.has(n)).length, 3, 'only the regions handed out exist')
})

t.test('a pre-fault the kernel refuses fails the hand-out and leaves no object, mapping or reservation', { skip: await kernelHasPopulateWrite() ? false : 'this kernel has no MADV_POPULATE_WRITE (Linux < 5.14): hand-out allocates nothing' }, async t => {
  const { sm, versions, dir } = await versionStoreNode(t)
  // The object shrinks under the mapping before its pages are allocated (as when tmpfs runs out):
  // MADV_POPULATE_WRITE of pages past the end fails in the kernel (EFAULT).
  let shrunk = 0
  const populate = async (range: HostRange): Promise<boolean> => {
    for (const name of regionObjects()) if (name.includes('-f-v')) { truncateSync(`/dev/shm/${name}`, 0); shrunk++ }
    return await populateHostRange(range)
  }
  const publisher = createPublisher({ chunkBytes: 65536, durable: false, owner: dir }, { stateManager: sm, versions, logger, populate })
  t.teardown(() => publisher.close())
  const before = new Set(regionObjects())
  await t.rejects(publisher.createRegion('f', 1, [{ name: 'a', dtype: 'u8', shape: [MiB] }]), { code: 'ERR_TIER_FULL', message: /cannot allocate the 1048576 bytes of shared-memory region agentd-weights-[0-9a-f]+-f-v1-[0-9a-f]+ \(cannot populate the mapping: Bad address \(EFAULT\)\): \/dev\/shm or this agent.s memory limit cannot hold it/ })
  t.equal(shrunk, 1)
  t.same(regionObjects().filter(n => !before.has(n)), [], 'the object is removed')
  t.same(sm.residency().shm, { regions: 0, bytes: 0 })
  t.equal(versions.nextVersion('f'), 0, 'the version is released')
})

t.test('on a kernel without MADV_POPULATE_WRITE the hand-out works, and the publisher says once what is lost', async t => {
  const { sm, versions, dir } = await versionStoreNode(t)
  const lines: Array<{ level: number, msg: string }> = []
  const recording = pino({ level: 'warn' }, { write: (line: string) => { lines.push(JSON.parse(line)) } })
  const publisher = createPublisher({ chunkBytes: 65536, durable: false, owner: dir }, { stateManager: sm, versions, logger: recording, populate: async () => false })
  t.teardown(() => publisher.close())
  await publisher.createRegion('k', 1, [{ name: 'a', dtype: 'u8', shape: [MiB] }])
  await publisher.createRegion('k', 2, [{ name: 'a', dtype: 'u8', shape: [MiB] }])
  const said = lines.filter(l => /MADV_POPULATE_WRITE needs Linux 5\.14/.test(l.msg))
  t.equal(said.length, 1, 'one warning for two hand-outs')
  t.equal(said[0]!.level, 40)
})
