// Two real agents in one mesh: each advertises its data address and served versions in its availability
// record, and `agentctl weights pull` without --from finds a holder in the local agent's mesh view.
import t from 'tap'
import { join } from 'node:path'
import { agentctlMain, runNode } from '../../helpers/agent-process.ts'
import { startTestMesh, type MeshAgent } from '../../helpers/test-mesh.ts'
import { capabilities } from '../../../native/index.ts'
import { tensor, writeSafetensors } from './weights-fixtures.ts'

if (!capabilities.addon.loaded) {
  t.comment(`skipped: the weights subsystem needs the native addon (${capabilities.addon.error})`)
} else {
  t.test('weights versions are advertised in the mesh and a pull without --from takes the latest from an alive holder', async t => {
    const mesh = await startTestMesh(t, { nodes: 2, args: ['--set', 'state.enabled=true', '--set', 'state.hostPoolBytes=33554432', '--set', 'weights.chunkBytes=262144', '--set', 'weights.durable=false'] })
    const [a, b] = mesh.agents as [MeshAgent, MeshAgent]
    const ctl = (agent: MeshAgent, ...words: string[]): Promise<{ code: number | null, stdout: string, stderr: string }> => runNode(agentctlMain, ['--socket', agent.socketPath, '--json', ...words])
    const advertised = (observer: MeshAgent, holder: MeshAgent, model: string, version: number, what: string): Promise<number> =>
      mesh.waitFor([observer], peers => peers.some(p => p.peerId === holder.peerId && p.record?.weights?.some(w => w.model === model && w.version === version) === true), 15_000, what)

    const none = await ctl(b, 'weights', 'pull', '--model', 'm')
    t.not(none.code, 0, 'nothing to pull yet')
    t.match(JSON.parse(none.stdout || none.stderr), { error: { code: 'ERR_WEIGHTS_NOT_FOUND', message: /no alive agent in the mesh advertises model m/ } })

    const tensors = [tensor('model.layers.0.mlp.down_proj.weight', 'bf16', [64, 512], 1), tensor('model.norm.weight', 'f32', [64], 2)]
    const file = join(mesh.dir, 'm.safetensors')
    writeSafetensors(file, tensors)
    for (const version of ['1', '2']) {
      const published = await ctl(a, 'weights', 'publish', '--model', 'm', '--version', version, '--from-safetensors', file)
      t.equal(published.code, 0, published.stderr)
    }
    await advertised(b, a, 'm', 2, 'B sees A advertise m v2')
    const record = (await mesh.peerOf(b, a))!.record!
    t.equal(record.addresses.weights, (await a.client.status()).weights!.address, 'the record carries A\'s data address')
    t.same(record.weights, [{ model: 'm', version: 2 }, { model: 'm', version: 1 }])

    const pulled = await ctl(b, 'weights', 'pull', '--model', 'm')
    t.equal(pulled.code, 0, pulled.stderr)
    t.match(JSON.parse(pulled.stdout), { version: 2, tensors: 2, bytes: tensors[0]!.data.length + tensors[1]!.data.length }, 'the latest advertised version')
    const older = await ctl(b, 'weights', 'pull', '--model', 'm', '--version', '1', '--preset', 'llama', '--tp', '2', '--rank', '0')
    t.equal(older.code, 0, older.stderr)
    t.match(JSON.parse(older.stdout), { version: 1, bytes: tensors[0]!.data.length / 2 + tensors[1]!.data.length }, 'an exact older version, sliced')

    // The full copy B pulled is served by B and advertised: a late joiner can pull it from either agent.
    await advertised(a, b, 'm', 2, 'A sees B advertise its pulled copy of m v2')
    const missing = await ctl(b, 'weights', 'pull', '--model', 'm', '--version', '7')
    t.match(JSON.parse(missing.stdout || missing.stderr), { error: { code: 'ERR_WEIGHTS_NOT_FOUND', message: /version 7 of model m/ } })
  })

  t.test('a partial holder advertises its layout; a mesh pull of that layout takes it from there, and another layout from the full holder', async t => {
    const mesh = await startTestMesh(t, { nodes: 3, args: ['--set', 'state.enabled=true', '--set', 'state.hostPoolBytes=33554432', '--set', 'weights.chunkBytes=262144', '--set', 'weights.durable=false'] })
    const [a, b, c] = mesh.agents as [MeshAgent, MeshAgent, MeshAgent]
    const tensors = [tensor('model.layers.0.mlp.down_proj.weight', 'bf16', [64, 512], 1), tensor('model.norm.weight', 'f32', [64], 2)]
    const file = join(mesh.dir, 'm.safetensors')
    writeSafetensors(file, tensors)
    t.equal((await runNode(agentctlMain, ['--socket', a.socketPath, 'weights', 'publish', '--model', 'm', '--version', '1', '--from-safetensors', file])).code, 0)
    const rules = [{ pattern: 'down_proj', dim: 1 }]
    const aAddress = (await a.client.status()).weights!.address
    const bAddress = (await b.client.status()).weights!.address
    const pull = (agent: MeshAgent, body: Record<string, unknown>): Promise<{ from: string, bytes: number, keys: string[] }> => agent.client.call('POST', '/v1/weights/pull', { model: 'm', version: 1, ...body }) as Promise<{ from: string, bytes: number, keys: string[] }>
    await pull(b, { from: aAddress, layout: { tp: 2, rank: 0, rules } })
    const layoutOf = (await b.client.call('GET', '/v1/weights') as { versions: Array<{ partial?: { layout: string } }> }).versions[0]!.partial!.layout
    // Its slices as held, not as being pulled (a swarm seed's entry, `pulling`, is no source for a pull).
    await mesh.waitFor([c], peers => peers.some(p => p.peerId === b.peerId && p.record?.weights?.some(w => w.version === 1 && w.layout === layoutOf && w.pulling !== true) === true), 15_000, 'C sees B advertise its slices as held')
    await mesh.waitFor([c], peers => peers.some(p => p.peerId === a.peerId && p.record?.weights?.some(w => w.version === 1 && w.layout === undefined) === true), 15_000, 'C sees A advertise v1')
    const same = await pull(c, { layout: { tp: 2, rank: 0, rules } })
    t.equal(same.from, bAddress, 'the same layout and rank: from the partial holder B')
    t.equal(same.bytes, tensors[0]!.data.length / 2 + tensors[1]!.data.length)
    // A loaded machine can have C suspect A for a moment; the source is chosen among alive holders.
    await mesh.waitFor([c], peers => peers.some(p => p.peerId === a.peerId && p.state === 'alive' && p.record?.weights?.some(w => w.version === 1 && w.layout === undefined) === true), 15_000, 'C sees A alive, advertising v1')
    const other = await pull(c, { layout: { tp: 2, rank: 1, rules } })
    t.equal(other.from, aAddress, 'another rank: from the full holder A')
  })
}
