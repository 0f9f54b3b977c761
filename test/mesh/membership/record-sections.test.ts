// What an agent's record tells the others beyond the node basics: its GPUs' free memory, health
// and holders (sampled with nvidia-smi — a stand-in here, no GPU), its host pool and NVMe free
// bytes and the namespaces resident in its StateManager.
import t from 'tap'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { startTestMesh } from '../../helpers/test-mesh.ts'
import { repoRoot } from '../../helpers/agent-process.ts'
import { makeShm } from '../../native/helpers.ts'

const MiB = 2 ** 20

t.test('GPU samples, host pool / NVMe free and resident namespaces reach the other agents', async t => {
  const mesh = await startTestMesh(t, { nodes: 1 })
  const smi = join(mesh.dir, 'smi')
  mkdirSync(smi)
  writeFileSync(join(smi, 'gpus.csv'), '0, GPU-1111, 70000\n1, GPU-2222, 81000\n')
  writeFileSync(join(smi, 'apps.csv'), 'GPU-1111, 4242\n')
  const gpus = JSON.stringify([0, 1].map(i => ({ model: 'NVIDIA H100 80GB HBM3', memoryBytes: 81559 * MiB, uuid: `GPU-${String(i + 1).repeat(4)}`, pciBus: `0000:1${i}:00.0` })))
  const b = await mesh.addAgent({
    name: 'gpu-node',
    args: ['--set', 'state.enabled=true', '--set', `state.hostPoolBytes=${16 * MiB}`, '--set', `state.nvmeCapacityBytes=${256 * MiB}`,
      '--set', `inventory.gpus=${gpus}`, '--set', `inventory.nvidiaSmiCommand=${join(repoRoot, 'test/helpers/fake-nvidia-smi')}`, '--set', 'inventory.gpuSampleIntervalMs=200'],
    env: { FAKE_NVIDIA_SMI_DIR: smi },
  })
  const [a] = mesh.agents
  await mesh.waitFor([a!], peers => peers.some(p => p.peerId === b.peerId && p.record?.gpus[1]?.health === 'ok'), 20_000, 'the sampled GPUs reached the seed')
  let view = (await mesh.peerOf(a!, b))!
  t.same(view.record!.gpus.map(g => [g.memoryFreeBytes, g.health, g.inUse]), [[70000 * MiB, 'ok', true], [81000 * MiB, 'ok', false]])
  t.same(view.gpus, { total: 2, free: 1 }, 'one GPU is held by a compute process')
  t.equal(view.hostPoolFreeBytes, 16 * MiB)
  t.equal(view.nvmeFreeBytes, 256 * MiB)
  t.same(view.record!.resident, [])

  const shm = makeShm(t, MiB)
  await b.client.call('POST', '/v1/state/offload', { tensors: [{ key: 'job7/actor/w:param@[0]/[1048576]:u8#v1', source: { kind: 'shm', name: shm, offset: 0 } }] })
  writeFileSync(join(smi, 'gpus.csv'), '0, GPU-1111, [GPU is lost]\n1, GPU-2222, 81000\n')
  await mesh.waitFor([a!], peers => peers.some(p => p.peerId === b.peerId && p.record?.resident?.includes('job7/actor') === true && p.record.gpus[0]?.health === 'failed'),
    20_000, 'the offload and the lost GPU reached the seed')
  view = (await mesh.peerOf(a!, b))!
  t.equal(view.hostPoolFreeBytes, 15 * MiB, 'the stored key uses the pool')
  t.same(view.record!.resident, ['job7/actor'])
})
