// Pulls over UCX (PROTOCOL.md "RDMA (UCX)"): with weights.transports ["ucx", "tcp"], whole tensors, aligned
// row ranges of column-parallel slices and gathered row-parallel slices (one get per source run, checked with
// the server's CHECKSUM) are read one-sided from ranges the server mapped after the authenticated handshake,
// byte-exact, over UCX_TLS=tcp and over shared memory; gathers of narrow runs stay on TCP; a server that does not serve UCX, or
// cannot pin a version larger than its pool, leaves the pull on TCP with the reason; a version retired
// mid-pull fails it with ERR_WEIGHTS_RETIRED as over TCP; a source that stops mid-pull hands the pull to
// another full holder; a stranger is refused at the handshake. Real StateManagers, weight services, UCX.
import t, { type Test } from 'tap'
import { join } from 'node:path'
import { capabilities } from '../../../native/index.ts'
import type { TargetLayout } from '../../../agent/weights/reshard.ts'
import type { WeightsConfig } from '../../../agent/weights/weights-config.ts'
import { createDataAuth } from '../../../agent/weights/data-auth.ts'
import { createTcpConnector } from '../../../agent/weights/tcp-client.ts'
import { keyBytes, MiB, sharedKey, tensor, weightsNode, writeSafetensors, type FixtureTensor, type NodeFixture } from './weights-fixtures.ts'

const skip = !capabilities.addon.loaded
  ? `the native addon is not built (${capabilities.addon.error})`
  : !capabilities.ucx.compiled ? 'the native addon was built without UCX (install libucx-dev and rebuild: npm run build:native)' : false
if (skip !== false) t.comment(`skipping the UCX pull tests: ${skip}`)

// ucxOverTcp: these tests read over UCX_TLS=tcp too, which a default agent leaves to its own TCP streams.
const ucxFirst = { transports: ['ucx', 'tcp'] as Array<'ucx' | 'tcp'>, ucxOverTcp: true }
const layers = (seed: number, count: number): FixtureTensor[] => Array.from({ length: count }, (_, i) => tensor(`model.layers.${i}.mlp.down_proj.weight`, 'bf16', [512, 1024], seed + i))
const total = (ts: FixtureTensor[]): number => ts.reduce((s, x) => s + x.data.length, 0)

async function publisher (t: Test, key: Uint8Array, tensors: FixtureTensor[], overrides: Partial<WeightsConfig> = ucxFirst, poolBytes = 64 * MiB): Promise<NodeFixture> {
  const a = await weightsNode(t, key, overrides, undefined, poolBytes)
  const file = join(a.dir, 'm.safetensors')
  writeSafetensors(file, tensors)
  await a.weights.publish({ model: 'm', version: 1, source: { kind: 'safetensors', path: file } })
  return a
}

async function checkWhole (t: Test, node: NodeFixture, result: { keys: string[] }, tensors: FixtureTensor[], who: string): Promise<void> {
  let exact = 0
  for (const [i, x] of tensors.entries()) if ((await keyBytes(node.sm, result.keys[i]!)).equals(x.data)) exact++
  t.equal(exact, tensors.length, `${who}: every tensor byte-exact`)
}

/** UCX_TLS for the workers the test's agents create (each at its first UCX use). */
function useTls (t: Test, tls: string): void {
  process.env.UCX_TLS = tls
  t.teardown(() => { delete process.env.UCX_TLS })
}

