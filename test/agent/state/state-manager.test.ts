// The StateManager against real shared-memory objects, a real pool and real NVMe files.
import t, { type Test } from 'tap'
import { readFileSync, writeFileSync, readdirSync, appendFileSync, openSync, writeSync, closeSync, mkdirSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { join } from 'node:path'
import { pino } from 'pino'
import { createStateManager, type StateManager, type StateManagerOptions } from '../../../agent/state/state-manager.ts'
import { diskDir, makeShm, patternBytes } from '../../native/helpers.ts'
import { capabilities, checksumBytes } from '../../../native/index.ts'
import { encodeRecord } from '../../../agent/state/nvme-journal.ts'

const MiB = 2 ** 20
const logger = pino({ level: 'silent' })

async function manager (t: Test, overrides: Partial<StateManagerOptions> = {}, dir = diskDir(t)): Promise<StateManager> {
  const sm = createStateManager({
    hostPoolBytes: 16 * MiB, lockHostPool: false, nvmeDir: join(dir, 'nvme'), nvmeCapacityBytes: 64 * MiB, directIo: true,
    spillHighWatermark: 0.9, spillLowWatermark: 0.5, namespaceQuotaBytes: {}, prefetchHorizonMs: 1000, ...overrides,
  }, { logger })
  await sm.start()
  t.teardown(() => sm.stop())
  return sm
}

/** A key of `bytes` bytes (u8, 1-D) in namespace `ns`. */
const key = (ns: string, name: string, bytes: number, version = 1): string => `${ns}/${name}:param@[0]/[${bytes}]:u8#v${version}`
const shmBytes = (name: string): Buffer => readFileSync(`/dev/shm/${name}`)

t.test('offload then onload round-trips the bytes; residency accounts for them', async t => {
  const sm = await manager(t)
  const data = patternBytes(3 * MiB + 123, 1)
  const src = makeShm(t, data)
  const k = key('job1/actor', 'w', data.length)
  t.same(await sm.offload([{ key: k, source: { kind: 'shm', name: src, offset: 0 } }]), [{ key: k, tier: 'host', deduplicated: false, durable: false }])
  const dst = makeShm(t, data.length + 4096)
  t.same(await sm.onload([{ key: k, target: { kind: 'shm', name: dst, offset: 4096 } }]), [{ key: k, fromTier: 'host' }])
  t.ok(shmBytes(dst).subarray(4096).equals(data), 'bytes identical')
  const r = sm.residency()
  t.match(r, { logicalBytes: data.length, storedBytes: data.length, keys: [{ key: k, bytes: data.length, tier: 'host', replicas: 1, durable: false }] })
  t.ok(r.tiers.host.usedBytes >= data.length)
  t.equal(r.counters.offloadCopies, 1)
})

t.test('four concurrent replicas of the same keys: stored once, one copy performed', async t => {
  const sm = await manager(t)
  const keys = Array.from({ length: 8 }, (_, i) => key('job2/actor', `layer${i}`, MiB))
  const data = keys.map((_, i) => patternBytes(MiB, 100 + i))
  const replicas = Array.from({ length: 4 }, () => {
    const shm = makeShm(t, Buffer.concat(data))
    return keys.map((k, i) => ({ key: k, source: { kind: 'shm' as const, name: shm, offset: i * MiB } }))
  })
  const results = await Promise.all(replicas.map(items => sm.offload(items)))
  const firstWrites = results.flat().filter(r => !r.deduplicated)
  t.equal(firstWrites.length, keys.length, 'each key written by exactly one replica')
  const r = sm.residency()
  t.equal(r.counters.offloadCopies, keys.length, 'one copy per key')
  t.equal(r.counters.deduplicated, 3 * keys.length)
  t.equal(r.storedBytes, keys.length * MiB)
  t.equal(r.logicalBytes, 4 * keys.length * MiB, 'logical counts every replica')
  t.ok(r.keys.every(k => k.replicas === 4))
  const dst = makeShm(t, MiB)
  await sm.onload([{ key: keys[5]!, target: { kind: 'shm', name: dst, offset: 0 } }])
  t.ok(shmBytes(dst).equals(data[5]!))
})

t.test('verify reports a replica whose bytes differ', async t => {
  const sm = await manager(t)
  const k = key('job3/a', 'w', 64 * 1024)
  const good = makeShm(t, patternBytes(64 * 1024, 5))
  const bad = makeShm(t, patternBytes(64 * 1024, 6))
  await sm.offload([{ key: k, source: { kind: 'shm', name: good, offset: 0 } }])
  const [same] = await sm.offload([{ key: k, source: { kind: 'shm', name: good, offset: 0 }, verify: true }])
  const [differs] = await sm.offload([{ key: k, source: { kind: 'shm', name: bad, offset: 0 }, verify: true }])
  t.match(same, { deduplicated: true, verified: true })
  t.match(differs, { deduplicated: true, verified: false })
})

t.test('under pressure the pool spills to NVMe and everything restores correctly', async t => {
  const sm = await manager(t, { hostPoolBytes: 8 * MiB })
  const n = 24
  const data = Array.from({ length: n }, (_, i) => patternBytes(MiB, 1000 + i))
  const keys = data.map((_, i) => key('job4/opt', `s${i}`, MiB))
  for (let i = 0; i < n; i++) {
    const shm = makeShm(t, data[i]!)
    await sm.offload([{ key: keys[i]!, source: { kind: 'shm', name: shm, offset: 0 } }])
  }
  const r = sm.residency()
  t.ok(r.keys.filter(k => k.tier === 'nvme').length >= n - 8, 'most keys spilled')
  t.ok(r.counters.spilled >= n - 8)
  t.ok(r.tiers.host.usedBytes <= 8 * MiB)
  for (let i = n - 1; i >= 0; i--) {
    const dst = makeShm(t, MiB)
    await sm.onload([{ key: keys[i]!, target: { kind: 'shm', name: dst, offset: 0 } }])
    if (!shmBytes(dst).equals(data[i]!)) t.fail(`key ${i} restored wrong`)
  }
  t.ok(sm.residency().counters.promoted > 0, 'restores read through the pool')
  t.pass('all restored byte-exact')
})

t.test('durability nvme survives a restart; host-only keys do not', async t => {
  const dir = diskDir(t)
  const data = patternBytes(2 * MiB + 7, 9)
  const durable = key('job5/a', 'durable', data.length)
  const volatile = key('job5/a', 'volatile', data.length)
  const src = makeShm(t, data)
  const first = createStateManager({ hostPoolBytes: 16 * MiB, lockHostPool: false, nvmeDir: join(dir, 'nvme'), nvmeCapacityBytes: 64 * MiB, directIo: true, spillHighWatermark: 0.9, spillLowWatermark: 0.5, namespaceQuotaBytes: {}, prefetchHorizonMs: 0 }, { logger })
  await first.start()
  t.match(await first.offload([{ key: durable, source: { kind: 'shm', name: src, offset: 0 } }], 'nvme'), [{ durable: true }])
  await first.offload([{ key: volatile, source: { kind: 'shm', name: src, offset: 0 } }])
  await first.stop()

  const second = await manager(t, {}, dir)
  t.same(second.recovery(), { recovered: 1, dropped: 0, discarded: 0, orphansRemoved: 0, tornLines: 0 })
  t.match(second.residency().keys, [{ key: durable, tier: 'nvme', durable: true }])
  const dst = makeShm(t, data.length)
  t.same(await second.onload([{ key: durable, target: { kind: 'shm', name: dst, offset: 0 } }]), [{ key: durable, fromTier: 'nvme' }])
  t.ok(shmBytes(dst).equals(data))
  await t.rejects(second.onload([{ key: volatile, target: { kind: 'shm', name: dst, offset: 0 } }]), { code: 'ERR_KEY_NOT_FOUND' })
})

t.test('namespace owners survive a restart through every NVMe write: durable offloads (persistAll), and spilled keys persisted later', async t => {
  const dir = diskDir(t)
  const first = await manager(t, { hostPoolBytes: 8 * MiB }, dir)
  const durable = Array.from({ length: 4 }, (_, i) => key('owned/durable', `w${i}`, 256 * 1024))
  const spilled = Array.from({ length: 24 }, (_, i) => key('owned/spilled', `w${i}`, MiB))
  const release = first.claimNamespaces(['owned/durable', 'owned/spilled'], 4242)
  const src = makeShm(t, patternBytes(MiB, 31))
  await first.offload(durable.map(k => ({ key: k, source: { kind: 'shm' as const, name: src, offset: 0 } })), 'nvme')
  await first.claimNamespaces(['owned/spilled'], 5151)() // already owned: keeps 4242
  for (const k of spilled) await first.offload([{ key: k, source: { kind: 'shm', name: src, offset: 0 } }])
  release()
  t.ok(first.residency().counters.spilled > 0, 'the small pool spilled')
  // Half of the keys written by spill groups are made durable (re-recorded, no copy), with a key still in the pool.
  const onNvmeOnly = first.residency('owned/spilled').keys.filter(k => k.tier === 'nvme').map(k => k.key)
  const inPool = first.residency('owned/spilled').keys.filter(k => k.tier === 'host').map(k => k.key)
  const persisted = [...onNvmeOnly.slice(0, Math.ceil(onNvmeOnly.length / 2)), inPool[0]!]
  t.ok(onNvmeOnly.length >= 2 && inPool.length > 0)
  t.ok(first.residency('owned/spilled').keys.every(k => !k.durable), 'spilled keys of durability "memory" are not durable')
  await first.persist(persisted)
  t.same(first.residency('owned/spilled').keys.filter(k => k.durable).map(k => k.key).sort(), [...persisted].sort(), 'persisted ones are')
  await first.stop()

  const second = await manager(t, {}, dir)
  const recovered = second.residency().keys.map(k => k.key)
  t.ok(durable.every(k => recovered.includes(k)), 'the durable keys are back')
  t.same(recovered.filter(k => k.startsWith('owned/spilled')).sort(), [...persisted].sort(), 'of the spilled namespace, only the keys persisted')
  t.ok(second.recovery()!.discarded >= onNvmeOnly.length - persisted.length + 1, 'the spilled keys not persisted are discarded')
  t.ok(second.residency().keys.every(k => k.durable))
  t.equal(second.namespaceOwner('owned/durable'), 4242, 'owner of keys written by a durable offload')
  t.equal(second.namespaceOwner('owned/spilled'), 4242, 'owner of keys written by spill groups, made durable')
})

/**
 * An NVMe directory as agents before segment files wrote it: one object file per key, named by the
 * SHA-256 of the key and exactly its bytes long, and journal records without `offset`; a removed
 * key's put and del records with its file gone, a crashed put's orphan file, a torn tail.
 */
async function writeFormat1 (nvmeDir: string, keys: Array<{ key: string, data: Buffer, owner?: number }>, removed: string): Promise<void> {
  mkdirSync(join(nvmeDir, 'objects'), { recursive: true })
  const object = (k: string): string => createHash('sha256').update(k).digest('hex')
  let journal = ''
  for (const { key, data, owner } of keys) {
    writeFileSync(join(nvmeDir, 'objects', object(key)), data)
    journal += encodeRecord({ op: 'put', key, bytes: data.length, checksum: await checksumBytes(data), object: object(key), ...(owner !== undefined ? { owner } : {}) })
  }
  journal += encodeRecord({ op: 'put', key: removed, bytes: 5000, checksum: 1, object: object(removed), owner: 1001 }) + encodeRecord({ op: 'del', key: removed })
  writeFileSync(join(nvmeDir, 'objects', object('crashed mid-put')), 'half an object')
  writeFileSync(join(nvmeDir, 'journal.log'), journal + '0badc0de {"op":"put","key":"to')
}

t.test('an NVMe directory from before segment files is read: keys byte-identical with their owners, then written in the new format', async t => {
  const dir = diskDir(t)
  const old = [
    { key: key('v1/agent', 'small', 4096), data: patternBytes(4096, 61) },
    { key: key('v1/user', 'odd', 5000 + 3), data: patternBytes(5003, 62), owner: 1002 },
    { key: key('v1/user', 'large', 2 * MiB + 3), data: patternBytes(2 * MiB + 3, 63), owner: 1002 },
  ]
  await writeFormat1(join(dir, 'nvme'), old, key('v1/user', 'removed', 5000))
  const onloaded = async (sm: StateManager, k: string, bytes: number): Promise<Buffer> => {
    const dst = makeShm(t, bytes)
    await sm.onload([{ key: k, target: { kind: 'shm', name: dst, offset: 0 } }])
    return shmBytes(dst)
  }

  const first = await manager(t, {}, dir)
  t.same(first.recovery(), { recovered: 3, dropped: 0, discarded: 0, orphansRemoved: 1, tornLines: 1 })
  for (const { key: k, data } of old) t.ok((await onloaded(first, k, data.length)).equals(data), `${k} byte-identical`)
  t.equal(first.namespaceOwner('v1/user'), 1002, 'owner from the old records')
  t.equal(first.namespaceOwner('v1/agent'), 'agent')
  const added = patternBytes(3 * MiB + 5, 64)
  const addedKey = key('v1/user', 'added', added.length)
  await first.offload([{ key: addedKey, source: { kind: 'shm', name: makeShm(t, added), offset: 0 } }], 'nvme')
  const before = readdirSync(join(dir, 'nvme', 'objects')).length
  t.equal(await first.drop({ keys: [old[0]!.key] }), 1)
  t.equal(readdirSync(join(dir, 'nvme', 'objects')).length, before - 1, 'an old object file goes with its key')
  await first.stop()
  t.ok(readFileSync(join(dir, 'nvme', 'journal.log'), 'utf8').split('\n').filter(l => l.includes('"op":"put"')).every(l => l.includes('"offset":')), 'the journal was rewritten in the new format')

  const second = await manager(t, {}, dir)
  t.same(second.recovery(), { recovered: 3, dropped: 0, discarded: 0, orphansRemoved: 0, tornLines: 0 })
  for (const { key: k, data } of [...old.slice(1), { key: addedKey, data: added }]) t.ok((await onloaded(second, k, data.length)).equals(data), `${k} byte-identical after a second restart`)
  t.equal(second.namespaceOwner('v1/user'), 1002)
})

t.test('recovery: orphan objects removed, torn journal tail ignored, corrupted object detected', async t => {
  const dir = diskDir(t)
  const a = await manager(t, {}, dir)
  const data = patternBytes(MiB, 77)
  const src = makeShm(t, data)
  const k = key('job6/a', 'w', MiB)
  await a.offload([{ key: k, source: { kind: 'shm', name: src, offset: 0 } }], 'nvme')
  await a.stop()
  const objects = join(dir, 'nvme', 'objects')
  writeFileSync(join(objects, 'deadbeef'), 'half-written object of a crashed put')
  appendFileSync(join(dir, 'nvme', 'journal.log'), '0badc0de {"op":"put","key":"torn')
  const [object] = readdirSync(objects).filter(f => f !== 'deadbeef')
  const bytes = readFileSync(join(objects, object!))
  bytes[1000] = bytes[1000]! ^ 0xff
  writeFileSync(join(objects, object!), bytes)

  const b = await manager(t, {}, dir)
  t.same(b.recovery(), { recovered: 1, dropped: 0, discarded: 0, orphansRemoved: 1, tornLines: 1 })
  const dst = makeShm(t, MiB)
  await t.rejects(b.onload([{ key: k, target: { kind: 'shm', name: dst, offset: 0 } }]), { code: 'ERR_DATA_CORRUPT' }, 'a bit flip on disk is caught by the checksum')
})

t.test('bad requests fail with their code and leave no partial state', async t => {
  const sm = await manager(t, { hostPoolBytes: 4 * MiB, nvmeCapacityBytes: 4 * MiB, namespaceQuotaBytes: { 'job7/q': MiB } })
  const src = makeShm(t, patternBytes(MiB, 3))
  const ok = { key: key('job7/a', 'ok', MiB), source: { kind: 'shm' as const, name: src, offset: 0 } }
  const before = JSON.stringify(sm.residency())
  await t.rejects(sm.offload([ok, { key: 'nope', source: ok.source }]), { code: 'ERR_KEY_INVALID', message: /tensors\[1\]\.key/ })
  await t.rejects(sm.offload([ok, { key: key('job7/a', 'x', MiB), source: { kind: 'shm', name: 'agentd-no-such-shm', offset: 0 } }]), { code: 'ERR_SOURCE_NOT_FOUND' })
  await t.rejects(sm.offload([ok, { key: key('job7/a', 'big', 2 * MiB), source: ok.source }]), { code: 'ERR_SIZE_MISMATCH', message: /exceed shared-memory object/ })
  await t.rejects(sm.offload([{ key: key('job7/a', 'off', MiB), source: { ...ok.source, offset: 1 } }]), { code: 'ERR_SIZE_MISMATCH' })
  await t.rejects(sm.offload([{ key: key('job7/q', 'w', 2 * MiB), source: { kind: 'shm', name: makeShm(t, 2 * MiB), offset: 0 } }]), { code: 'ERR_QUOTA_EXCEEDED' })
  await t.rejects(sm.offload([{ key: key('job7/a', 'gpu', 16), source: { kind: 'cuda-ipc', device: 0, handle: Buffer.alloc(64).toString('base64'), offset: 0 } }]), { code: capabilities.cuda.available ? 'ERR_CUDA' : 'ERR_CUDA_UNAVAILABLE' })
  t.equal(JSON.stringify(sm.residency()), before, 'nothing changed')

  const big = makeShm(t, 9 * MiB)
  const tooMuch = Array.from({ length: 9 }, (_, i) => ({ key: key('job7/full', `k${i}`, MiB), source: { kind: 'shm' as const, name: big, offset: i * MiB } }))
  await t.rejects(sm.offload(tooMuch), { code: 'ERR_TIER_FULL' }, 'host and NVMe both full')
  const after = sm.residency()
  t.equal(after.keys.length, 0, 'the failed batch left no key behind')
  t.equal(after.tiers.host.usedBytes, 0, 'and no host extent')
  t.equal(after.tiers.nvme.usedBytes, 0, 'and nothing on NVMe')
  await t.rejects(sm.onload([{ key: key('job7/a', 'missing', 16), target: ok.source }]), { code: 'ERR_KEY_NOT_FOUND' })
})

t.test('drop, prefetch and hints', async t => {
  const sm = await manager(t, { hostPoolBytes: 4 * MiB, spillLowWatermark: 0 })
  const keys = Array.from({ length: 6 }, (_, i) => key(`job8/${i < 3 ? 'a' : 'b'}`, `k${i}`, MiB))
  for (const [i, k] of keys.entries()) await sm.offload([{ key: k, source: { kind: 'shm', name: makeShm(t, patternBytes(MiB, i)), offset: 0 } }])
  const cold = sm.residency().keys.filter(k => k.tier === 'nvme')
  t.ok(cold.length >= 2, 'some keys spilled')
  t.equal(sm.prefetch({ keys: [cold[0]!.key] }), 1)
  for (let i = 0; i < 100 && sm.residency().keys.find(k => k.key === cold[0]!.key)!.tier !== 'host'; i++) await new Promise(resolve => setTimeout(resolve, 10))
  t.equal(sm.residency().keys.find(k => k.key === cold[0]!.key)!.tier, 'host', 'prefetched into host')
  t.equal(await sm.drop({ prefix: 'job8/a/' }), 3)
  t.same(sm.residency().keys.map(k => k.key).sort(), keys.slice(3).sort())
  t.equal(await sm.drop({ keys: [keys[3]!] }), 1)
  t.throws(() => sm.prefetch({}), { code: 'ERR_BAD_REQUEST' })
})

t.test('adopt stores a filled scratch range as a key without a copy', async t => {
  const sm = await manager(t)
  const data = patternBytes(100_000, 31)
  const scratch = await sm.scratch(data.length)
  data.copy(scratch.view)
  const k = key('job10/pulled', 'w', data.length)
  t.equal(await sm.adopt(k, scratch), true)
  t.match(sm.residency().keys, [{ key: k, tier: 'host', replicas: 1 }])
  const dst = makeShm(t, data.length)
  await sm.onload([{ key: k, target: { kind: 'shm', name: dst, offset: 0 } }])
  t.ok(shmBytes(dst).equals(data))
  const again = await sm.scratch(data.length)
  t.equal(await sm.adopt(k, again), false, 'an existing key deduplicates and frees the scratch')
  t.match(sm.residency().keys, [{ key: k, replicas: 2 }], 'one more replica')
  await t.rejects(sm.adopt(k, again), { code: 'ERR_BAD_REQUEST' }, 'a consumed scratch cannot be adopted')
  const wrong = await sm.scratch(10)
  await t.rejects(sm.adopt(key('job10/pulled', 'x', 11), wrong), { code: 'ERR_SIZE_MISMATCH' })
  wrong.release()
  t.equal(sm.residency().tiers.host.usedBytes, Math.ceil(data.length / 4096) * 4096, 'no scratch leaked')
})

t.test('adopt of a key another writer has in flight waits for it and deduplicates; after a writer that failed it stores the key', async t => {
  const sm = await manager(t)
  const data = patternBytes(2 * MiB, 32)
  const k = key('job11/pulled', 'w', data.length)
  const scratch = await sm.scratch(data.length)
  data.copy(scratch.view)
  const source = makeShm(t, data)
  // Same tick: the offload has marked the key in flight (synchronously, before its first await) when adopt looks.
  const writing = sm.offload([{ key: k, source: { kind: 'shm', name: source, offset: 0 } }])
  const adopting = sm.adopt(k, scratch)
  t.same((await writing).map(r => r.deduplicated), [false], 'the offload stored it')
  t.equal(await adopting, false, 'the adoption waited and deduplicated')
  t.match(sm.residency().keys, [{ key: k, replicas: 2 }], 'two replicas, one copy')

  // Another writer fails (its shm object is shorter than the key) and stores nothing: the adoption stores the key.
  const k2 = key('job11/pulled', 'v', data.length)
  await t.rejects(sm.offload([{ key: k2, source: { kind: 'shm', name: makeShm(t, 4096), offset: 0 } }]))
  const scratch2 = await sm.scratch(data.length)
  data.copy(scratch2.view)
  t.equal(await sm.adopt(k2, scratch2), true, 'stored from the scratch')
  const dst = makeShm(t, data.length)
  await sm.onload([{ key: k2, target: { kind: 'shm', name: dst, offset: 0 } }])
  t.ok(shmBytes(dst).equals(data), 'with the scratch\'s bytes')
})

t.test('one batch larger than the host pool spills its own earlier keys, and onloads back in one batch', async t => {
  const sm = await manager(t, { hostPoolBytes: 4 * MiB })
  const n = 12
  const data = patternBytes(n * MiB, 4242)
  const src = makeShm(t, data)
  const keys = Array.from({ length: n }, (_, i) => key('job11/big', `w${i}`, MiB))
  const results = await sm.offload(keys.map((k, i) => ({ key: k, source: { kind: 'shm', name: src, offset: i * MiB } })))
  t.equal(results.filter(r => !r.deduplicated).length, n)
  const r = sm.residency()
  t.equal(r.storedBytes, n * MiB)
  t.ok(r.keys.filter(k => k.tier === 'nvme').length >= n - 4, 'most of the batch went to NVMe')
  const dst = makeShm(t, n * MiB)
  await sm.onload(keys.map((k, i) => ({ key: k, target: { kind: 'shm', name: dst, offset: i * MiB } })))
  t.ok(shmBytes(dst).equals(data), 'the whole batch restores byte-exact through a pool a third its size')
})

t.test('the same key twice in one batch is copied once and counted twice', async t => {
  const sm = await manager(t)
  const src = makeShm(t, patternBytes(2 * MiB, 77))
  const k = key('job12/a', 'w', MiB)
  const results = await sm.offload([
    { key: k, source: { kind: 'shm', name: src, offset: 0 } },
    { key: k, source: { kind: 'shm', name: src, offset: MiB } },
  ])
  t.same(results.map(r => r.deduplicated), [false, true])
  const r = sm.residency()
  t.equal(r.counters.offloadCopies, 1)
  t.match(r.keys, [{ key: k, replicas: 2 }])
  t.equal(r.logicalBytes, 2 * MiB)
})

t.test('adoptShm: keys stored in place in a shared-memory object (no copy), all or nothing, unmapped with the last key', async t => {
  const sm = await manager(t, { namespaceQuotaBytes: { capped: MiB } })
  const data = patternBytes(2 * MiB, 7)
  const name = makeShm(t, data)
  const a = key('weights/m', 'a', MiB)
  const b = key('weights/m', 'b', MiB - 4096)
  await t.rejects(async () => sm.adoptShm(name, [{ key: a, offset: 0 }, { key: b, offset: MiB + 8192 }]), { code: 'ERR_SIZE_MISMATCH' }, 'a range past the object')
  await t.rejects(async () => sm.adoptShm('agentd-test-missing', [{ key: a, offset: 0 }]), { code: 'ERR_SOURCE_NOT_FOUND' })
  await t.rejects(async () => sm.adoptShm(name, [{ key: key('capped', 'x', MiB + 1), offset: 0 }]), { code: 'ERR_QUOTA_EXCEEDED' })
  t.same(sm.storedKeys(), [], 'failed adoptions store nothing')
  t.same(sm.residency().shm, { regions: 0, bytes: 0 }, 'and map nothing')

  t.same(sm.adoptShm(name, [{ key: a, offset: 0 }, { key: b, offset: MiB }]), { adopted: [a, b], deduplicated: [] })
  const r = sm.residency()
  t.same(r.shm, { regions: 1, bytes: 2 * MiB - 4096 })
  t.equal(r.counters.offloadCopies, 0)
  t.equal(r.hostPool.freeBytes, 16 * MiB, 'outside the pool')
  t.same(r.keys.map(k => [k.tier, k.region]), [['host', name], ['host', name]])
  // In place: a change to the object shows through (a copy would not see it).
  const fd = openSync(`/dev/shm/${name}`, 'r+')
  writeSync(fd, Buffer.from([1, 2, 3]), 0, 3, MiB)
  closeSync(fd)
  const dst = makeShm(t, MiB)
  await sm.onload([{ key: b, target: { kind: 'shm', name: dst, offset: 0 } }])
  t.same([...shmBytes(dst).subarray(0, 3)], [1, 2, 3])
  const pinned = await sm.readHost(a)
  t.equal(pinned.sharedRegion, name, 'readHost says the bytes are in an adopted region')
  pinned.release()

  t.same(sm.adoptShm(name, [{ key: a, offset: 0 }]), { adopted: [], deduplicated: [a] }, 'a stored key is not adopted twice')
  await sm.persist([a])
  t.equal(sm.residency().keys.find(k => k.key === a)!.durable, true, 'persist writes the mapping to NVMe')
  await sm.drop({ keys: [a] })
  t.same(sm.residency().shm, { regions: 1, bytes: MiB - 4096 }, 'the mapping stays while a key is in it')
  await sm.drop({ keys: [b] })
  t.same(sm.residency().shm, { regions: 0, bytes: 0 }, 'unmapped with the last key')
})
