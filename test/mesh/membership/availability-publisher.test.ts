// The availability publisher without a network: record sections from contributors, the heartbeat
// period that grows with the cluster, records cut to the receivers' byte bound, and the
// StateManager / GPU section builders.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { createAvailabilityPublisher, fitRecord, gpusFromInventory, stateSections } from '../../../mesh/membership/availability-publisher.ts'
import { heartbeatMembersPerInterval, heartbeatPeriodMs } from '../../../mesh/membership/heartbeat-period.ts'
import { decodeEnvelope, encodeEnvelope, meshMessageSchemaError } from '../../../mesh/membership/signed-envelope.ts'
import { createMembership } from '../../../mesh/membership/membership.ts'
import type { AvailabilityRecord } from '../../../mesh/membership/mesh-messages.ts'
import type { NodeInventory } from '../../../agent/inventory/inventory.ts'

const self = '12D3KooWAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA1'

t.test('the heartbeat period is the base up to heartbeatMembersPerInterval members, then grows in proportion', async t => {
  t.equal(heartbeatPeriodMs(2000, 1), 2000)
  t.equal(heartbeatPeriodMs(2000, heartbeatMembersPerInterval), 2000)
  t.equal(heartbeatPeriodMs(2000, 2 * heartbeatMembersPerInterval), 4000)
  t.equal(heartbeatPeriodMs(2000, 20), Math.round(2000 * 20 / heartbeatMembersPerInterval), 'about 6 records per base interval reach each agent at any size')
})

t.test('heartbeats follow the live member count; contributors fill their sections', async t => {
  const published: AvailabilityRecord[] = []
  let members = 1
  const publisher = createAvailabilityPublisher({ node: 'n1', preemptible: false, heartbeatIntervalMs: 40, publishDebounceMs: 5, maxRecordBytes: 64 * 1024 }, {
    self,
    liveMembers: () => members,
    addresses: () => [],
    incarnation: () => 1,
    inventory: () => undefined,
    publish: async r => { published.push(r) },
    log: { warn: () => {}, error: () => {} },
  })
  publisher.addContributor({ name: 'state', collect: () => stateSections({ hostPool: { totalBytes: 100, freeBytes: 60 }, nvme: { totalBytes: 1000, freeBytes: 900 }, namespaces: ['job/a'] }) })
  publisher.addContributor({ name: 'broken', collect: () => { throw new Error('boom') } })
  const controller = new AbortController()
  publisher.start({ signal: controller.signal })
  await sleep(230)
  const small = published.length
  t.ok(small >= 2, `a lone agent heartbeats every 40 ms (${small} records in 230 ms; late timers on a loaded host only lower it)`)
  t.match(published[0], { seq: 1, hostPool: { freeBytes: 60 }, nvme: { freeBytes: 900 }, resident: ['job/a'] }, 'sections from the contributor; the failing one is left out')
  members = 10 * heartbeatMembersPerInterval
  await sleep(60) // the heartbeat armed before the change fires once more
  const before = published.length
  await sleep(230)
  t.ok(published.length - before <= 1, `60 members: one heartbeat per 400 ms (${published.length - before} in 230 ms)`)
  controller.abort()
})

t.test('section builders: GPU samples merged in inventory order, unknown without one', async t => {
  const inventory = { gpus: { detected: true, source: 'config', devices: [{ index: 0, model: 'H100', memoryBytes: 80, uuid: 'GPU-a', pciBus: '' }, { index: 1, model: 'H100', memoryBytes: 80, uuid: 'GPU-b', pciBus: '' }] } } as unknown as NodeInventory
  t.match(gpusFromInventory(inventory), [{ memoryFreeBytes: null, health: 'unknown', inUse: null }, { health: 'unknown' }])
  t.match(gpusFromInventory(inventory, [{ memoryFreeBytes: 10, health: 'ok', inUse: true }, { memoryFreeBytes: null, health: 'failed', inUse: null }]),
    [{ uuid: 'GPU-a', memoryTotalBytes: 80, memoryFreeBytes: 10, health: 'ok', inUse: true }, { uuid: 'GPU-b', health: 'failed' }])
})

const maxRecordBytes = 64 * 1024
const longName = (prefix: string, i: number, length: number): string => `${prefix}${String(i).padStart(5, '0')}/`.padEnd(length, 'x')
const gpu = (index: number): AvailabilityRecord['gpus'][number] =>
  ({ index, model: 'NVIDIA H100 80GB HBM3', uuid: `GPU-${index}`, memoryTotalBytes: 80 * 2 ** 30, memoryFreeBytes: null, health: 'ok', inUse: false })
const baseRecord = (from: string): AvailabilityRecord => ({
  kind: 'record', from, node: 'big-node', incarnation: 3, seq: 1, publishedAtMs: Date.now(), addresses: { mesh: ['/ip4/10.0.0.7/tcp/4001'] },
  preemptible: false, cpu: { cores: 64, loadAvg1: 1.5 }, memory: { totalBytes: 2 ** 40, availableBytes: 2 ** 39 }, gpus: Array.from({ length: 8 }, (_, i) => gpu(i)),
})

