// Published versions are durable as acknowledged: real agents, restarted cleanly (SIGINT) and killed (SIGKILL)
// after the publish answered, for each source kind; a manifest start-up cannot serve is kept and reported.
import t from 'tap'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { spawnAgent, tempDir, type AgentProcess } from '../../helpers/agent-process.ts'
import { capabilities } from '../../../native/index.ts'
import { makeShm } from '../../native/helpers.ts'
import { formatKey } from '../../../agent/state/keys.ts'
import { tensor, writeSafetensors, type FixtureTensor } from './weights-fixtures.ts'
import type { WeightsRegion } from '../../../agent/weights/publisher.ts'

t.setTimeout(300_000)

type Publish = (agent: AgentProcess, version: number) => Promise<{ tensor: FixtureTensor, key: string }>

/** Each source kind publishes one 4 KiB tensor as `version` of model m; answers once the publish was acknowledged. */
const sources: Record<'keys' | 'safetensors' | 'region', Publish> = {
  async keys (agent, version) {
    const x = tensor('w', 'f32', [1024], version)
    const key = formatKey({ namespace: `m/actor${version}`, fqn: 'w', role: 'param', offsets: [0], shape: [1024], dtype: 'f32', version })
    await agent.client.call('POST', '/v1/state/offload', { tensors: [{ key, source: { kind: 'shm', name: makeShm(t, x.data), offset: 0 } }], durability: 'nvme' })
    await agent.client.weightsPublish({ model: 'm', version, source: { kind: 'keys', prefix: `m/actor${version}/` } })
    return { tensor: x, key }
  },
  async safetensors (agent, version) {
    const x = tensor('w', 'f32', [1024], version)
    const file = join(agent.stateDir, `v${version}.safetensors`)
    writeSafetensors(file, [x])
    const manifest = await agent.client.weightsPublish({ model: 'm', version, source: { kind: 'safetensors', path: file } })
    return { tensor: x, key: manifest.tensors[0]!.key }
  },
  async region (agent, version) {
    const x = tensor('w', 'f32', [1024], version)
    const region = await agent.client.call<WeightsRegion>('POST', '/v1/weights/regions', { model: 'm', version, tensors: [{ name: 'w', dtype: 'f32', shape: [1024] }] })
    writeFileSync(`/dev/shm/${region.region}`, x.data)
    const manifest = await agent.client.weightsPublish({ model: 'm', version, source: { kind: 'region', region: region.region } })
    return { tensor: x, key: manifest.tensors[0]!.key }
  },
}

/** The bytes the agent serves for `key` (onloaded into a fresh shm object). */
async function served (agent: AgentProcess, key: string, bytes: number): Promise<Buffer> {
  const name = makeShm(t, bytes)
  await agent.client.call('POST', '/v1/state/onload', { tensors: [{ key, target: { kind: 'shm', name, offset: 0 } }] })
  return readFileSync(`/dev/shm/${name}`)
}

if (!capabilities.addon.loaded) {
  t.comment(`skipped: the weights subsystem needs the native addon (${capabilities.addon.error})`)
} else {
  for (const [kind, publish] of Object.entries(sources)) {
    t.test(`a version published from ${kind} survives a clean restart and a kill -9 after the acknowledgement`, async t => {
      const stateDir = tempDir(t)
      const first = await spawnAgent(t, { stateDir })
      const v1 = await publish(first, 1)
      first.proc.kill('SIGINT')
      t.equal((await first.exited).code, 0, 'clean stop')

      const second = await spawnAgent(t, { stateDir })
      t.match((await second.client.weights()).versions, [{ model: 'm', version: 1, durable: true }], 'v1 after a clean restart')
      t.ok((await served(second, v1.key, v1.tensor.data.length)).equals(v1.tensor.data), 'with its bytes')
      const v2 = await publish(second, 2)
      second.proc.kill('SIGKILL')
      await second.exited

      const third = await spawnAgent(t, { stateDir })
      const list = await third.client.weights()
      t.same(list.versions.map(v => v.version), [1, 2], 'v1 and v2 after a kill -9')
      t.same(list.damaged, [], 'nothing damaged')
      t.ok((await served(third, v2.key, v2.tensor.data.length)).equals(v2.tensor.data), 'v2\'s bytes')
      t.ok(existsSync(join(stateDir, 'weights/m/v1.json')) && existsSync(join(stateDir, 'weights/m/v2.json')), 'both manifests on disk')
    })
  }

  t.test('a manifest whose keys are gone is kept and reported as damaged, not deleted; retiring it removes it', async t => {
    const stateDir = tempDir(t)
    const first = await spawnAgent(t, { stateDir })
    const v1 = await sources.keys(first, 1)
    // The trainer drops the keys the version references (it owns them), then the agent restarts.
    await first.client.call('POST', '/v1/state/drop', { keys: [v1.key] })
    writeFileSync(join(stateDir, 'weights/m/v2.json'), '{"model":"m",') // and a torn manifest beside it
    first.proc.kill('SIGINT')
    await first.exited

    const second = await spawnAgent(t, { stateDir })
    const list = await second.client.weights()
    t.same(list.versions, [], 'neither is served')
    t.match(list.damaged, [
      { model: 'm', version: 1, file: join(stateDir, 'weights/m/v1.json'), reason: new RegExp(`1 of 1 keys are not stored on this node \\(first: ${v1.key.replace(/[[\]]/g, '\\$&')}\\)`) },
      { model: 'm', version: 2, file: join(stateDir, 'weights/m/v2.json'), reason: /^unreadable: / },
    ])
    t.ok(existsSync(join(stateDir, 'weights/m/v1.json')), 'the manifest is still there')
    t.match(second.output(), /"version":1,.*"reason":"1 of 1 keys are not stored.*"msg":"weights version damaged/, 'the log says why')
    await t.rejects(second.client.weightsPublish({ model: 'm', version: 2, source: { kind: 'keys', prefix: 'm/' } }), { code: 'ERR_WEIGHTS_VERSION_EXISTS' }, 'a damaged version\'s number stays taken')
    await t.rejects(second.client.call('GET', '/v1/weights/m/1/manifest'), { code: 'ERR_WEIGHTS_NOT_FOUND', message: /is damaged and not served/ })
    await second.client.weightsRetire({ model: 'm', version: 1 })
    t.notOk(existsSync(join(stateDir, 'weights/m/v1.json')), 'retire removes it')
    t.same((await second.client.weights()).damaged.map(d => d.version), [2])
  })
}
