/**
 * Zero-copy publish from a handed-out region (publisher.ts "Region
 * lifecycle"): the version is served from the trainer's bytes in place, the
 * region's name is gone once published, a scribble after commit is detected
 * rather than served, retiring unmaps it, NVMe brings it back after a
 * restart, and bad or failed publishes leave no keys, mappings or objects.
 */
import { closeSync, existsSync, openSync, readdirSync, readFileSync, rmSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { createStateManager, type StateManager } from '../../../agent/state/state-manager.ts'
import { createPublisher, type WeightsRegion } from '../../../agent/weights/publisher.ts'
import { createWeightsService } from '../../../agent/weights/weights-service.ts'
import { devWeightsConfig } from '../../../agent/weights/weights-config.ts'
import { diskDir, makeShm } from '../../native/helpers.ts'
import { keyBytes, logger, MiB, sharedKey, tensor, versionStoreNode, weightsNode, type FixtureTensor } from './weights-fixtures.ts'

const specs = (tensors: FixtureTensor[]): Array<{ name: string, dtype: FixtureTensor['dtype'], shape: number[] }> => tensors.map(x => ({ name: x.name, dtype: x.dtype, shape: x.shape }))

/** The trainer's side: opens the region and writes every tensor at its offset; returns the still-open fd. */
function writeRegion (region: WeightsRegion, tensors: FixtureTensor[]): number {
  const fd = openSync(`/dev/shm/${region.region}`, 'r+')
  for (const [i, x] of tensors.entries()) writeSync(fd, x.data, 0, x.data.length, region.tensors[i]!.offset)
  return fd
}

/** Columns [from, from + count) of a row-major 2-D tensor. */
function columns (x: FixtureTensor, from: number, count: number): Buffer {
  const [rows, cols] = x.shape as [number, number]
  const e = x.data.length / (rows * cols)
  return Buffer.concat(Array.from({ length: rows }, (_, r) => x.data.subarray((r * cols + from) * e, (r * cols + from + count) * e)))
}

const shmObjects = (): string[] => readdirSync('/dev/shm').filter(n => n.startsWith('agentd-weights-'))

t.test('region publish is zero copy: served and onloaded from the mapping; a later scribble is detected, never served as valid', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key)
  const b = await weightsNode(t, key)
  const c = await weightsNode(t, key)
  const w = tensor('layer.weight', 'f32', [300, 70], 11) // 84000 bytes: chunks of 256 KiB → one partial chunk
  const big = tensor('big.weight', 'bf16', [512, 512], 12) // 512 KiB: two chunks
  const n = tensor('norm.weight', 'bf16', [70], 13)
  const tensors = [w, big, n]
  const region = await a.weights.createRegion('z', undefined, specs(tensors))
  const fd = writeRegion(region, tensors) // kept open: the trainer still holds the object after publishing
  t.teardown(() => closeSync(fd))
  const copiesBefore = a.sm.residency().counters.offloadCopies

  const m = await a.weights.publish({ model: 'z', source: { kind: 'region', region: region.region } })
  t.notOk(existsSync(`/dev/shm/${region.region}`), 'the name is unlinked at publish: no new writer can open it')
  const r = a.sm.residency('weights/z/')
  t.equal(r.counters.offloadCopies, copiesBefore, 'the StateManager copied nothing')
  t.equal(r.counters.shmAdopted, 3, 'every tensor adopted in place')
  t.same(r.shm, { regions: 1, bytes: w.data.length + big.data.length + n.data.length })
  t.ok(r.keys.every(k => k.tier === 'host' && k.region === region.region && k.durable), 'host tier in the region, and on NVMe (durable)')
  t.equal(a.sm.residency().hostPool.freeBytes, 64 * MiB, 'no pool space taken')

  const whole = await b.weights.pull({ from: a.weights.address(), model: 'z', version: m.version, streams: 2 })
  for (let i = 0; i < tensors.length; i++) t.ok((await keyBytes(b.sm, whole.keys[i]!)).equals(tensors[i]!.data), `${tensors[i]!.name} pulled byte-exact`)
  const sliced = await b.weights.pull({ from: a.weights.address(), model: 'z', version: m.version, streams: 1, layout: { tp: 2, rank: 1, rules: [{ pattern: '^(layer|big)\\.weight$', dim: 1 }] } })
  t.ok((await keyBytes(b.sm, sliced.keys[0]!)).equals(columns(w, 35, 35)), 'a sliced pull (strided gather from the mapping) byte-exact')
  t.ok((await keyBytes(b.sm, sliced.keys[1]!)).equals(columns(big, 256, 256)))

  // The trainer writes after publishing: the stored key IS its memory (zero copy) ...
  writeSync(fd, Buffer.alloc(8, 0xee), 0, 8, region.tensors[1]!.offset + 300 * 1024)
  const target = makeShm(t, big.data.length)
  await a.sm.onload([{ key: m.tensors[1]!.key, target: { kind: 'shm', name: target, offset: 0 } }])
  t.same([...readFileSync(`/dev/shm/${target}`).subarray(300 * 1024, 300 * 1024 + 8)], Array(8).fill(0xee), 'onload reads the adopted mapping in place (a copy at publish would not see this)')
  // ... but pullers never accept the changed chunk: whole chunks fail the manifest checksum, slices the server's check.
  await t.rejects(c.weights.pull({ from: a.weights.address(), model: 'z', version: m.version, streams: 1 }), { code: 'ERR_DATA_CORRUPT' })
  await t.rejects(c.weights.pull({ from: a.weights.address(), model: 'z', version: m.version, streams: 1, layout: { tp: 2, rank: 0, rules: [{ pattern: '^(layer|big)\\.weight$', dim: 1 }] } }), { code: 'ERR_DATA_CORRUPT' })
  t.same(c.sm.storedKeys('weights/'), [], 'nothing stored from a corrupt source')
  const untouched = await c.weights.pull({ from: a.weights.address(), model: 'z', version: m.version, streams: 1, layout: { tp: 2, rank: 0, rules: [{ pattern: 'big', dim: 0 }] } })
  t.ok((await keyBytes(c.sm, untouched.keys[0]!)).equals(w.data), 'chunks the scribble did not touch are still served')

  await a.weights.retire('z', m.version)
  t.same(a.sm.residency().shm, { regions: 0, bytes: 0 }, 'retiring the version unmaps the region')
  t.same(a.sm.storedKeys('weights/z/'), [])
})

