// Capacity and quota accounting alone, over hand-built entries: no pool, no NVMe.
import t from 'tap'
import { parseKey } from '../../../agent/state/keys.ts'
import { newStoredEntry, type StoredEntry } from '../../../agent/state/stored-entry.ts'
import { checkNamespaceQuotas, checkRoomFor } from '../../../agent/state/capacity-accounting.ts'

const key = (ns: string, name: string, bytes: number): ReturnType<typeof parseKey> => parseKey(`${ns}/${name}:param@[0]/[${bytes}]:u8#v1`)
const inPool = (ns: string, name: string, bytes: number, replicas = 1, onNvme = false): StoredEntry => {
  const e = newStoredEntry(key(ns, name, bytes), { offset: 0, length: bytes }, 0)
  e.replicas = replicas
  e.onNvme = onNvme
  return e
}
const nvmeOnly = (ns: string, name: string, bytes: number): StoredEntry => newStoredEntry(key(ns, name, bytes), undefined, 0, 1)

t.test('namespace quotas bound stored bytes of the exact namespace, pending bytes counted once per namespace', async t => {
  const stored = [inPool('job/a', 'x', 600), nvmeOnly('job/a', 'y', 300), inPool('job/a/sub', 'z', 5000)]
  const quotas = { 'job/a': 1000 }
  t.doesNotThrow(() => checkNamespaceQuotas(stored, [key('job/a', 'n', 100)], quotas), 'exactly at the quota (600 + 300 + 100)')
  t.throws(() => checkNamespaceQuotas(stored, [key('job/a', 'n', 101)], quotas),
    { code: 'ERR_QUOTA_EXCEEDED', message: 'namespace job/a would hold 1001 bytes, over its quota of 1000' }, 'NVMe-only keys count too')
  t.throws(() => checkNamespaceQuotas(stored, [key('job/a', 'n', 50), key('job/a', 'm', 50)], quotas, 1),
    { message: /would hold 1001 bytes/ }, 'pendingBytes is added once, not once per key')
  t.doesNotThrow(() => checkNamespaceQuotas(stored, [key('job/a/sub', 'n', 10 ** 6)], quotas), 'a sub-namespace is not under the parent quota')
  t.doesNotThrow(() => checkNamespaceQuotas(stored, [key('job/b', 'n', 10 ** 6)], quotas), 'no quota, no limit')
  t.throws(() => checkNamespaceQuotas([], [key('job/b', 'n', 1), key('job/c', 'n', 2)], { 'job/b': 0, 'job/c': 0 }),
    { message: /namespace job\/b/ }, 'the first namespace over quota, in request order, is named')
})

t.test('quotas that cannot apply do not walk the stored keys', async t => {
  let walked = false
  // biome-ignore lint/correctness/useYield: an empty iterable that notes being walked
  const stored: Iterable<StoredEntry> = { * [Symbol.iterator] () { walked = true } }
  checkNamespaceQuotas(stored, [key('job/free', 'n', 1)], { 'job/capped': 1 })
  t.notOk(walked, 'an offload into unlimited namespaces costs nothing per stored key')
  checkNamespaceQuotas(stored, [key('job/capped', 'n', 1)], { 'job/capped': 1 })
  t.ok(walked)
})

t.test('room = free host + pool copies already on NVMe + free NVMe', async t => {
  const stored = [inPool('j/a', 'both', 400, 1, true), inPool('j/a', 'pool', 1000), nvmeOnly('j/a', 'cold', 300)]
  const tiers = { hostFreeBytes: 100, nvmeCapacityBytes: 2000, nvmeUsedBytes: 1500 }
  t.doesNotThrow(() => checkRoomFor(1000, stored, tiers), '100 + 400 + 500')
  t.throws(() => checkRoomFor(1001, stored, tiers), { code: 'ERR_TIER_FULL', message: 'no room for 1001 bytes: host pool 100 bytes free, NVMe 500 bytes free' })
})

t.test('a namespace named like an Object.prototype member has no quota unless one is configured', async t => {
  const stored = [inPool('constructor', 'x', 10)]
  let walked = false
  const watched: Iterable<StoredEntry> = { * [Symbol.iterator] () { walked = true; yield * stored } }
  checkNamespaceQuotas(watched, [key('constructor', 'n', 1)], {})
  t.notOk(walked, 'no quota to check, so no walk over the stored keys')
  t.throws(() => checkNamespaceQuotas(stored, [key('constructor', 'n', 1)], { constructor: 10 }), { code: 'ERR_QUOTA_EXCEEDED' }, 'a configured one is enforced')
})
