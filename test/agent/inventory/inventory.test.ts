import t from 'tap'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { isNvme, parseNvidiaSmiGpus, probeInventory } from '../../../agent/inventory/inventory.ts'
import { repoRoot } from '../../helpers/agent-process.ts'

const fakeNvidiaSmi = join(repoRoot, 'test/helpers/fake-nvidia-smi')

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

t.test('GPUs come from nvidia-smi: index order, model, memory, UUID and PCI bus id as the driver names them', async t => {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-smi-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  // As an H200 node's nvidia-smi answered (two GPUs, listed out of order here).
  writeFileSync(join(dir, 'inventory.csv'), '1, NVIDIA H200, 143771, GPU-5f60b96d-1fa0-2650-6ed7-14f8477785ed, 00000000:00:07.0\n0, NVIDIA H200, 143771, GPU-6417efe4-c24a-bf19-53d2-9f784f1f97dd, 00000000:00:06.0\n')
  process.env.FAKE_NVIDIA_SMI_DIR = dir
  t.teardown(() => { delete process.env.FAKE_NVIDIA_SMI_DIR })
  const inv = await probeInventory({ hostname: 'n1', nvidiaSmiCommand: fakeNvidiaSmi })
  t.same(inv.gpus, {
    detected: true,
    source: 'detected',
    devices: [
      { index: 0, model: 'NVIDIA H200', memoryBytes: 143771 * 2 ** 20, uuid: 'GPU-6417efe4-c24a-bf19-53d2-9f784f1f97dd', pciBus: '00000000:00:06.0' },
      { index: 1, model: 'NVIDIA H200', memoryBytes: 143771 * 2 ** 20, uuid: 'GPU-5f60b96d-1fa0-2650-6ed7-14f8477785ed', pciBus: '00000000:00:07.0' },
    ],
  })
  // A driver that stopped answering, or no nvidia-smi at all: the PCI bus decides (here: no NVIDIA controller).
  writeFileSync(join(dir, 'fail'), '')
  for (const command of [fakeNvidiaSmi, join(dir, 'no-such-nvidia-smi')]) {
    const fallback = await probeInventory({ hostname: 'n1', nvidiaSmiCommand: command })
    if (fallback.gpus.detected) {
      t.ok(fallback.gpus.devices.every(g => g.uuid === ''), 'GPUs from the PCI bus carry no UUID')
    } else {
      t.match(fallback.gpus.reason, existsSync('/dev/nvidiactl') ? /nvidia-smi failed \(.+\)/ : /\/dev\/nvidiactl is absent/, `${command}: says why no GPU is listed`)
    }
  }
})

t.test('helpers: nvidia-smi inventory rows, NVMe names', async t => {
  t.same(parseNvidiaSmiGpus('0, NVIDIA A100-SXM4-80GB, [N/A], GPU-1, 00000000:17:00.0\nNo devices were found\n\nx, y, 1, GPU-2, 0:0.0\n2, Tesla V100, 16384, [N/A], 00000000:2A:00.0\n'), [
    { index: 0, model: 'NVIDIA A100-SXM4-80GB', memoryBytes: 0, uuid: 'GPU-1', pciBus: '00000000:17:00.0' },
    { index: 2, model: 'Tesla V100', memoryBytes: 16384 * 2 ** 20, uuid: '', pciBus: '00000000:2A:00.0' },
  ], 'unreadable values read as unknown (0, no UUID); lines that are not rows are left out')
  t.same(parseNvidiaSmiGpus('0, Model, With, Commas, 1024, GPU-9, 00000000:01:00.0'), [{ index: 0, model: 'Model, With, Commas', memoryBytes: 2 ** 30, uuid: 'GPU-9', pciBus: '00000000:01:00.0' }])
  t.ok(isNvme('nvme0n1', ''))
  t.ok(isNvme('sda', 'nvme'))
  t.notOk(isNvme('vda', ''))
})
