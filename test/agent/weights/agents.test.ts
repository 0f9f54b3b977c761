// Two real dev agents sharing a cluster key (and one with another key): publish with agentctl, pull over the data port, onload the pulled keys.
import t from 'tap'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { agentctlMain, runNode, spawnAgent, tempDir } from '../../helpers/agent-process.ts'
import { capabilities } from '../../../native/index.ts'
import { makeShm } from '../../native/helpers.ts'
import { clusterKeyFile, tensor, writeSafetensors } from './weights-fixtures.ts'
import { readSafetensorsHeader } from '../../../agent/weights/publisher.ts'

if (!capabilities.addon.loaded) {
  t.comment(`skipped: the weights subsystem needs the native addon (${capabilities.addon.error})`)
} else {
  t.test('agentctl weights publish on A, pull on B (full and tp 2), onload on B; a third agent with another key is refused', async t => {
    const dir = tempDir(t, 'agentd-w-')
    const keyFile = clusterKeyFile(dir)
    const otherKey = clusterKeyFile(dir, 'other.key')
    const args = (state: string, key: string): string[] => ['--dev', '--state-dir', state, '--cluster-key', key, '--set', 'weights.chunkBytes=262144', '--set', 'state.hostPoolBytes=67108864']
    const aDir = tempDir(t); const bDir = tempDir(t); const cDir = tempDir(t)
    const a = await spawnAgent(t, { stateDir: aDir, args: args(aDir, keyFile) })
    const b = await spawnAgent(t, { stateDir: bDir, args: args(bDir, keyFile) })
    const c = await spawnAgent(t, { stateDir: cDir, args: args(cDir, otherKey) })
    const ctl = (agent: typeof a, ...words: string[]): Promise<{ code: number | null, stdout: string, stderr: string }> => runNode(agentctlMain, ['--socket', agent.socketPath, ...words])
    const tensors = [tensor('model.layers.0.mlp.down_proj.weight', 'bf16', [64, 512], 1), tensor('model.norm.weight', 'f32', [64], 2)]
    const file = join(dir, 'm.safetensors')
    writeSafetensors(file, tensors)

    const published = await ctl(a, '--json', 'weights', 'publish', '--model', 'm', '--from-safetensors', file)
    t.equal(published.code, 0, published.stderr)
    t.match(JSON.parse(published.stdout), { model: 'm', version: 0, tensors: 2, durable: true })
    const address = (await a.client.status()).weights?.address
    t.match(address, /^127\.0\.0\.1:\d+$/, 'status reports the data address')

    const pulled = await ctl(b, '--json', 'weights', 'pull', '--from', address!, '--model', 'm', '--streams', '2')
    t.equal(pulled.code, 0, pulled.stderr)
    const result = JSON.parse(pulled.stdout) as Record<string, unknown>
    t.same(Object.keys(result).sort(), ['bytes', 'bytesReceived', 'seconds', 'sources', 'tensors', 'version'])
    t.match(result, { version: 0, bytes: tensors[0]!.data.length + tensors[1]!.data.length, tensors: 2 })

    const out = join(dir, 'copy.safetensors')
    const written = await ctl(b, 'weights', 'pull', '--from', address!, '--model', 'm', '--version', '0', '--out', out)
    t.equal(written.code, 0, written.stderr)
    const header = await readSafetensorsHeader(out)
    const bytes = readFileSync(out)
    for (const x of tensors) {
      const entry = header.tensors.find(e => e.name === x.name)!
      t.ok(bytes.subarray(header.dataStart + entry.start, header.dataStart + entry.end).equals(x.data), `--out holds ${x.name}`)
    }
    t.match(written.stdout, /pulled m v0: 2 tensors/)

    // A rollout worker onloads the pulled key with the existing state API.
    const shm = makeShm(t, tensors[0]!.data.length)
    await b.client.call('POST', '/v1/state/onload', { tensors: [{ key: 'weights/m/model.layers.0.mlp.down_proj.weight:param@[0,0]/[64,512]:bf16#v0', target: { kind: 'shm', name: shm, offset: 0 } }] })
    t.ok(readFileSync(`/dev/shm/${shm}`).equals(tensors[0]!.data), 'onloaded bytes equal the published tensor')

    const sliced = await ctl(b, '--json', 'weights', 'pull', '--from', address!, '--model', 'm', '--version', '0', '--preset', 'llama', '--tp', '2', '--rank', '1')
    t.equal(sliced.code, 0, sliced.stderr)
    t.equal(JSON.parse(sliced.stdout).bytes, tensors[0]!.data.length / 2 + tensors[1]!.data.length, 'rank 1 of 2: half the row-parallel tensor plus the replicated norm')

    // D (same key) pulls rank 1 from B (which holds the whole version too), then serves exactly those slices.
    const dDir = tempDir(t)
    const d = await spawnAgent(t, { stateDir: dDir, args: args(dDir, keyFile) })
    const bAddress = (await b.client.status()).weights?.address
    const fromB = await d.client.call('POST', '/v1/weights/pull', { from: bAddress, model: 'm', version: 0, layout: { tp: 2, rank: 1, preset: 'llama' } }) as { keys: string[], bytesReceived: number }
    t.equal(fromB.bytesReceived, tensors[0]!.data.length / 2 + tensors[1]!.data.length)
    const onloaded = async (agent: typeof a, k: string, bytes: number): Promise<Buffer> => {
      const name = makeShm(t, bytes)
      await agent.client.call('POST', '/v1/state/onload', { tensors: [{ key: k, target: { kind: 'shm', name, offset: 0 } }] })
      return readFileSync(`/dev/shm/${name}`)
    }
    const half = tensors[0]!.data.length / 2
    t.ok((await onloaded(d, fromB.keys[0]!, half)).equals(await onloaded(b, fromB.keys[0]!, half)), 'the slice D pulled from B equals B\'s')
    const dAddress = (await d.client.status()).weights?.address
    const whole = await ctl(b, '--json', 'weights', 'pull', '--from', dAddress!, '--model', 'm', '--version', '0')
    t.match(JSON.parse(whole.stdout || whole.stderr), { error: { code: 'ERR_WEIGHTS_NOT_FOUND', message: /holds only the tp 2 rank 1 slices/ } }, 'D refuses the whole version')
    t.match((await ctl(d, 'weights', 'list')).stdout, /m\s+0\s+2\s+\S+ \S+\s+tp 2 rank 1 \(tp2-r1-/, 'D lists what it holds')

    const list = await ctl(a, 'weights', 'list')
    t.match(list.stdout, /m\s+0\s+2/)
    const refused = await ctl(c, '--json', 'weights', 'pull', '--from', address!, '--model', 'm')
    t.not(refused.code, 0)
    t.match(JSON.parse(refused.stdout || refused.stderr), { error: { code: 'ERR_WEIGHTS_AUTH' } })
    t.equal((await a.client.health()).ok, true, 'A still serves after refusing C')

    const retired = await ctl(a, 'weights', 'retire', '--model', 'm', '--version', '0')
    t.equal(retired.code, 0, retired.stderr)
    const gone = await ctl(b, '--json', 'weights', 'pull', '--from', address!, '--model', 'm', '--version', '0')
    t.match(JSON.parse(gone.stdout || gone.stderr), { error: { code: 'ERR_WEIGHTS_RETIRED' } })
  })

  t.test('regions on a real agent: discard, zero-copy publish shown by inspect residency, none left after a shutdown or a crash', async t => {
    const dir = tempDir(t)
    const args = ['--dev', '--state-dir', dir, '--set', 'weights.chunkBytes=262144', '--set', 'state.hostPoolBytes=67108864']
    const a = await spawnAgent(t, { stateDir: dir, args })
    const ctl = (...words: string[]): Promise<{ code: number | null, stdout: string, stderr: string }> => runNode(agentctlMain, ['--socket', a.socketPath, ...words])
    const w = tensor('model.norm.weight', 'f32', [4096], 3)
    const spec = [{ name: w.name, dtype: w.dtype, shape: w.shape }]
    const discarded = await a.client.weightsRegion({ model: 'r', tensors: spec })
    t.same(await a.client.weightsDiscardRegion(discarded.region), { discarded: true })
    t.notOk(existsSync(`/dev/shm/${discarded.region}`), 'DELETE /v1/weights/regions/:region removes it')
    await t.rejects(a.client.weightsDiscardRegion(discarded.region), { code: 'ERR_WEIGHTS_NOT_FOUND' })

    const region = await a.client.weightsRegion({ model: 'r', tensors: spec })
    t.equal(region.version, 0, 'the discarded version is free again')
    writeFileSync(`/dev/shm/${region.region}`, w.data)
    const published = await ctl('weights', 'publish', '--model', 'r', '--from-region', region.region)
    t.equal(published.code, 0, published.stderr)
    const residency = await ctl('inspect', 'residency', '--prefix', 'weights/r/')
    t.match(residency.stdout, new RegExp(`host \\(shm ${region.region}\\)`), 'inspect residency shows the key in the region')
    t.match(residency.stdout, /1 adopted shm region\(s\) outside the pool/)

    const open = await a.client.weightsRegion({ model: 'r', tensors: spec })
    a.proc.stdin!.end() // a clean shutdown
    t.equal((await a.exited).code, 0)
    t.notOk(existsSync(`/dev/shm/${open.region}`), 'a shutdown removes regions handed out and never published')

    const b = await spawnAgent(t, { stateDir: dir, args })
    t.match(await b.client.call('GET', '/v1/weights'), { versions: [{ model: 'r', version: 0 }] }, 'the region-published version is back from NVMe')
    const left = await b.client.weightsRegion({ model: 'r', tensors: spec })
    b.proc.kill('SIGKILL')
    await b.exited
    t.ok(existsSync(`/dev/shm/${left.region}`), 'a crash leaves its region behind ...')
    await spawnAgent(t, { stateDir: dir, args })
    t.notOk(existsSync(`/dev/shm/${left.region}`), '... which the next start of the same agent removes')
  })
}
