import t from 'tap'
import { closeSync, ftruncateSync, openSync, rmSync } from 'node:fs'
import { parseResidentSet, processMemory } from '../../core/process-memory.ts'
import { openSharedMemory } from '../../native/index.ts'

const MiB = 2 ** 20

t.test('the resident set of a status text, split into own, files and shared memory', async t => {
  const status = 'Name:\tnode\nVmRSS:\t  300 kB\nRssAnon:\t  100 kB\nRssFile:\t   150 kB\nRssShmem:\t  50 kB\nVmSwap:\t0 kB\n'
  t.same(parseResidentSet(status), { rssBytes: 300 * 1024, ownBytes: 100 * 1024, fileBytes: 150 * 1024, sharedMemoryBytes: 50 * 1024 })
  t.equal(parseResidentSet('Name:\tnode\nVmRSS:\t  300 kB\n'), undefined, 'a kernel without the split fields')
  t.equal(parseResidentSet(''), undefined)
})

t.test('shared memory this process maps counts as shared memory, not as its own', { skip: process.platform !== 'linux' ? '/proc/self/status is Linux\'s' : false }, async t => {
  const name = `agentd-process-memory-test-${process.pid}`
  const fd = openSync(`/dev/shm/${name}`, 'w')
  ftruncateSync(fd, 64 * MiB)
  closeSync(fd)
  t.teardown(() => rmSync(`/dev/shm/${name}`, { force: true }))
  const before = processMemory()
  t.ok(before.split !== undefined, 'Linux splits the resident set')
  const object = openSharedMemory(name)
  object.view(0, 64 * MiB).fill(7)
  const mapped = processMemory()
  const grew = (field: 'ownBytes' | 'sharedMemoryBytes'): number => mapped.split![field] - before.split![field]
  t.ok(grew('sharedMemoryBytes') >= 60 * MiB, `shared memory grew by the 64 MiB object (${grew('sharedMemoryBytes') / MiB} MiB)`)
  t.ok(grew('ownBytes') < 16 * MiB, `own memory did not (${grew('ownBytes') / MiB} MiB)`)
  t.equal(mapped.rssBytes, mapped.split!.ownBytes + mapped.split!.fileBytes + mapped.split!.sharedMemoryBytes, 'rss is the sum')
  t.ok(mapped.heapUsedBytes > 0 && mapped.heapUsedBytes <= mapped.heapTotalBytes, 'heap used out of reserved')
  object.close()
})
