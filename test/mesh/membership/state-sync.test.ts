// State sync (mesh/membership/state-sync.ts) between real agents, and its wire against a peer inside the private network.
import t, { type Test } from 'tap'
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import pino from 'pino'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { multiaddr } from '@multiformats/multiaddr'
import { lpStream } from '@libp2p/utils'
import { generateClusterKey, parseClusterKey } from '../../../mesh/membership/cluster-key.ts'
import { startMeshNode } from '../../helpers/mesh-node.ts'
import { decodeEnvelope } from '../../../mesh/membership/signed-envelope.ts'
import { createStateSync, syncProtocol, type HeldRecord, type StateSync, type StateSyncComponents, type StateSyncOptions } from '../../../mesh/membership/state-sync.ts'
import type { MeshLibp2p } from '../../../mesh/membership/libp2p-node.ts'
import { startTestMesh } from '../../helpers/test-mesh.ts'

// Heartbeats every 10 minutes: only the join sync and the re-publication of a record no one heard can make these converge.
const noHeartbeats = ['--set', 'mesh.heartbeatIntervalMs=600000']

/**
 * A state sync on `node`, registered, with inert parts where the test gives none (no records, no
 * peers, nothing applied or introduced); started unless `start` is false, stopped at teardown.
 */
async function syncOn (t: Test, node: MeshLibp2p, options: StateSyncOptions, given: Partial<StateSyncComponents> = {}, start = true): Promise<StateSync> {
  const sync = createStateSync(options, {
    node, own: () => undefined, held: () => [], livePeers: () => [], apply: async () => false, introduce: () => {}, log: pino({ level: 'silent' }), ...given,
  })
  await sync.register()
  if (start) {
    const controller = new AbortController()
    t.teardown(() => controller.abort())
    sync.start({ signal: controller.signal })
  }
  return sync
}

