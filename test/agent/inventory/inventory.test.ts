import t from 'tap'
import { isNvme, normalizePciBus, parseNvidiaUuids, probeInventory } from '../../../agent/inventory/inventory.ts'

t.test('probe returns CPUs, memory, filesystems and interfaces of this machine', async t => {
  const inv = await probeInventory({ hostname: 'n1' })
  t.equal(inv.hostname, 'n1')
  t.ok(inv.cpu.cores >= 1)
  t.ok(inv.memory.totalBytes > 0 && inv.memory.availableBytes <= inv.memory.totalBytes)
  t.ok(inv.filesystems.some(f => f.mountPoint === '/'), 'root filesystem listed')
  t.ok(inv.network.some(n => n.name === 'lo' && n.virtual), 'loopback is marked virtual')
  t.equal(inv.gpus.source, 'detected')
  if (!inv.gpus.detected) {
    t.same(inv.gpus.devices, [])
    t.match(inv.gpus.reason, /no NVIDIA GPU/, 'a node without GPUs says why')
  } else {
    t.ok(inv.gpus.devices.every(g => g.memoryBytes > 0 && g.pciBus !== ''))
  }
})

t.test('a configured GPU list replaces detection', async t => {
  const gpus = [{ model: 'NVIDIA H100 80GB HBM3', memoryBytes: 85520809984, uuid: 'GPU-abc', pciBus: '00000000:17:00.0' }]
  const inv = await probeInventory({ hostname: 'n1', gpuOverride: gpus })
  t.same(inv.gpus, { detected: true, source: 'config', devices: [{ index: 0, ...gpus[0] }] })
  const none = await probeInventory({ hostname: 'n1', gpuOverride: [] })
  t.same(none.gpus, { detected: false, source: 'config', devices: [] }, 'an empty list means: no GPUs, by config')
})

t.test('helpers: nvidia-smi UUID parsing, PCI bus normalisation, NVMe names', async t => {
  const uuids = parseNvidiaUuids('00000000:17:00.0, GPU-11111111-2222\n00000000:2A:00.0, GPU-33333333-4444\n\n')
  t.equal(uuids.get('17:00.0'), 'GPU-11111111-2222')
  t.equal(uuids.get('2a:00.0'), 'GPU-33333333-4444')
  t.equal(normalizePciBus('0000:17:00.0'), normalizePciBus('00000000:17:00.0'))
  t.ok(isNvme('nvme0n1', ''))
  t.ok(isNvme('sda', 'nvme'))
  t.notOk(isNvme('vda', ''))
})