t.test('a region-published version comes back from NVMe after a restart', async t => {
  const key = sharedKey()
  const dir = diskDir(t)
  const w = tensor('layer.weight', 'bf16', [256, 1000], 21)
  const n = tensor('norm.weight', 'f32', [1000], 22)
  const poolOptions = {
    hostPoolBytes: 16 * MiB, lockHostPool: false, nvmeDir: join(dir, 'nvme'), nvmeCapacityBytes: 64 * MiB, directIo: true,
    spillHighWatermark: 0.95, spillLowWatermark: 0.8, namespaceQuotaBytes: {}, prefetchHorizonMs: 1000,
  }
  const serviceOptions = { ...devWeightsConfig, chunkBytes: 128 * 1024, manifestDir: join(dir, 'weights') }
  const boot = async (): Promise<{ sm: StateManager, weights: ReturnType<typeof createWeightsService> }> => {
    const sm = createStateManager(poolOptions, { logger })
    await sm.start()
    const weights = createWeightsService(serviceOptions, { stateManager: sm, clusterKey: key, logger })
    await weights.start()
    return { sm, weights }
  }
  const first = await boot()
  const region = await first.weights.createRegion('p', 4, specs([w, n]))
  closeSync(writeRegion(region, [w, n]))
  const m = await first.weights.publish({ model: 'p', version: 4, source: { kind: 'region', region: region.region } })
  await first.weights.stop()
  await first.sm.stop()

  const second = await boot()
  t.teardown(async () => { await second.weights.stop(); await second.sm.stop() })
  t.same(second.weights.list().versions.map(v => v.version), [4], 'the version survived the restart')
  const r = second.sm.residency('weights/p/')
  t.ok(r.keys.every(k => k.tier === 'nvme' && k.region === undefined), 'its keys are on NVMe, the region is gone')
  const puller = await weightsNode(t, key)
  const pulled = await puller.weights.pull({ from: second.weights.address(), model: 'p', version: m.version, streams: 2 })
  t.ok((await keyBytes(puller.sm, pulled.keys[0]!)).equals(w.data))
  t.ok((await keyBytes(puller.sm, pulled.keys[1]!)).equals(n.data))
})