t.test('an oversized record is cut to the byte bound, least important entries first, and a receiver accepts it', async t => {
  const key = await generateKeyPair('Ed25519')
  const from = peerIdFromPrivateKey(key).toString()
  // 1,024 namespaces and 1,024 weight versions with long (schema-valid) names: ~900 KB of JSON.
  const record: AvailabilityRecord = {
    ...baseRecord(from),
    resident: Array.from({ length: 1024 }, (_, i) => longName('job/', i, 500)),
    weights: Array.from({ length: 1024 }, (_, i) => ({ model: longName('org/model-', i, 400), version: 7 })),
    election: { server: true, voterSetId: 'v1', voters: [from] },
  }
  const whole = await encodeEnvelope(record, key)
  t.ok(whole.length > 10 * maxRecordBytes, `uncut: ${whole.length} bytes`)
  t.match(await decodeEnvelope(whole, maxRecordBytes), { ok: false, reason: 'oversized' }, 'the uncut record is what every peer used to drop')

  const fitted = fitRecord(record, maxRecordBytes)
  if (!fitted.ok) throw new Error(fitted.reason)
  const data = await encodeEnvelope(fitted.record, key)
  t.equal(data.length, fitted.bytes, 'the size fitRecord reports is the signed message size')
  t.ok(data.length <= maxRecordBytes && data.length > maxRecordBytes - 1024, `fills the bound without passing it (${data.length} bytes)`)
  t.same(fitted.record.resident, [], 'resident namespaces go first')
  t.ok(fitted.record.weights!.length > 100, `then weight versions, from the end (${fitted.record.weights!.length} kept)`)
  t.same(fitted.record.weights!.at(-1), record.weights![fitted.record.weights!.length - 1], 'the first entries are the ones kept')
  t.same(fitted.record.truncated, { resident: 1024, weights: 1024 - fitted.record.weights!.length }, 'the record counts what it left out')
  t.equal(fitted.record.gpus.length, 8, 'GPUs and the election advert are kept')
  t.same(fitted.record.election, record.election)
  t.equal(record.resident!.length, 1024, 'the input is not modified')
  t.equal(record.truncated, undefined)

  const decoded = await decodeEnvelope(data, maxRecordBytes)
  t.equal(decoded.ok, true, 'a receiver with the same bound accepts it (size, schema, signature)')
  const membership = createMembership({ self: 'receiver', probeIntervalMs: 500, suspicionMult: 4, suspicionMaxTimeoutMult: 6, deadRetentionMs: 60_000 },
    { health: { healthy: () => true }, broadcast: () => {}, onRefute: () => {} })
  t.equal(membership.applyRecord((decoded as { ok: true, message: AvailabilityRecord }).message), 'accepted')
  t.match(membership.get(from), { node: 'big-node', state: 'alive', record: { truncated: { resident: 1024 } } })
  membership.stop()
})

t.test('entries receivers would reject are left out and counted; a record that fits is untouched', async t => {
  const small = { ...baseRecord(self), resident: ['a/b', 'c/d'], weights: [{ model: 'm', version: 1 }] }
  const fitted = fitRecord(small, maxRecordBytes)
  t.ok(fitted.ok)
  if (fitted.ok) t.same(fitted.record, small, 'nothing cut, no truncated field')

  const bad = {
    ...baseRecord(self),
    resident: [...Array.from({ length: 1030 }, (_, i) => `ns/${i}`), 'x'.repeat(600)],
    weights: [{ model: 'y'.repeat(513), version: 1 }, { model: 'ok', version: 2 }],
    gpus: Array.from({ length: 70 }, (_, i) => gpu(i)),
  }
  const cut = fitRecord(bad, maxRecordBytes)
  if (!cut.ok) throw new Error(cut.reason)
  t.equal(cut.record.resident!.length, 1024, 'the schema\'s count bound')
  t.same(cut.record.weights, [{ model: 'ok', version: 2 }], 'a name over the schema\'s length bound is left out, not the record')
  t.equal(cut.record.gpus.length, 64)
  t.same(cut.record.truncated, { resident: 7, weights: 1, gpus: 6 })
  t.equal(meshMessageSchemaError(cut.record), undefined, 'receivers\' schema check passes')
})

t.test('a record too large even without its cuttable sections is not published, and that is logged', async t => {
  const addresses = Array.from({ length: 8 }, (_, i) => `/dns4/${'h'.repeat(200)}${i}.example/tcp/4001`)
  t.match(fitRecord({ ...baseRecord(self), addresses: { mesh: addresses }, resident: ['a/b'] }, 1024), { ok: false, reason: /emptied/ })

  const published: AvailabilityRecord[] = []
  const warnings: string[] = []
  const errors: string[] = []
  const make = (maxBytes: number) => createAvailabilityPublisher({ node: 'n1', preemptible: false, heartbeatIntervalMs: 20, publishDebounceMs: 5, maxRecordBytes: maxBytes }, {
    self,
    addresses: () => maxBytes === 1024 ? addresses : [],
    incarnation: () => 1,
    inventory: () => undefined,
    publish: async r => { published.push(r) },
    log: { warn: (_o, msg) => { warnings.push(msg) }, error: (_o, msg) => { errors.push(msg) } },
  })
  const tooBig = make(1024)
  await tooBig.publishNow()
  t.equal(published.length, 0, 'nothing published')
  t.match(errors, [/not published/])
  t.equal(tooBig.current(), undefined)

  const controller = new AbortController()
  const publisher = make(4096)
  publisher.addContributor({ name: 'state', collect: () => ({ resident: Array.from({ length: 100 }, (_, i) => longName('job/', i, 100)) }) })
  publisher.start({ signal: controller.signal })
  await sleep(150)
  controller.abort()
  t.ok(published.length >= 2, `heartbeats went on (${published.length})`)
  for (const r of published) t.ok(Buffer.byteLength(JSON.stringify(r)) + 65 <= 4096 && (r.truncated?.resident ?? 0) > 0, `seq ${r.seq} cut to fit`)
  t.equal(warnings.filter(w => /cut to fit/.test(w)).length, 1, 'the cut is logged once, not at every heartbeat')
})
