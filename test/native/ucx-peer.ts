/**
 * The serving side of test/native/ucx.test.ts, a process of its own: a host
 * pool of `--bytes` filled with a pattern (byte i = (i * 7 + seed) & 255), a
 * UCX worker (UCX_TLS from the environment), and the pool mapped in two
 * halves. Prints one JSON line { address, mappings: [{ rkey, address,
 * length, offset }] } (hex; addresses as decimal strings), then obeys stdin
 * lines: "unmap N" (answers "unmapped N"), "exit".
 */
import { createInterface } from 'node:readline'
import { parseArgs } from 'node:util'
import { createHostPool, createUcxWorker, viewHostRange } from '../../native/index.ts'

const { values } = parseArgs({ options: { bytes: { type: 'string' }, seed: { type: 'string' } } })
const bytes = Number(values.bytes ?? 8 * 2 ** 20)
const seed = Number(values.seed ?? 1)
const pool = await createHostPool({ sizeBytes: bytes, lock: false, hugePages: false, registerCuda: false })
const extent = pool.allocate(bytes)
const all = pool.range(extent)
const view = viewHostRange(all)
for (let i = 0; i < view.length; i++) view[i] = (i * 7 + seed) & 255
const worker = createUcxWorker()
const half = bytes / 2
const mappings = [0, 1].map(i => ({ offset: i * half, mapping: worker.map(pool.range(extent, i * half, half)) }))
console.log(JSON.stringify({
  address: worker.address().toString('hex'),
  mappings: mappings.map(m => ({ rkey: m.mapping.rkey.toString('hex'), address: m.mapping.address.toString(), length: m.mapping.length, offset: m.offset })),
}))
for await (const line of createInterface({ input: process.stdin })) {
  const [command, arg] = line.trim().split(' ')
  if (command === 'unmap') {
    worker.unmap(mappings[Number(arg)]!.mapping)
    console.log(`unmapped ${arg}`)
  } else if (command === 'exit') {
    break
  }
}
worker.close()
pool.close()
