// UCX one-sided reads between two processes (native/ucx.ts): a serving process maps host-pool memory
// (test/native/ucx-peer.ts), this one connects to its worker address and reads with gets into its own
// pool, over UCX_TLS=tcp and over shared memory (posix,self). Byte-exact; the serving process killed
// mid-use fails gets (UCX detects it on TCP; over shared memory the caller's close does); bad input is
// refused; an idle worker costs no CPU (event-driven progress, no polling thread).
import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { capabilities, createHostPool, createUcxWorker, viewHostRange, type HostPool } from '../../native/index.ts'
import { repoRoot } from '../helpers/agent-process.ts'

const skip = !capabilities.addon.loaded
  ? `the native addon is not built (${capabilities.addon.error})`
  : !capabilities.ucx.compiled ? 'the native addon was built without UCX (install libucx-dev and rebuild: npm run build:native)' : false
if (skip !== false) t.comment(`skipping the UCX tests: ${skip}`)

const MiB = 2 ** 20
const expected = (i: number, seed: number): number => (i * 7 + seed) & 255

interface Peer {
  address: Buffer
  mappings: Array<{ rkey: Buffer, address: bigint, length: number, offset: number }>
  command(line: string): Promise<string>
  kill(): void
}

/** Starts test/native/ucx-peer.ts with `tls` and reads its worker address and mappings. */
async function servingPeer (t: Test, tls: string, bytes: number, seed: number): Promise<Peer> {
  const child = spawn(process.execPath, ['test/native/ucx-peer.ts', '--bytes', String(bytes), '--seed', String(seed)], {
    cwd: repoRoot,
    stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, UCX_TLS: tls, UCX_LOG_LEVEL: 'fatal' },
  })
  t.teardown(() => { child.kill('SIGKILL') })
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]()
  const first = await lines.next()
  if (first.done === true) throw new Error('the UCX peer exited before printing its address')
  const info = JSON.parse(first.value) as { address: string, mappings: Array<{ rkey: string, address: string, length: number, offset: number }> }
  return {
    address: Buffer.from(info.address, 'hex'),
    mappings: info.mappings.map(m => ({ rkey: Buffer.from(m.rkey, 'hex'), address: BigInt(m.address), length: m.length, offset: m.offset })),
    async command (line) { child.stdin.write(`${line}\n`); return (await lines.next()).value as string },
    kill () { child.kill('SIGKILL') },
  }
}

async function pool (t: Test, bytes: number): Promise<HostPool> {
  const p = await createHostPool({ sizeBytes: bytes, lock: false, hugePages: false, registerCuda: false })
  t.teardown(() => p.close())
  return p
}

/** Counts bytes of `view` that differ from the peer's pattern at peer offset `from`. */
function mismatches (view: Buffer, from: number, seed: number): number {
  let bad = 0
  for (let i = 0; i < view.length; i++) if (view[i] !== expected(from + i, seed)) bad++
  return bad
}

