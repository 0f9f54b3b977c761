// UCX pulls between separate agent processes (UCX_TLS=tcp, where UCX detects a dead peer itself): a whole
// pull and a row-parallel (gathered) one, byte-exact, written into safetensors files; the serving agent
// SIGKILLed mid-pull: the pull fails with a coded error within seconds (a get from a dead peer never hangs),
// the puller lists no version, and a repeat from another full holder fetches only what the file lacks.
import t from 'tap'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { spawnAgent, tempDir, type AgentProcess } from '../../helpers/agent-process.ts'
import { capabilities } from '../../../native/index.ts'
import { clusterKeyFile, rawSafetensorsHeader, tensor, writeSafetensors, type FixtureTensor } from './weights-fixtures.ts'

const skip = !capabilities.addon.loaded
  ? `the native addon is not built (${capabilities.addon.error})`
  : !capabilities.ucx.compiled ? 'the native addon was built without UCX (install libucx-dev and rebuild: npm run build:native)' : false
if (skip !== false) t.comment(`skipping the UCX agent tests: ${skip}`)

const MiB = 2 ** 20

/** Every tensor of `expected` in the safetensors file `file`, byte-exact. */
function fileHolds (file: string, expected: Array<{ name: string, data: Buffer }>): boolean {
  const header = rawSafetensorsHeader(file)
  const bytes = readFileSync(file)
  return expected.every(x => {
    const e = header.tensors.find(h => h.name === x.name)
    return e !== undefined && bytes.subarray(header.dataStart + e.start, header.dataStart + e.end).equals(x.data)
  })
}

t.test('between agent processes over UCX: whole and gathered pulls byte-exact; the server SIGKILLed mid-pull fails the pull with a code, and a repeat from another holder completes it', { skip }, async t => {
  const dir = tempDir(t, 'agentd-ucx-')
  const keyFile = clusterKeyFile(dir)
  const start = (poolMiB: number): Promise<AgentProcess> => {
    const state = tempDir(t)
    return spawnAgent(t, {
      stateDir: state,
      env: { UCX_TLS: 'tcp' },
      args: ['--dev', '--state-dir', state, '--cluster-key', keyFile, '--set', 'mesh.enabled=false', '--set', 'weights.chunkBytes=262144',
        '--set', `state.hostPoolBytes=${poolMiB * MiB}`, '--set', 'weights.transports=["ucx","tcp"]', '--set', 'weights.ucxOverTcp=true'],
    })
  }
  // 128 MiB in 64 tensors of 2 MiB: A and B pin it whole for UCX readers (at most half their pools).
  const tensors: FixtureTensor[] = Array.from({ length: 64 }, (_, i) => tensor(`model.layers.${i}.mlp.down_proj.weight`, 'bf16', [1024, 1024], 300 + i))
  const model = join(dir, 'm.safetensors')
  writeSafetensors(model, tensors)
  const [a, b, c] = await Promise.all([start(320), start(320), start(64)])
  const { version } = await a.client.weightsPublish({ model: 'm', source: { kind: 'safetensors', path: model } })
  const served = (await a.client.status()).weights!
  t.same(served.transports, ['ucx', 'tcp'], 'status: A serves UCX and TCP')
  const fromA = served.address
  const fromB = (await b.client.status()).weights!.address!

  const held = await b.client.weightsPull({ from: fromA, model: 'm', version, streams: 2 })
  t.equal(held.ucx?.bytes, 128 * MiB, 'B pulled every byte over UCX')
  t.match(held.ucx?.transports, [/^tcp\//], `carried by ${held.ucx?.transports.join(', ')}`)

  // Row-parallel rank 1 of tp 2 from B: 1024 runs of 1 KiB per tensor, each piece one gathered get, checked by CHECKSUM.
  const sliced = join(dir, 'rank1.safetensors')
  const r1 = await c.client.weightsPull({ from: fromB, model: 'm', version, streams: 2, layout: { tp: 2, rank: 1, rules: [{ pattern: 'down_proj', dim: 1 }] }, out: { path: sliced } })
  t.equal(r1.ucx?.bytes, 64 * MiB, 'every gathered slice over UCX')
  t.equal(r1.refetchedPieces, 0)
  const columns = tensors.map(x => ({ name: x.name, data: Buffer.concat(Array.from({ length: 1024 }, (_, row) => x.data.subarray(row * 2048 + 1024, row * 2048 + 2048))) }))
  t.ok(fileHolds(sliced, columns), 'every slice byte-exact')

  // A whole pull into a file from A, A SIGKILLed once a quarter of it is journaled.
  const out = join(dir, 'copy.safetensors')
  const journal = `${out}.pull-journal`
  const cut = c.client.weightsPull({ from: fromA, model: 'm', version, streams: 1, out: { path: out } })
  const settled = cut.then(() => 'completed', (err: { code?: string }) => err.code ?? 'no code')
  for (let lines = 0; lines < 128 && !existsSync(out);) {
    await new Promise(resolve => setTimeout(resolve, 2))
    lines = existsSync(journal) ? readFileSync(journal, 'utf8').split('\n').length - 2 : 0
  }
  t.notOk(existsSync(out), 'the pull was cut before it completed')
  const killedAt = performance.now()
  a.proc.kill('SIGKILL')
  const code = await settled
  const failedAfterMs = performance.now() - killedAt
  t.equal(code, 'ERR_WEIGHTS_TRANSFER', 'the pull failed with a coded error')
  t.ok(failedAfterMs < 15_000, `within ${Math.round(failedAfterMs)} ms of the kill`)
  t.notOk(existsSync(out), 'no file under the final name')
  t.same((await c.client.weights()).versions.filter(v => v.model === 'm'), [], 'the puller lists no version of m')

  const repeat = await c.client.weightsPull({ from: fromB, model: 'm', version, streams: 2, out: { path: out } })
  t.ok(repeat.bytesReceived < 128 * MiB, `the repeat from B fetched ${repeat.bytesReceived / MiB} MiB of 128`)
  t.equal(repeat.ucx?.bytes, repeat.bytesReceived, 'all of it over UCX')
  t.ok(fileHolds(out, tensors), 'every tensor byte-exact')
})
