import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import {
  capabilities, checksum, checksumBytes, copyDeviceToHost, copyHostToDevice, createHostPool, openDeviceMemory, parseIpcHandle,
} from '../../native/index.ts'

const handle64 = Uint8Array.from({ length: 64 }, (_, i) => i)

t.test('IPC handle formats', (t) => {
  t.same(parseIpcHandle(handle64), { bytes: handle64, format: 'cudaIpcMemHandle' })
  const torch = new Uint8Array(66)
  torch[0] = 2
  torch[1] = 'c'.charCodeAt(0)
  torch.set(handle64, 2)
  const parsed = parseIpcHandle(torch)
  t.equal(parsed.format, 'torch')
  t.same([...parsed.bytes], [...handle64], 'the 64 bytes after version and type')
  torch[0] = 1
  t.equal(parseIpcHandle(torch).format, 'torch', 'version 1 has the same layout')
  torch[1] = 'e'.charCodeAt(0)
  t.throws(() => parseIpcHandle(torch), { code: 'ERR_ARG_INVALID', message: /expandable_segments:False/ })
  torch[1] = 'c'.charCodeAt(0)
  torch[0] = 3
  t.throws(() => parseIpcHandle(torch), { code: 'ERR_ARG_INVALID', message: /version 3/ })
  t.throws(() => parseIpcHandle(new Uint8Array(65)), { code: 'ERR_ARG_INVALID' })
  t.end()
})

t.test('without a usable GPU, device calls fail with the reason', { skip: capabilities.cuda.available && 'a GPU is present' }, (t) => {
  t.throws(() => openDeviceMemory({ device: 0, handle: handle64 }), {
    code: 'ERR_CUDA_UNAVAILABLE',
    message: new RegExp(capabilities.cuda.reason!.split(':')[0]!.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')),
  })
  t.end()
})

const gpuSkip = capabilities.cuda.available ? false : `no usable CUDA device: ${capabilities.cuda.reason}`

function havePython (module: string): boolean {
  return spawnSync('python3', ['-c', `import ${module}`]).status === 0
}

async function roundTrip (t: Test, mode: 'torch' | 'raw'): Promise<void> {
  const size = 8 * 2 ** 20 + 333
  const producer = spawn('python3', [fileURLToPath(new URL('./cuda-producer.py', import.meta.url)), mode, String(size)],
    { stdio: ['pipe', 'pipe', 'inherit'] })
  t.teardown(() => producer.kill())
  const lines = createInterface({ input: producer.stdout })[Symbol.asyncIterator]()
  const exported = JSON.parse((await lines.next()).value as string) as
    { handle: string, offset: number, size: number, event: string | null }
  const waitEvent = exported.event === null ? undefined : Buffer.from(exported.event, 'hex')
  const handle = Buffer.from(exported.handle, 'hex')
  t.equal(handle.length, mode === 'torch' ? 66 : 64)
  const device = openDeviceMemory({ device: 0, handle })
  const again = openDeviceMemory({ device: 0, handle })
  t.equal(again.mapping.info().openHandles, 2, 'the second open shares the cached mapping')
  again.close()
  const pool = await createHostPool({ sizeBytes: 32 * 2 ** 20 })
  t.teardown(() => { device.close(); pool.close() })
  const extent = pool.allocate(size)
  await copyDeviceToHost({ memory: device, offset: exported.offset, length: size }, pool.range(extent, 0, size),
    { chunkBytes: 2 ** 20, waitEvent })
  const expected = Buffer.from(Array.from({ length: size }, (_, i) => i % 251))
  t.equal(await checksum(pool.range(extent, 0, size)), await checksumBytes(expected), 'device -> pool')
  const view = pool.view(extent)
  for (let i = 0; i < size; i++) view[i] = 255 - (i % 251)
  await copyHostToDevice(pool.range(extent, 0, size), { memory: device, offset: exported.offset, length: size })
  producer.stdin.write('check\n')
  t.equal((await lines.next()).value, 'ok', 'pool -> device, verified by the producer')
  if (device.sizeBytes > 0) {
    await t.rejects(copyDeviceToHost({ memory: device, offset: device.sizeBytes, length: 1 }, pool.range(extent, 0, 1)),
      { code: 'ERR_OUT_OF_RANGE' })
  }
  await once(producer, 'exit')
}

t.test('raw cudaIpcMemHandle_t round trip', { skip: gpuSkip }, async (t) => {
  await roundTrip(t, 'raw')
})

t.test('PyTorch storage._share_cuda_() round trip', {
  skip: gpuSkip || (havePython('torch') ? false : 'python3 has no torch module'),
}, async (t) => {
  await roundTrip(t, 'torch')
})

t.test('capabilities list devices when CUDA is usable', { skip: gpuSkip }, (t) => {
  const [first] = capabilities.cuda.devices
  t.ok(first, 'at least one device')
  t.match(first!.uuid, /^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
  t.match(first!.pciBusId, /^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9]$/i)
  t.ok(first!.totalMemoryBytes > 0)
  t.end()
})
