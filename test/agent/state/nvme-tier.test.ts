// The NVMe tier's commit order for a put, with the directory fsync traced; group commit, torn commits,
// segment removal and compaction, and a writer killed mid-commit.
import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { compactionQuietMs, createNvmeTier, type NvmeTier } from '../../../agent/state/nvme-tier.ts'
import { openJournalWriter } from '../../../agent/state/nvme-journal.ts'
import { capabilities, checksumBytes, createHostPool } from '../../../native/index.ts'
import { diskDir, patternBytes } from '../../native/helpers.ts'

if (!capabilities.addon.loaded) {
  t.comment(`skipped: the NVMe tier needs the native addon (${capabilities.addon.error})`)
} else {
  t.test('a put fsyncs the objects directory after the object is written and before its journal record', async t => {
    const dir = diskDir(t)
    const journal = join(dir, 'journal.log')
    const synced: Array<{ dir: string, objects: number, journalNamesKey: boolean }> = []
    const key = 'job/actor/w:param@[0]/[4096]:u8#v1'
    const tier = createNvmeTier({ dir, capacityBytes: 2 ** 20 }, {
      syncDirectory: async d => { synced.push({ dir: d, objects: readdirSync(join(dir, 'objects')).length, journalNamesKey: readFileSync(journal, 'utf8').includes(key) }) },
    })
    await tier.open()
    synced.length = 0 // open's own directory work is mkdir + the journal rewrite
    const pool = await createHostPool({ sizeBytes: 2 ** 20, lock: false })
    t.teardown(async () => { await tier.close(); pool.close() })
    const extent = pool.allocate(4096)
    const range = pool.range(extent, 0, 4096)
    pool.view(extent).fill(7, 0, 4096)
    await tier.put(key, range, await checksumBytes(Buffer.alloc(4096, 7)))
    t.same(synced, [{ dir: join(dir, 'objects'), objects: 1, journalNamesKey: false }], 'one fsync of objects/, between the object and its record')
    t.ok(readFileSync(journal, 'utf8').includes(key), 'the record is in the journal once put resolves')
  })
}