t.test('bad region publishes change nothing; a publish that fails past validation consumes the region and leaves nothing', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key)
  const w = tensor('layer.weight', 'f32', [64, 64], 31)
  const region = await a.weights.createRegion('q', 2, specs([w]))
  closeSync(writeRegion(region, [w]))
  const source = { kind: 'region' as const, region: region.region }
  await t.rejects(a.weights.publish({ model: 'other', source }), { code: 'ERR_BAD_REQUEST' }, 'wrong model')
  await t.rejects(a.weights.publish({ model: 'q', version: 3, source }), { code: 'ERR_BAD_REQUEST' }, 'wrong version')
  await t.rejects(a.weights.publish({ model: 'q', source: { kind: 'region', region: 'agentd-weights-nope' } }), { code: 'ERR_WEIGHTS_NOT_FOUND' }, 'unknown region')
  t.same(a.sm.storedKeys('weights/'), [], 'no keys')
  t.same(a.sm.residency().shm, { regions: 0, bytes: 0 }, 'nothing mapped')
  t.ok(existsSync(`/dev/shm/${region.region}`), 'the region is still handed out for a corrected publish')

  const racing = a.weights.publish({ model: 'q', source })
  await t.rejects(a.weights.publish({ model: 'q', source }), { code: 'ERR_WEIGHTS_VERSION_EXISTS' }, 'a second publish while the first runs')
  t.equal((await racing).version, 2)
  await t.rejects(a.weights.publish({ model: 'q', source }), { code: 'ERR_WEIGHTS_NOT_FOUND' }, 'a region is consumed by its publish')
  t.equal(a.sm.storedKeys('weights/q/').length, 1)

  // The trainer removed the name after writing (Python's SharedMemory.unlink()): the agent holds the object it made.
  const gone = await a.weights.createRegion('q', 5, specs([w]))
  closeSync(writeRegion(gone, [w]))
  rmSync(`/dev/shm/${gone.region}`)
  const kept = await a.weights.publish({ model: 'q', source: { kind: 'region', region: gone.region } })
  t.ok((await keyBytes(a.sm, kept.tensors[0]!.key)).equals(w.data), 'published from the agent\'s own mapping of the object')

  // Past validation: NVMe cannot take the version (durable publish) → the adopted keys are dropped and unmapped.
  const dir = diskDir(t)
  const smallSm = createStateManager({
    hostPoolBytes: 4 * MiB, lockHostPool: false, nvmeDir: join(dir, 'nvme'), nvmeCapacityBytes: MiB, directIo: true,
    spillHighWatermark: 0.95, spillLowWatermark: 0.8, namespaceQuotaBytes: {}, prefetchHorizonMs: 1000,
  }, { logger })
  await smallSm.start()
  const small = { sm: smallSm, weights: createWeightsService({ ...devWeightsConfig, chunkBytes: 65536, manifestDir: join(dir, 'weights') }, { stateManager: smallSm, clusterKey: key, logger }) }
  await small.weights.start()
  t.teardown(async () => { await small.weights.stop(); await smallSm.stop() })
  const failing = await small.weights.createRegion('h', undefined, [{ name: 'huge.weight', dtype: 'u8', shape: [2 * MiB] }])
  await t.rejects(small.weights.publish({ model: 'h', source: { kind: 'region', region: failing.region } }), { code: 'ERR_TIER_FULL' })
  t.same(small.sm.storedKeys('weights/'), [], 'no partial keys')
  t.same(small.sm.residency().shm, { regions: 0, bytes: 0 }, 'the mapping is released')
  t.notOk(existsSync(`/dev/shm/${failing.region}`), 'and the object removed')
  t.same(small.weights.list().versions, [])
  t.equal((await small.weights.createRegion('h', undefined, specs([w]))).version, 0, 'the version is free again')
})

t.test('abandoned regions: discarded, removed at stop, and after a crash by the same agent\'s next start only', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key)
  const w = tensor('layer.weight', 'f32', [16, 16], 41)
  const region = await a.weights.createRegion('d', 7, specs([w]))
  await a.weights.discardRegion(region.region)
  t.notOk(existsSync(`/dev/shm/${region.region}`), 'discarded')
  t.equal((await a.weights.createRegion('d', 7, specs([w]))).version, 7, 'its version is free again')
  await t.rejects(a.weights.discardRegion(region.region), { code: 'ERR_WEIGHTS_NOT_FOUND' })

  const before = new Set(shmObjects())
  const { sm, versions } = await versionStoreNode(t)
  const publisherOf = (owner: string): ReturnType<typeof createPublisher> => createPublisher({ chunkBytes: 65536, durable: false, owner }, { stateManager: sm, versions, logger })
  const crashed = publisherOf('agent-1') // never closed: a crash
  const other = publisherOf('agent-2')
  const left = await crashed.createRegion('e', 1, specs([w]))
  const others = await other.createRegion('e', 2, specs([w]))
  t.teardown(() => other.close())
  await publisherOf('agent-1').start()
  t.notOk(existsSync(`/dev/shm/${left.region}`), 'the next run of the same agent removes what the crashed run left')
  t.ok(existsSync(`/dev/shm/${others.region}`), 'another agent\'s region is untouched')

  const open = await other.createRegion('e', 3, specs([w]))
  await other.close()
  t.notOk(existsSync(`/dev/shm/${open.region}`), 'close (agent shutdown) removes handed-out regions')
  t.notOk(existsSync(`/dev/shm/${others.region}`))
  t.same(shmObjects().filter(n => !before.has(n)), [], 'no region objects left')
})