/** Polls `check` for up to 10 s; a timeout names `what` and the state `seen()` describes. */
async function waitUntil (check: () => boolean, what: string, seen: () => string): Promise<void> {
  for (const deadline = Date.now() + 10_000; !check();) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; ${seen()}`)
    await sleep(20)
  }
}

t.test('without heartbeats, agents converge through the join sync and the re-published first record', async t => {
  const mesh = await startTestMesh(t, { nodes: 3, args: noHeartbeats, convergeTimeoutMs: 30_000 })
  const [a, b, c] = mesh.agents as [typeof mesh.agents[0], typeof mesh.agents[0], typeof mesh.agents[0]]
  for (const agent of [b, c]) {
    const info = await agent.client.mesh()
    t.ok(info.sync.syncs >= 1, `${agent.name} synced after joining (${JSON.stringify(info.sync)})`)
  }
  // c joined last: whatever it knows of a and b beyond what gossip brought came by sync.
  const cInfo = await c.client.mesh()
  t.ok(cInfo.sync.recordsApplied >= 1, `records arrived by sync (${cInfo.sync.recordsApplied})`)
  const { peers } = await a.client.meshPeers()
  t.same(peers.map(p => [p.node, p.state]), [['node01', 'alive'], ['node02', 'alive']], 'the seed knows both joiners')
})

t.test('the sync answer holds only signed records newer than the digest; a malformed request is refused and the agent carries on', async t => {
  const mesh = await startTestMesh(t, { nodes: 2 })
  const [a, b] = mesh.agents as [typeof mesh.agents[0], typeof mesh.agents[0]]
  const node = await startMeshNode(t, parseClusterKey(readFileSync(mesh.clusterKeyFile, 'utf8'), 'test key'), await generateKeyPair('Ed25519'))
  const target = multiaddr(a.meshAddress)

  const ask = async (request: unknown): Promise<unknown> => {
    const stream = await node.dialProtocol(target, syncProtocol)
    const lp = lpStream(stream)
    await lp.write(new TextEncoder().encode(JSON.stringify(request)))
    const reply = JSON.parse(new TextDecoder().decode((await lp.read()).subarray()))
    await stream.close()
    return reply
  }
  const decodeAll = async (records: string[]) => Promise.all(records.map(async r => {
    const decoded = await decodeEnvelope(Buffer.from(r, 'base64'), 64 * 1024)
    if (!decoded.ok || decoded.message.kind !== 'record') throw new Error(`not a valid record: ${JSON.stringify(decoded)}`)
    return decoded.message
  }))

  const full = await ask({ digest: {} }) as { records: string[] }
  const all = await decodeAll(full.records)
  t.same(all.map(r => r.from).sort(), [a.peerId, b.peerId].sort(), 'an empty digest gets both records, the answering agent\'s own included, each verifiable')

  const own = all.find(r => r.from === a.peerId)!
  const other = all.find(r => r.from === b.peerId)!
  const partial = await decodeAll((await ask({ digest: { [a.peerId]: [own.incarnation, own.seq + 1000], [b.peerId]: [other.incarnation, 0] } }) as { records: string[] }).records)
  t.same(partial.map(r => r.from), [b.peerId], 'a record the requester holds a newer version of is left out')

  for (const bad of [{ digest: [] }, { digest: { x: [1] } }, { digest: { x: [-1, 0] } }, 'hello', null]) {
    await t.rejects(ask(bad), `refused: ${JSON.stringify(bad)}`)
  }
  const after = await a.client.meshPeers()
  t.same(after.peers.map(p => [p.peerId, p.state]), [[b.peerId, 'alive']], 'the agent carries on with its view unchanged')
})

t.test('after the join sync, each period pulls from a live member what is newer than the digest', async t => {
  const clusterKey = parseClusterKey(generateClusterKey(), 'test key')
  const [a, b] = await Promise.all([startMeshNode(t, clusterKey), startMeshNode(t, clusterKey)])
  const record = (seq: number): HeldRecord => ({ peerId: 'member-x', incarnation: 1, seq, envelope: new TextEncoder().encode(`x@${seq}`) })
  let onB = record(5)
  const appliedAtA: string[] = []
  let heldAtA: HeldRecord[] = []
  await syncOn(t, b, { intervalMs: 0 }, { held: () => [onB] })
  const syncA = await syncOn(t, a, { intervalMs: 200 }, {
    held: () => heldAtA,
    livePeers: () => [b.peerId.toString()],
    async apply (envelope) {
      const text = new TextDecoder().decode(envelope)
      appliedAtA.push(text)
      heldAtA = [record(Number(text.split('@')[1]))]
      return true
    },
  })
  await a.dial(b.getMultiaddrs()[0]!)
  const until = (check: () => boolean, what: string): Promise<void> => waitUntil(check, what, () => `applied ${JSON.stringify(appliedAtA)}`)
  await until(() => appliedAtA.includes('x@5'), 'the join sync')
  const syncsAfterJoin = syncA.counts().syncs
  await until(() => syncA.counts().syncs >= syncsAfterJoin + 2, 'two periodic syncs')
  t.same(appliedAtA, ['x@5'], 'a record the digest already covers is not sent again')
  onB = record(6)
  await until(() => appliedAtA.includes('x@6'), 'the newer record')
  t.same(appliedAtA, ['x@5', 'x@6'], 'the newer version arrives with the next period')
  t.equal(syncA.counts().failed, 0)
})

t.test('the pulls ramp up from start: the first after firstFollowUpMs, each next one twice as long after, up to the period', async t => {
  const clusterKey = parseClusterKey(generateClusterKey(), 'test key')
  const [a, b] = await Promise.all([startMeshNode(t, clusterKey), startMeshNode(t, clusterKey)])
  await syncOn(t, b, { intervalMs: 0 })
  const pulls: number[] = []
  const began = performance.now()
  const syncA = await syncOn(t, a, { intervalMs: 60_000, firstFollowUpMs: 100 }, {
    livePeers () { pulls.push(performance.now() - began); return [b.peerId.toString()] },
  })
  await a.dial(b.getMultiaddrs()[0]!)
  for (const deadline = Date.now() + 10_000; pulls.length < 4 && Date.now() < deadline;) await sleep(20)
  t.equal(pulls.length, 4, `four pulls within 10 s although the period is 60 s (at ${pulls.map(Math.round).join(', ')} ms)`)
  // Timers never fire early; the jitter is ±10 %.
  const gaps = pulls.map((at, i) => at - (i === 0 ? 0 : pulls[i - 1]!))
  for (const [i, gap] of gaps.entries()) t.ok(gap >= 0.9 * 100 * 2 ** i - 5, `pull ${i + 1} came ${Math.round(gap)} ms after the previous one (at least ${0.9 * 100 * 2 ** i} ms)`)
  t.ok(syncA.counts().syncs >= 3, `the pulls were syncs (${JSON.stringify(syncA.counts())})`)
})

t.test('after the join, a peer that connects unknown is asked at once, one that joins through this agent is also introduced; a known one is neither', async t => {
  const clusterKey = parseClusterKey(generateClusterKey(), 'test key')
  const [a, b, c, d] = await Promise.all([startMeshNode(t, clusterKey), startMeshNode(t, clusterKey), startMeshNode(t, clusterKey), startMeshNode(t, clusterKey)])
  const ownOf = (node: MeshLibp2p): HeldRecord => ({ peerId: node.peerId.toString(), incarnation: 1, seq: 1, envelope: new TextEncoder().encode(node.peerId.toString()) })
  // b and c answer with their own records but never sync themselves.
  for (const node of [b, c]) await syncOn(t, node, { intervalMs: 0 }, { own: () => ownOf(node) }, false)
  const heldAtA: HeldRecord[] = []
  const introducedByA: string[] = []
  const syncA = await syncOn(t, a, { intervalMs: 0 }, {
    held: () => heldAtA,
    async apply (envelope) {
      const peerId = new TextDecoder().decode(envelope)
      heldAtA.push({ peerId, incarnation: 1, seq: 1, envelope })
      return true
    },
    introduce: peer => { introducedByA.push(peer) },
  })
  const until = (check: () => boolean, what: string): Promise<void> => waitUntil(check, what, () => `held ${heldAtA.map(h => h.peerId).join(', ')}`)
  await a.dial(b.getMultiaddrs()[0]!)
  await until(() => heldAtA.some(h => h.peerId === b.peerId.toString()), 'the join sync with b')
  t.equal(syncA.counts().syncs, 1, 'joined through b')

  await c.dial(a.getMultiaddrs()[0]!)
  await until(() => heldAtA.some(h => h.peerId === c.peerId.toString()), 'c\'s record')
  t.equal(syncA.counts().syncs, 2, 'c connected unknown and was asked for its record (no period is running)')
  t.same(introducedByA, [], 'c did not join through a: not introduced')

  await a.hangUp(c.peerId)
  await c.dial(a.getMultiaddrs()[0]!)
  await sleep(500)
  t.equal(syncA.counts().syncs, 2, 'c, known now, is not asked again when it reconnects')

  // d joins through a (its own join sync): a asks d back and introduces d's record.
  const syncD = await syncOn(t, d, { intervalMs: 0 }, { own: () => ownOf(d) })
  await d.dial(a.getMultiaddrs()[0]!)
  await until(() => introducedByA.length > 0, 'the introduction of d')
  t.same(introducedByA, [d.peerId.toString()], 'd joined through a: asked back and introduced, once')
  t.ok(heldAtA.some(h => h.peerId === d.peerId.toString()), 'a holds d\'s record before introducing it')
  t.equal(syncD.counts().syncs, 1, 'd\'s join sync')
})
