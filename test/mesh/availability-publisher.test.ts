// The availability publisher without a network: record sections from contributors, the heartbeat
// period that grows with the cluster, and the StateManager / GPU section builders.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { createAvailabilityPublisher, gpusFromInventory, heartbeatMembersPerInterval, heartbeatPeriodMs, maxResidentNamespaces, stateSections } from '../../mesh/availability-publisher.ts'
import type { AvailabilityRecord } from '../../mesh/mesh-messages.ts'
import type { NodeInventory } from '../../agent/inventory/inventory.ts'

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
  const publisher = createAvailabilityPublisher({ node: 'n1', preemptible: false, heartbeatIntervalMs: 40, publishDebounceMs: 5 }, {
    self,
    liveMembers: () => members,
    addresses: () => [],
    incarnation: () => 1,
    inventory: () => undefined,
    publish: async r => { published.push(r) },
    log: { warn: () => {} },
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

t.test('section builders: namespaces bounded, GPU samples merged in inventory order, unknown without one', async t => {
  const many = Array.from({ length: maxResidentNamespaces + 5 }, (_, i) => `ns${String(i).padStart(5, '0')}`)
  t.equal(stateSections({ hostPool: { totalBytes: 1, freeBytes: 1 }, nvme: { totalBytes: 1, freeBytes: 1 }, namespaces: many }).resident?.length, maxResidentNamespaces)
  const inventory = { gpus: { detected: true, source: 'config', devices: [{ index: 0, model: 'H100', memoryBytes: 80, uuid: 'GPU-a', pciBus: '' }, { index: 1, model: 'H100', memoryBytes: 80, uuid: 'GPU-b', pciBus: '' }] } } as unknown as NodeInventory
  t.match(gpusFromInventory(inventory), [{ memoryFreeBytes: null, health: 'unknown', inUse: null }, { health: 'unknown' }])
  t.match(gpusFromInventory(inventory, [{ memoryFreeBytes: 10, health: 'ok', inUse: true }, { memoryFreeBytes: null, health: 'failed', inUse: null }]),
    [{ uuid: 'GPU-a', memoryTotalBytes: 80, memoryFreeBytes: 10, health: 'ok', inUse: true }, { uuid: 'GPU-b', health: 'failed' }])
})
