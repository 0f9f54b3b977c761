// Pulls of models many times larger than the host pool: through a bounded window into keys that spill
// to NVMe, whole and sliced, served by an agent whose own pool is as small; room checked before a byte
// moves; a pull cut off and repeated fetches only what is missing. Peak RSS bounded by the pools.
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { AgentError } from '../../../core/errors.ts'
import { keyBytes, MiB, sharedKey, tensor, weightsNode, writeSafetensors, type FixtureTensor } from './weights-fixtures.ts'
import { processMemory } from '../../helpers/process-memory.ts'

const pool = 4 * MiB
/** 48 MiB in 48 tensors of 1 MiB: twelve times either agent's pool. */
const layers = (seed: number): FixtureTensor[] => Array.from({ length: 48 }, (_, i) => tensor(`model.layers.${i}.mlp.down_proj.weight`, 'bf16', [512, 1024], seed + i))
const total = (ts: FixtureTensor[]): number => ts.reduce((s, x) => s + x.data.length, 0)

/** Peak resident memory since the last reset (VmHWM), bytes; reset() starts a new peak (clear_refs 5). */
const peakRss = {
  reset: (): void => writeFileSync('/proc/self/clear_refs', '5'),
  read: (): number => processMemory('self').peak,
  now: (): number => processMemory('self').now,
}

t.test('a model 12x the pools: whole and sliced pulls through the window, served from NVMe, byte-exact, memory bounded', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key, {}, undefined, pool)
  const b = await weightsNode(t, key, {}, undefined, pool)
  const tensors = layers(1)
  const file = join(a.dir, 'big.safetensors')
  writeSafetensors(file, tensors)
  await a.weights.publish({ model: 'big', version: 1, source: { kind: 'safetensors', path: file } })
  t.ok(a.sm.availability().nvme.totalBytes - a.sm.availability().nvme.freeBytes >= total(tensors), 'the publisher holds the model on NVMe (durable publish)')
  global.gc?.()
  const before = peakRss.now()
  peakRss.reset()
  const whole = await b.weights.pull({ from: a.weights.address(), model: 'big', version: 1, streams: 4 })
  const growth = peakRss.read() - before
  t.equal(whole.bytes, total(tensors))
  t.equal(whole.keys.length, tensors.length)
  const residency = b.sm.residency('weights/big/')
  t.ok(residency.tiers.nvme.usedBytes >= total(tensors) - pool, `B spilled what its pool cannot hold (${residency.tiers.nvme.usedBytes} bytes on NVMe)`)
  // Both agents run in this process: their pools (8 MiB, reserved at start) plus buffers, not the model's 48 MiB.
  t.ok(growth < 24 * MiB, `peak RSS grew ${(growth / MiB).toFixed(1)} MiB during a ${total(tensors) / MiB} MiB pull (bound 24 MiB)`)
  for (const [i, x] of tensors.entries()) if (i % 7 === 0) t.ok((await keyBytes(b.sm, whole.keys[i]!)).equals(x.data), `${x.name} byte-exact`)

  const c = await weightsNode(t, key, {}, undefined, pool)
  const sliced = await c.weights.pull({ from: a.weights.address(), model: 'big', version: 1, streams: 2, layout: { tp: 2, rank: 1, rules: [{ pattern: 'down_proj', dim: 1 }] } })
  t.equal(sliced.bytes, total(tensors) / 2)
  const x = tensors[30]!
  const half = Buffer.concat(Array.from({ length: 512 }, (_, r) => x.data.subarray(r * 2048 + 1024, r * 2048 + 2048)))
  t.ok((await keyBytes(c.sm, sliced.keys[30]!)).equals(half), 'a sliced pull of a model 12x the pool, byte-exact')
})

t.test('a pull that cannot fit pool and NVMe together, or a slice larger than the pool, is refused before a byte moves', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key, {}, undefined, 64 * MiB)
  const tiny = await weightsNode(t, key, {}, undefined, pool, undefined, 32 * MiB)
  const big = [tensor('huge.weight', 'bf16', [4096, 2048], 3)] // 16 MiB: four times tiny's pool
  const file = join(a.dir, 'huge.safetensors')
  writeSafetensors(file, big)
  await a.weights.publish({ model: 'huge', version: 1, source: { kind: 'safetensors', path: file } })
  await t.rejects(tiny.weights.pull({ from: a.weights.address(), model: 'huge', version: 1, streams: 1 }), { code: 'ERR_TIER_FULL', message: /huge.weight of huge v1: its 16777216 bytes do not fit the host pool \(4194304 bytes\)/ })
  // tiny (4 MiB pool, 32 MiB NVMe) holds 24 MiB (its pool full, the rest spilled): 24 MiB more do not fit.
  const first = layers(30).slice(0, 24)
  const firstFile = join(a.dir, 'first.safetensors')
  writeSafetensors(firstFile, first)
  await a.weights.publish({ model: 'first', version: 1, source: { kind: 'safetensors', path: firstFile } })
  await tiny.weights.pull({ from: a.weights.address(), model: 'first', version: 1, streams: 2 })
  const filler = layers(70).slice(0, 24)
  const fillFile = join(a.dir, 'fill.safetensors')
  writeSafetensors(fillFile, filler.map(x => ({ ...x, name: x.name.replace('layers', 'fill') })))
  await a.weights.publish({ model: 'fill', version: 1, source: { kind: 'safetensors', path: fillFile } })
  const heldBefore = tiny.sm.storedKeys('weights/').length
  await t.rejects(tiny.weights.pull({ from: a.weights.address(), model: 'fill', version: 1, streams: 1 }), { code: 'ERR_TIER_FULL', message: /pulling fill v1 needs 25165824 bytes; the host pool has \d+ bytes free and NVMe \d+ \(of 33554432\): \d+ bytes missing/ })
  t.equal(tiny.sm.storedKeys('weights/').length, heldBefore, 'the refused pull stored nothing')
})

t.test('a pull whose caller went away keeps the slices that landed; the repeat fetches only the rest', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key, {}, undefined, 64 * MiB)
  const b = await weightsNode(t, key, {}, undefined, pool)
  const tensors = layers(20).slice(0, 24) // 24 MiB
  const file = join(a.dir, 'm.safetensors')
  writeSafetensors(file, tensors)
  await a.weights.publish({ model: 'm', version: 1, source: { kind: 'safetensors', path: file } })
  // The caller goes away once 10 MiB landed (agentctl killed: the route aborts the pull).
  const caller = new AbortController()
  await t.rejects(b.weights.pull({
    from: a.weights.address(), model: 'm', version: 1, streams: 2, signal: caller.signal,
    onProgress: done => { if (done > 10 * MiB) caller.abort(new AgentError('ERR_WEIGHTS_TRANSFER', 'the caller went away')) },
  }), { code: 'ERR_WEIGHTS_TRANSFER' })
  const kept = b.sm.storedKeys('weights/m/').length
  t.ok(kept >= 8 && kept < tensors.length, `${kept} of ${tensors.length} slices kept`)
  const repeat = await b.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 2 })
  t.equal(repeat.bytes, total(tensors))
  t.equal(repeat.bytesReceived, total(tensors) - kept * MiB, 'only the missing slices were fetched')
  for (const [i, x] of tensors.entries()) if (i % 5 === 0) t.ok((await keyBytes(b.sm, repeat.keys[i]!)).equals(x.data), `${x.name} byte-exact`)
})