if (capabilities.addon.loaded) {
  const keyOf = (i: number, bytes = 4096): string => `job/a/k${i}:param@[0]/[${bytes}]:u8#v1`
  /** A pool holding `sizes.length` keys of pattern bytes (seeded by index), with their ranges and crc32c. */
  async function keysInPool (t: Test, sizes: number[]) {
    const pool = await createHostPool({ sizeBytes: Math.max(2 ** 20, sizes.reduce((a, b) => a + Math.ceil(b / 4096) * 4096, 0) * 2), lock: false, hugePages: false, registerCuda: false })
    t.teardown(() => pool.close())
    const keys = await Promise.all(sizes.map(async (bytes, i) => {
      const data = patternBytes(bytes, 1 + i)
      const extent = pool.allocate(bytes)
      pool.view(extent).set(data)
      return { key: keyOf(i, bytes), data, range: pool.range(extent, 0, bytes), checksum: await checksumBytes(data) }
    }))
    return { pool, keys }
  }
  /** Reads every key back through a fresh pool extent. */
  /** An open tier of `segmentBytes` segments holding `count` 4 KiB keys, put `perGroup` at a time (one group commit each); closed at teardown. */
  async function tierOfGroups (t: Test, segmentBytes: number, count: number, perGroup: number) {
    const dir = diskDir(t)
    const tier = createNvmeTier({ dir, capacityBytes: 64 * 2 ** 20, segmentBytes })
    await tier.open()
    t.teardown(() => tier.close())
    const { keys } = await keysInPool(t, Array.from({ length: count }, () => 4096))
    for (let g = 0; g < count / perGroup; g++) await Promise.all(keys.slice(perGroup * g, perGroup * (g + 1)).map(k => tier.put(k.key, k.range, k.checksum)))
    return { dir, tier, keys }
  }

  async function readBack (t: Test, tier: NvmeTier, keys: Array<{ key: string, data: Buffer }>): Promise<boolean> {
    const pool = await createHostPool({ sizeBytes: 2 ** 22, lock: false, hugePages: false, registerCuda: false })
    try {
      for (const k of keys) {
        const extent = pool.allocate(k.data.length)
        await tier.read(k.key, pool.range(extent, 0, k.data.length))
        const same = pool.view(extent).subarray(0, k.data.length).equals(k.data)
        pool.free(extent)
        if (!same) { t.fail(`${k.key} read back wrong`); return false }
      }
      return true
    } finally {
      pool.close()
    }
  }
  const journalLines = (dir: string): string[] => readFileSync(join(dir, 'journal.log'), 'utf8').split('\n').filter(l => l !== '')

  t.test('puts issued together commit as one group: one segment file, one objects/ fsync, records only after both', async t => {
    const dir = diskDir(t)
    const synced: Array<{ objects: number, records: number }> = []
    const tier = createNvmeTier({ dir, capacityBytes: 64 * 2 ** 20 }, {
      syncDirectory: async d => { synced.push({ objects: readdirSync(d).length, records: journalLines(dir).length }) },
    })
    await tier.open()
    // Small keys (gathered into one write, odd sizes padded), and one over directIoMinBytes (O_DIRECT).
    const sizes = [...Array.from({ length: 100 }, () => 4096), 5000, 100, 2 * 2 ** 20, 4096]
    const { keys } = await keysInPool(t, sizes)
    const objects = await Promise.all(keys.map(k => tier.put(k.key, k.range, k.checksum)))
    t.same(synced, [{ objects: 1, records: 0 }], 'one fsync of objects/, for the one new file, before any record')
    t.equal(new Set(objects.map(o => o.object)).size, 1, 'one segment')
    t.ok(objects.every(o => o.offset % 4096 === 0), 'every key starts on a 4 KiB boundary')
    t.equal(journalLines(dir).length, sizes.length, 'a record per key')
    t.equal(tier.usedBytes(), sizes.reduce((a, b) => a + b, 0))
    t.ok(await readBack(t, tier, keys), 'every key reads back byte-exact')
    await tier.close()

    const again = createNvmeTier({ dir, capacityBytes: 64 * 2 ** 20 })
    t.same(await again.open(), { recovered: sizes.length, dropped: 0, discarded: 0, orphansRemoved: 0, tornLines: 0 })
    t.teardown(() => again.close())
    t.equal(again.usedBytes(), sizes.reduce((a, b) => a + b, 0), 'no dead bytes after a restart')
    t.ok(await readBack(t, again, keys), 'and after a restart')
  })

  t.test('a torn group commit: keys whose records reached the disk are recovered whole, the rest are dead bytes', async t => {
    const dir = diskDir(t)
    const tier = createNvmeTier({ dir, capacityBytes: 64 * 2 ** 20 })
    await tier.open()
    const { keys } = await keysInPool(t, Array.from({ length: 50 }, () => 4096))
    await Promise.all(keys.map(k => tier.put(k.key, k.range, k.checksum)))
    await tier.close()
    // A power cut in the middle of the group's journal write: 40 records whole, the 41st torn.
    const lines = journalLines(dir)
    writeFileSync(join(dir, 'journal.log'), lines.slice(0, 40).join('\n') + '\n' + lines[40]!.slice(0, 30))
    const again = createNvmeTier({ dir, capacityBytes: 64 * 2 ** 20 })
    t.same(await again.open(), { recovered: 40, dropped: 0, discarded: 0, orphansRemoved: 0, tornLines: 1 })
    t.teardown(() => again.close())
    t.ok(await readBack(t, again, keys.slice(0, 40)))
    t.equal(again.get(keys[45]!.key), undefined)
    t.equal(again.usedBytes(), 50 * 4096, 'the 10 lost keys\' bytes are dead bytes until the segment goes')
    for (const k of keys.slice(0, 40)) await again.remove(k.key)
    t.equal(again.usedBytes(), 0)
    t.same(readdirSync(join(dir, 'objects')), [], 'the segment went with its last key')
  })

  t.test('removals: a segment goes with its last key; one mostly dead is compacted, its live keys re-pointed', async t => {
    const dir = diskDir(t)
    const tier = createNvmeTier({ dir, capacityBytes: 64 * 2 ** 20, segmentBytes: 64 * 1024 })
    await tier.open()
    const { keys } = await keysInPool(t, Array.from({ length: 48 }, () => 4096))
    for (let g = 0; g < 3; g++) await Promise.all(keys.slice(16 * g, 16 * g + 16).map(k => tier.put(k.key, k.range, k.checksum)))
    const segmentOf = (i: number): string => tier.get(keys[i]!.key)!.object
    t.equal(new Set(keys.map((_, i) => segmentOf(i))).size, 3, 'a 64 KiB segment per group of 16 keys')
    const [first, second] = [segmentOf(0), segmentOf(16)]
    const files = (): string[] => readdirSync(join(dir, 'objects')).sort()

    for (const k of keys.slice(0, 16)) await tier.remove(k.key)
    t.notOk(files().includes(first), 'the first segment went with its last key')
    for (const k of keys.slice(16, 26)) await tier.remove(k.key) // 10 of 16 dead: more dead than live
    for (let i = 0; i < 100 && files().includes(second); i++) await new Promise(resolve => setTimeout(resolve, compactionQuietMs / 4))
    t.notOk(files().includes(second), 'the second segment was compacted away once removals paused')
    t.equal(tier.usedBytes(), 22 * 4096, 'its dead bytes went with it')
    t.ok(await readBack(t, tier, keys.slice(26)), 'its live keys read back from their new place')
    await tier.close()
    t.equal(files().length, 2, 'the third segment and the compacted one')

    const again = createNvmeTier({ dir, capacityBytes: 64 * 2 ** 20 })
    t.same(await again.open(), { recovered: 22, dropped: 0, discarded: 0, orphansRemoved: 0, tornLines: 0 })
    t.teardown(() => again.close())
    t.equal(again.usedBytes(), 22 * 4096, 'no dead bytes left')
    t.ok(await readBack(t, again, keys.slice(26)), 'the re-pointed keys and the untouched ones read back byte-exact')
  })

  t.test('reads hold a bounded number of segment files open, and none of a removed segment (its space is freed)', async t => {
    const { dir, tier, keys } = await tierOfGroups(t, 8 * 1024, 48, 2)
    t.equal(new Set(keys.map(k => tier.get(k.key)!.object)).size, 24, 'two keys per 8 KiB segment: 24 segments')
    const objects = join(dir, 'objects')
    const held = (): string[] => readdirSync('/proc/self/fd').flatMap(fd => {
      try { return [readlinkSync(join('/proc/self/fd', fd))] } catch { return [] }
    }).filter(target => target.startsWith(objects))
    t.ok(await readBack(t, tier, keys), 'every key reads back, twice over each segment')
    t.ok(await readBack(t, tier, [...keys].reverse()), 'and again in the other order')
    // The segment still being appended to has its write handle besides.
    t.ok(held().length > 0 && held().length <= 17, `${held().length} segment files held open: at most 16 for reads, one for appends`)
    for (const k of keys) await tier.remove(k.key)
    t.ok(readdirSync(objects).length <= 1, 'every sealed segment went with its keys (the one being appended to stays)')
    t.same(held().filter(target => target.endsWith(' (deleted)')), [], 'and no handle keeps a removed segment\'s space')
    t.ok(held().length <= 1, 'nothing but the append handle is held')
  })

  t.test('a large key with an unaligned tail does not cut the keys another group appended to its segment meanwhile', async t => {
    const dir = diskDir(t)
    const tier = createNvmeTier({ dir, capacityBytes: 2 ** 30, segmentBytes: 64 * 2 ** 20, directIoMinBytes: 64 * 1024 })
    await tier.open()
    t.teardown(() => tier.close())
    const { keys } = await keysInPool(t, [2 * 2 ** 20 + 100, ...Array.from({ length: 64 }, () => 4096)])
    const large = tier.put(keys[0]!.key, keys[0]!.range, keys[0]!.checksum)
    await new Promise(setImmediate) // the next group: placed after the large key while it is written
    const small = await Promise.all(keys.slice(1).map(k => tier.put(k.key, k.range, k.checksum)))
    const object = (await large).object
    t.ok(small.every(o => o.object === object), 'both groups in one segment')
    t.ok(await readBack(t, tier, keys), 'every key reads back')
    await tier.close()
    const again = createNvmeTier({ dir, capacityBytes: 2 ** 30 })
    t.same(await again.open(), { recovered: keys.length, dropped: 0, discarded: 0, orphansRemoved: 0, tornLines: 0 })
    t.teardown(() => again.close())
    t.ok(await readBack(t, again, keys), 'and after a restart')
  })

  t.test('a segment\'s file stays until every removal from it is durable', async t => {
    const { dir, tier, keys } = await tierOfGroups(t, 64 * 1024, 32, 16)
    const file = join(dir, 'objects', tier.get(keys[0]!.key)!.object)
    for (const k of keys.slice(0, 14)) await tier.remove(k.key)
    const first = tier.remove(keys[14]!.key)
    await Promise.resolve() // the journal took the first removal's record into a write
    const last = tier.remove(keys[15]!.key) // its record goes in the next write
    await first
    t.ok(existsSync(file), 'the last key\'s removal is not durable yet: its record still names the file')
    await last
    t.notOk(existsSync(file), 'gone once it is')
  })

  /** A tier whose journal appends (calls that each become at most one write) are counted. */
  function countedTier (dir: string, segmentBytes = 64 * 1024) {
    const appends: number[] = []
    const tier = createNvmeTier({ dir, capacityBytes: 64 * 2 ** 20, segmentBytes }, {
      openJournal: async path => {
        const writer = await openJournalWriter(path)
        return {
          append: record => { appends.push(1); return writer.append(record) },
          appendAll: records => { appends.push(records.length); return writer.appendAll(records) },
          close: () => writer.close(),
        }
      },
    })
    return { tier, appends }
  }

  t.test('removeAll: one journal append for the batch, emptied segments go, a restart finds exactly the rest', async t => {
    const dir = diskDir(t)
    const { tier, appends } = countedTier(dir)
    await tier.open()
    const { keys } = await keysInPool(t, Array.from({ length: 64 }, () => 4096))
    await tier.putAll(keys.map(k => ({ key: k.key, src: k.range, checksum: k.checksum })))
    const segmentsBefore = readdirSync(join(dir, 'objects')).length
    appends.length = 0
    await tier.removeAll([...keys.slice(0, 40).map(k => k.key), keys[0]!.key, 'job/a/absent:param@[0]/[4096]:u8#v1'])
    t.same(appends, [40], 'one append holding the 40 del records (duplicates and absent keys ignored)')
    t.ok(readdirSync(join(dir, 'objects')).length < segmentsBefore, 'segments emptied by the batch are removed')
    appends.length = 0
    // Concurrent batches in one tick: the journal writer commits them together.
    await Promise.all([tier.removeAll(keys.slice(40, 48).map(k => k.key)), tier.removeAll(keys.slice(48, 56).map(k => k.key))])
    t.same(appends, [8, 8])
    await tier.close()
    const again = createNvmeTier({ dir, capacityBytes: 64 * 2 ** 20 })
    t.same(await again.open(), { recovered: 8, dropped: 0, discarded: 0, orphansRemoved: 0, tornLines: 0 })
    t.ok(await readBack(t, again, keys.slice(56)))
    await again.close()
  })

  t.test('durable: false keys are not recovered, need no del record, and are made durable by a durable put or makeDurable without a copy', async t => {
    const dir = diskDir(t)
    const { tier, appends } = countedTier(dir, 16 * 4096)
    await tier.open()
    const { keys } = await keysInPool(t, Array.from({ length: 40 }, () => 4096))
    const put = (ks: typeof keys, durable: boolean) => tier.putAll(ks.map(k => ({ key: k.key, src: k.range, checksum: k.checksum, durable })))
    // 0-15: a segment of memory keys only; 16-31: mixed; 32-39 durable.
    await put(keys.slice(0, 16), false)
    await Promise.all([put(keys.slice(16, 24), false), put(keys.slice(24, 32), true)])
    await put(keys.slice(32), true)
    t.same(keys.map(k => tier.get(k.key)!.durable), keys.map((_, i) => i >= 24), 'each object says whether it is durable')
    appends.length = 0
    const object = tier.get(keys[16]!.key)!
    const again = await tier.put(keys[16]!.key, keys[16]!.range, keys[16]!.checksum) // durable: re-recorded, same bytes
    t.same([again.object, again.offset, again.durable], [object.object, object.offset, true])
    await tier.makeDurable([keys[17]!.key, keys[30]!.key, 'job/a/absent:param@[0]/[4096]:u8#v1'])
    t.same(appends, [1, 1], 'a record each, no group commit (no copy); the durable key is skipped')
    appends.length = 0
    await tier.removeAll(keys.slice(18, 20).map(k => k.key))
    t.same(appends, [], 'removing keys never made durable writes nothing')
    await tier.removeAll([keys[16]!.key])
    t.same(appends, [1])
    await tier.close()

    const reopened = createNvmeTier({ dir, capacityBytes: 64 * 2 ** 20 })
    const recovery = await reopened.open()
    const durable = [17, ...Array.from({ length: 16 }, (_, i) => 24 + i)]
    t.same([...reopened.objects()].map(o => o.key).sort(), durable.map(i => keys[i]!.key).sort(), 'only the durable keys come back')
    // 22: the 20 memory keys still stored and the 2 removed without a del record.
    t.same(recovery, { recovered: 17, dropped: 0, discarded: 22, orphansRemoved: 1, tornLines: 0 }, 'the memory keys are discarded and their segment removed')
    t.ok(await readBack(t, reopened, durable.map(i => keys[i]!)))
    t.ok([...reopened.objects()].every(o => o.durable))
    await reopened.close()
  })

  t.test('owners ride in the records: put, putAll, compaction\'s re-pointing and open()\'s rewrite keep them', async t => {
    const dir = diskDir(t)
    const tier = createNvmeTier({ dir, capacityBytes: 64 * 2 ** 20, segmentBytes: 64 * 1024 })
    await tier.open()
    const { keys } = await keysInPool(t, Array.from({ length: 32 }, () => 4096))
    const ownerOf = (i: number): number | undefined => i % 3 === 0 ? undefined : 1000 + (i % 3)
    // A group of 16 by put() (one segment), then 16 by putAll (the next one).
    await Promise.all(keys.slice(0, 16).map((k, i) => tier.put(k.key, k.range, k.checksum, ownerOf(i))))
    const results = await tier.putAll(keys.slice(16).map((k, i) => ({ key: k.key, src: k.range, checksum: k.checksum, owner: ownerOf(16 + i) })))
    t.ok(results.every(r => !(r instanceof Error)))
    // 10 of the first segment's 16 keys removed: it is compacted, its other 6 re-pointed by new records.
    const first = tier.get(keys[0]!.key)!.object
    for (const k of keys.slice(0, 10)) await tier.remove(k.key)
    for (let i = 0; i < 100 && readdirSync(join(dir, 'objects')).includes(first); i++) await new Promise(resolve => setTimeout(resolve, compactionQuietMs / 4))
    t.notOk(readdirSync(join(dir, 'objects')).includes(first), 'compacted')
    await tier.close()
    const live = keys.map((k, i) => ({ k, i })).slice(10)

    for (const round of ['after the restart', 'after a second restart (the rewritten journal)']) {
      const again = createNvmeTier({ dir, capacityBytes: 64 * 2 ** 20 })
      await again.open()
      t.same(live.map(({ k }) => again.get(k.key)?.owner), live.map(({ i }) => ownerOf(i)), `each key's owner ${round}`)
      await again.close()
    }
  })

  t.test('killed (SIGKILL) while group-committing: every put that resolved is recovered, and every key recovered reads back whole', async t => {
    const dir = diskDir(t)
    const child = spawn(process.execPath, [fileURLToPath(new URL('./nvme-put-child.ts', import.meta.url)), dir], { env: { ...process.env, AGENTD_NVME_CHILD: '1' }, stdio: ['ignore', 'pipe', 'inherit'] })
    const acked: number[] = []
    let buffered = ''
    await new Promise<void>((resolve, reject) => {
      child.stdout.setEncoding('utf8')
      child.stdout.on('data', (chunk: string) => {
        buffered += chunk
        const lines = buffered.split('\n')
        buffered = lines.pop()!
        for (const line of lines) acked.push(Number(line.slice(3)))
        if (acked.length >= 3000 && child.exitCode === null) { child.kill('SIGKILL'); resolve() }
      })
      child.once('exit', code => code === null ? resolve() : reject(new Error(`child exited with ${code}`)))
    })
    await new Promise(resolve => child.exitCode !== null || child.signalCode !== null ? resolve(undefined) : child.once('exit', resolve))
    const tier = createNvmeTier({ dir, capacityBytes: 2 ** 30 })
    const recovery = await tier.open()
    t.teardown(() => tier.close())
    const recovered = [...tier.objects()].map(o => Number(/k(\d+):/.exec(o.key)![1]))
    t.comment(`${acked.length} puts acknowledged before the kill, ${recovered.length} keys recovered (${JSON.stringify(recovery)})`)
    const have = new Set(recovered)
    t.same(acked.filter(n => !have.has(n)), [], 'no acknowledged key lost')
    t.ok(await readBack(t, tier, recovered.map(n => ({ key: `crash/k${n}:param@[0]/[4096]:u8#v1`, data: patternBytes(4096, n) }))), 'no recovered key torn')
  })
}
