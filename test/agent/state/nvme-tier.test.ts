// The NVMe tier's commit order for a put, with the directory fsync traced.
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { createNvmeTier } from '../../../agent/state/nvme-tier.ts'
import { capabilities, checksumBytes, createHostPool } from '../../../native/index.ts'
import { diskDir } from '../../native/helpers.ts'

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