for (const tls of ['tcp', 'posix,self']) {
  t.test(`UCX_TLS=${tls}: a whole pull, aligned row ranges and gathered slices read over UCX, byte-exact; narrow column splits over TCP`, { skip }, async t => {
    useTls(t, tls)
    const key = sharedKey()
    const tensors = layers(1, 24)
    const narrow = tensor('model.layers.0.mlp.narrow_proj.weight', 'bf16', [2048, 128], 99)
    const a = await publisher(t, key, [...tensors, narrow])
    const b = await weightsNode(t, key, ucxFirst, undefined, 64 * MiB)
    const r = await b.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 2 })
    t.equal(r.ucx?.bytes, total([...tensors, narrow]), `all ${total([...tensors, narrow]) / MiB} MiB over UCX`)
    const family = tls === 'tcp' ? /^tcp\// : /^(posix|sysv|cma)\//
    t.ok(r.ucx !== undefined && r.ucx.transports.length > 0 && r.ucx.transports.every(x => family.test(x)), `carried by ${r.ucx?.transports.join(', ')}`)
    t.equal(r.refetchedPieces, 0)
    await checkWhole(t, b, r, [...tensors, narrow], 'the UCX puller')

    // Row-parallel rank 1 of down_proj: 512 runs of 1 KiB per tensor, one get each, checked with the server's CHECKSUM.
    // narrow_proj split the same way has runs of 128 bytes: the server gathers those over TCP.
    const layout: { tp: number, rank: number, rules: TargetLayout['rules'] } = { tp: 2, rank: 1, rules: [{ pattern: 'down_proj', dim: 1 }, { pattern: 'narrow_proj', dim: 1 }] }
    const c = await weightsNode(t, key, ucxFirst, undefined, 64 * MiB)
    const sliced = await c.weights.pull({ from: a.weights.address(), model: 'm', version: 1, layout, streams: 2 })
    t.equal(sliced.ucx?.bytes, total(tensors) / 2, 'every down_proj slice over UCX, narrow_proj over TCP')
    t.equal(sliced.refetchedPieces, 0, 'every gathered slice matched the server\'s checksum')
    const columns = (x: FixtureTensor, rows: number): Buffer => {
      const row = x.data.length / rows
      return Buffer.concat(Array.from({ length: rows }, (_, i) => x.data.subarray(i * row + row / 2, (i + 1) * row)))
    }
    let exact = 0
    for (const [i, x] of tensors.entries()) if ((await keyBytes(c.sm, sliced.keys[i]!)).equals(columns(x, 512))) exact++
    t.equal(exact, tensors.length, 'every gathered slice byte-exact over UCX')
    t.ok((await keyBytes(c.sm, sliced.keys[tensors.length]!)).equals(columns(narrow, 2048)), 'the narrow column split byte-exact over TCP')

    // Column-parallel rank 1: rows 256.. of each tensor, contiguous and on chunk boundaries: the manifest's chunks, over UCX.
    const rows = await weightsNode(t, key, ucxFirst, undefined, 64 * MiB)
    const column = await rows.weights.pull({ from: a.weights.address(), model: 'm', version: 1, layout: { tp: 2, rank: 1, rules: [{ pattern: 'down_proj', dim: 0 }] }, streams: 2 })
    t.equal(column.ucx?.bytes, total(tensors) / 2 + narrow.data.length, 'an aligned row range (and narrow_proj, whole: no rule splits it) is read over UCX')
    let rowsExact = 0
    for (const [i, x] of tensors.entries()) if ((await keyBytes(rows.sm, column.keys[i]!)).equals(x.data.subarray(x.data.length / 2))) rowsExact++
    t.equal(rowsExact, tensors.length, 'every row range byte-exact')
  })
}

t.test('a server that does not serve UCX, or cannot pin a version larger than its pool, leaves the pull on TCP with the reason', { skip }, async t => {
  useTls(t, 'tcp')
  const key = sharedKey()
  const tensors = layers(40, 16)
  const tcpOnly = await publisher(t, key, tensors, { transports: ['tcp'] })
  const b = await weightsNode(t, key, ucxFirst, undefined, 64 * MiB)
  const r = await b.weights.pull({ from: tcpOnly.weights.address(), model: 'm', version: 1, streams: 2 })
  t.match(r.ucx, { bytes: 0, fallback: /does not serve weights over UCX/ }, 'UCX not used, and why')
  await checkWhole(t, b, r, tensors, 'the puller of a TCP-only server')

  // 24 MiB published into a 16 MiB pool (the rest on NVMe): UCX would need all of it pinned at once.
  const big = layers(80, 24)
  const small = await publisher(t, key, big, ucxFirst, 16 * MiB)
  const c = await weightsNode(t, key, ucxFirst, undefined, 64 * MiB)
  const r2 = await c.weights.pull({ from: small.weights.address(), model: 'm', version: 1, streams: 2 })
  t.match(r2.ucx, { bytes: 0, fallback: /./ }, `UCX not used: ${r2.ucx?.fallback}`)
  await checkWhole(t, c, r2, big, 'the puller of a version larger than the server\'s pool')

  // The defaults: a server UCX reaches only through its TCP transport is read over this agent's TCP streams.
  const a = await publisher(t, key, tensors)
  const byDefault = await weightsNode(t, key, { transports: ['ucx', 'tcp'] }, undefined, 64 * MiB)
  const r3 = await byDefault.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 2 })
  t.match(r3.ucx, { bytes: 0, fallback: /only through its TCP transport \(tcp\/lo\).*weights\.ucxOverTcp/ }, 'UCX over TCP only: not used, and why')
  await checkWhole(t, byDefault, r3, tensors, 'the puller that kept to TCP')

  // A server whose uploads are paced serves no one-sided reads (they would pass the pacing by).
  const paced = await publisher(t, key, tensors, { ...ucxFirst, uploadBytesPerSecond: 2 ** 30 })
  const d = await weightsNode(t, key, ucxFirst, undefined, 64 * MiB)
  const r4 = await d.weights.pull({ from: paced.weights.address(), model: 'm', version: 1, streams: 2 })
  t.match(r4.ucx, { bytes: 0, fallback: /uploadBytesPerSecond paces what it serves/ }, 'a paced server: not over UCX, and why')
  await checkWhole(t, d, r4, tensors, 'the puller of a paced server')
})