for (const tls of ['tcp', 'posix,self']) {
  t.test(`UCX_TLS=${tls}: whole, unaligned and 64 concurrent gets are byte-exact; a dead peer fails gets, never hangs them`, { skip }, async t => {
    process.env.UCX_TLS = tls
    process.env.UCX_LOG_LEVEL = 'fatal'
    t.teardown(() => { delete process.env.UCX_TLS; delete process.env.UCX_LOG_LEVEL })
    const peer = await servingPeer(t, tls, 16 * MiB, 3)
    const mine = await pool(t, 16 * MiB)
    const extent = mine.allocate(8 * MiB)
    const worker = createUcxWorker()
    t.teardown(() => worker.close())
    const ep = worker.connect(peer.address)
    const [low, high] = peer.mappings as [Peer['mappings'][0], Peer['mappings'][0]]
    const key = worker.remoteKey(ep, low.rkey)

    await worker.get(ep, key, low.address, mine.range(extent, 0, 8 * MiB))
    t.equal(mismatches(mine.view(extent), 0, 3), 0, 'a whole 8 MiB mapping, byte-exact')
    const family = tls === 'tcp' ? /^tcp\// : /^(posix|sysv|cma)\//
    t.ok(ep.transports().length > 0 && ep.transports().every(x => family.test(x)), `carried by ${ep.transports().join(', ')}`)
    t.equal(ep.peerFailure, tls === 'tcp', tls === 'tcp' ? 'UCX detects a dead peer over TCP' : 'UCX cannot detect a dead peer over shared memory: the caller closes')

    viewHostRange(mine.range(extent)).fill(0)
    await worker.get(ep, key, low.address + 12345n, mine.range(extent, 101, 777))
    t.equal(mismatches(viewHostRange(mine.range(extent, 101, 777)), 12345, 3), 0, 'an unaligned 777-byte get at an unaligned destination')
    t.equal(viewHostRange(mine.range(extent, 0, 101)).every(b => b === 0) && viewHostRange(mine.range(extent, 878, 4096)).every(b => b === 0), true, 'nothing written around it')

    const highKey = worker.remoteKey(ep, high.rkey)
    await Promise.all(Array.from({ length: 64 }, (_, i) => worker.get(ep, highKey, high.address + BigInt(i * 128 * 1024), mine.range(extent, i * 128 * 1024, 128 * 1024))))
    t.equal(mismatches(mine.view(extent), high.offset, 3), 0, '64 concurrent 128 KiB gets of the other mapping')

    // A gather: 1000 runs of 1000 bytes, 3000 apart, in one call, laid one after another into one range.
    viewHostRange(mine.range(extent)).fill(0)
    const runs = Array.from({ length: 1000 }, (_, i) => ({ offset: 7 + i * 3000, length: 1000 }))
    await worker.get(ep, key, low.address, mine.range(extent, 0, 1_000_000), runs)
    let gatherBad = 0
    for (const [i, r] of runs.entries()) gatherBad += mismatches(viewHostRange(mine.range(extent, i * 1000, 1000)), r.offset, 3)
    t.equal(gatherBad, 0, 'a gather of 1000 runs in one get, byte-exact')
    t.equal(viewHostRange(mine.range(extent, 1_000_000, 4096)).every(b => b === 0), true, 'nothing written past it')

    // Bad input: refused before anything is sent.
    t.throws(() => worker.get(ep, key, low.address, mine.range(extent, 0, 100), [{ offset: 0, length: 99 }]), { code: 'ERR_ARG_INVALID', message: /add up to 99 bytes, the destination has 100/ }, 'runs that do not fill the destination')
    t.throws(() => worker.get(ep, key, low.address, mine.range(extent, 0, 100), [{ offset: -1, length: 100 }]), { code: 'ERR_ARG_INVALID', message: /run 0/ }, 'a negative run offset')
    t.throws(() => worker.get(ep, key, low.address, mine.range(extent, 0, 100), [{ offset: 0, length: 100 }, { offset: 5, length: 0 }]), { code: 'ERR_ARG_INVALID', message: /run 1/ }, 'an empty run')
    t.throws(() => worker.get(ep, key, low.address, mine.range(extent, 0, 100), []), { code: 'ERR_ARG_INVALID', message: /at least one run/ }, 'no runs')
    t.throws(() => worker.get(ep, key, low.address, { memory: mine, offset: 16 * MiB - 10, length: 20 }), { code: 'ERR_OUT_OF_RANGE' }, 'a destination past the pool')
    const other = worker.connect(peer.address)
    await t.rejects(worker.get(other, key, low.address, mine.range(extent, 0, 16)), { code: 'ERR_ARG_INVALID', message: /another endpoint/ }, 'a key of another endpoint')
    key.destroy()
    await t.rejects(worker.get(ep, key, low.address, mine.range(extent, 0, 16)), { code: 'ERR_ARG_INVALID', message: /destroyed/ }, 'a destroyed key')
    other.close()
    await t.rejects(worker.get(other, highKey, high.address, mine.range(extent, 0, 16)), { code: 'ERR_RESOURCE_CLOSED' }, 'a closed endpoint')

    // The peer dies: a get fails (UCX's error over TCP; over shared memory when the caller closes the endpoint).
    peer.kill()
    await new Promise(resolve => setTimeout(resolve, 200))
    const began = performance.now()
    const lost = worker.get(ep, highKey, high.address, mine.range(extent, 0, MiB))
    if (!ep.peerFailure) setTimeout(() => ep.close(), 500)
    await t.rejects(lost, { code: 'ERR_UCX' }, 'a get from the dead peer fails')
    t.ok(performance.now() - began < 20_000, `within ${((performance.now() - began) / 1000).toFixed(1)} s`)
  })
}

t.test('an idle worker with a connected endpoint costs no CPU (no polling); close is final and idempotent', { skip }, async t => {
  process.env.UCX_TLS = 'tcp'
  t.teardown(() => { delete process.env.UCX_TLS })
  const peer = await servingPeer(t, 'tcp', 2 * MiB, 5)
  const worker = createUcxWorker()
  const ep = worker.connect(peer.address)
  const mine = await pool(t, 2 * MiB)
  const extent = mine.allocate(MiB)
  await worker.get(ep, worker.remoteKey(ep, peer.mappings[0]!.rkey), peer.mappings[0]!.address, mine.range(extent))
  const before = process.cpuUsage()
  await new Promise(resolve => setTimeout(resolve, 1500))
  const used = process.cpuUsage(before)
  const ms = (used.user + used.system) / 1000
  // A polling progress thread would burn the whole 1.5 s; event-driven progress costs a few ms.
  t.ok(ms < 300, `1.5 s idle cost ${ms.toFixed(1)} ms of CPU`)
  worker.close()
  worker.close()
  t.throws(() => worker.connect(peer.address), { code: 'ERR_RESOURCE_CLOSED' })
  t.throws(() => worker.address(), { code: 'ERR_RESOURCE_CLOSED' })
})

t.test('capabilities report UCX: compiled, its version and the machine\'s transports', { skip }, async t => {
  t.match(capabilities.ucx, { compiled: true, version: /^\d+\.\d+\.\d+$/ })
  t.ok(capabilities.ucx.transports.some(x => x.transport === 'tcp'), `transports: ${capabilities.ucx.transports.map(x => `${x.transport}/${x.device}`).join(', ')}`)
})
