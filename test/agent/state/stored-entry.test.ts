// The per-key record's pin protocol: spill and drop wait for the last reader.
import t from 'tap'
import { parseKey } from '../../../agent/state/keys.ts'
import { hasHostCopy, newStoredEntry, pinEntry, whenUnpinned } from '../../../agent/state/stored-entry.ts'

const k = parseKey('job/a/w:param@[0]/[16]:u8#v1')

t.test('a new entry has one replica and is on NVMe only when a checksum came from NVMe', async t => {
  t.match(newStoredEntry(k, { offset: 0, length: 4096 }, 5, undefined), { replicas: 1, lastUseMs: 5, onNvme: false, checksum: undefined, pins: 0 })
  const cold = newStoredEntry(k, undefined, 5, 0xabc)
  t.match(cold, { onNvme: true, checksum: 0xabc })
  t.notOk(hasHostCopy(cold))
  t.ok(hasHostCopy(newStoredEntry(k, { offset: 0, length: 4096 }, 5)))
})

t.test('waiters and the idle hook run once, when the last pin goes, waiters first', async t => {
  const entry = newStoredEntry(k, { offset: 0, length: 4096 }, 0)
  const order: string[] = []
  await whenUnpinned(entry).then(() => order.push('unpinned at once'))
  const first = pinEntry(entry, () => order.push('idle'))
  const second = pinEntry(entry, () => order.push('idle'))
  t.equal(entry.pins, 2)
  const waited = whenUnpinned(entry).then(() => order.push('waiter'))
  first()
  await Promise.resolve()
  t.same(order, ['unpinned at once'], 'nothing wakes while a pin remains')
  second()
  await waited
  t.same(order, ['unpinned at once', 'idle', 'waiter'], 'idle hook ran synchronously; the waiter promise settled')
  t.same(entry.unpinned, [], 'waiters are consumed')
})