t.test('a version retired while it is read over UCX fails the pull with ERR_WEIGHTS_RETIRED and stores nothing', { skip }, async t => {
  useTls(t, 'tcp')
  const key = sharedKey()
  const tensors = layers(120, 32)
  const a = await publisher(t, key, tensors)
  const b = await weightsNode(t, key, ucxFirst, undefined, 64 * MiB)
  // A connection that opened the version for UCX and reads nothing more: the retire closes it too.
  const idle = await createTcpConnector(createDataAuth(key)).open(a.weights.address())
  t.teardown(() => idle.close())
  await idle.ucxOpen!('m', 1)
  t.match(a.weights.list().ucx, [{ model: 'm', version: 1, bytes: total(tensors), connections: 1 }], 'opened: pinned and mapped')
  let retiring: Promise<unknown> | undefined
  const pull = b.weights.pull({
    from: a.weights.address(), model: 'm', version: 1, streams: 1,
    onProgress: done => { if (done > 0 && retiring === undefined) retiring = a.weights.retire('m', 1) },
  })
  await t.rejects(pull, { code: 'ERR_WEIGHTS_RETIRED' })
  await retiring
  t.same(b.sm.storedKeys('weights/'), [], 'nothing of the retired version kept')
  for (let i = 0; i < 100 && (!idle.closed || (a.weights.list().ucx ?? []).length > 0); i++) await new Promise(resolve => setTimeout(resolve, 20))
  t.ok(idle.closed, 'the server closed the idle connection that had the version mapped')
  t.same(a.weights.list().ucx, [], 'nothing pinned or mapped for UCX any more')
})

t.test('the source stops mid-pull over UCX: the pull goes on from another full holder, byte-exact; a wrong cluster key gets no UCX at all', { skip }, async t => {
  useTls(t, 'tcp')
  const key = sharedKey()
  const tensors = layers(160, 48)
  const a = await publisher(t, key, tensors, ucxFirst, 128 * MiB)
  const holder = await weightsNode(t, key, ucxFirst, undefined, 128 * MiB)
  await holder.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 2 })
  const b = await weightsNode(t, key, ucxFirst, undefined, 128 * MiB)
  let stopping: Promise<void> | undefined
  const r = await b.weights.pull({
    from: a.weights.address(), fallbacks: [holder.weights.address()], model: 'm', version: 1, streams: 2,
    onProgress: done => { if (done >= 8 * MiB && stopping === undefined) stopping = a.weights.stop() },
  })
  await stopping
  t.ok(stopping !== undefined, 'the source stopped mid-pull')
  t.same(r.switchedTo, [holder.weights.address()], 'the pull moved to the other full holder')
  t.equal(r.ucx?.bytes, total(tensors), 'every byte still over UCX (from both)')
  await checkWhole(t, b, r, tensors, 'the puller whose source stopped')

  const stranger = await weightsNode(t, sharedKey(), ucxFirst, undefined, 64 * MiB)
  await t.rejects(stranger.weights.pull({ from: holder.weights.address(), model: 'm', version: 1, streams: 1 }), { code: 'ERR_WEIGHTS_AUTH' }, 'refused at the handshake, before any UCX_OPEN')
  t.same(stranger.sm.storedKeys('weights/'), [], 'nothing stored')
})
