// Resharded pulls as an engine loads them, through real agents and agentctl: head counts from the
// model's config.json (published with the version, or given to the pull), vLLM's padded vocab split
// with the padded shape reported, a rank whose vocab part is all padding, and the refusals.
import t, { type Test } from 'tap'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { agentctlMain, runNode, spawnAgent, tempDir } from '../../helpers/agent-process.ts'
import { capabilities } from '../../../native/index.ts'
import { clusterKeyFile, rawSafetensorsHeader, tensor, writeSafetensors } from './weights-fixtures.ts'
import { readSafetensorsHeader } from '../../../agent/weights/publisher.ts'
import { processMemory } from '../../helpers/process-memory.ts'

const skip = capabilities.addon.loaded ? false : `the weights subsystem needs the native addon (${capabilities.addon.error})`

/** Two dev agents sharing a cluster key, with host pools of `poolBytes` and weights chunks of `chunkBytes`, and agentctl on each. */
async function twoAgents (t: Test, poolBytes: number, chunkBytes: number) {
  const dir = tempDir(t, 'agentd-w-')
  const keyFile = clusterKeyFile(dir)
  const args = (state: string): string[] => ['--dev', '--state-dir', state, '--cluster-key', keyFile, '--set', `weights.chunkBytes=${chunkBytes}`, '--set', `state.hostPoolBytes=${poolBytes}`]
  const aDir = tempDir(t); const bDir = tempDir(t)
  const [a, b] = await Promise.all([spawnAgent(t, { stateDir: aDir, args: args(aDir) }), spawnAgent(t, { stateDir: bDir, args: args(bDir) })])
  const ctl = (agent: typeof a, ...words: string[]) => runNode(agentctlMain, ['--socket', agent.socketPath, ...words])
  return { dir, a, b, ctl }
}

/** twoAgents with 16 MiB pools, a Llama-shaped model file and its config.json. */
async function twoAgentsAndModel (t: Test, withV: boolean) {
  const { dir, a, b, ctl } = await twoAgents(t, 16 * 2 ** 20, 65536)
  // 8 heads of 8, 2 kv heads, vocab 100 (vLLM pads it to 128).
  const hidden = 64; const heads = 8; const kvHeads = 2; const headDim = 8; const vocab = 100
  const tensors = [
    tensor('model.embed_tokens.weight', 'bf16', [vocab, hidden], 1),
    tensor('model.layers.0.self_attn.q_proj.weight', 'bf16', [heads * headDim, hidden], 2),
    tensor('model.layers.0.self_attn.k_proj.weight', 'bf16', [kvHeads * headDim, hidden], 3),
    ...(withV ? [tensor('model.layers.0.self_attn.v_proj.weight', 'bf16', [kvHeads * headDim, hidden], 4)] : []),
    tensor('model.norm.weight', 'f32', [hidden], 5),
  ]
  const model = join(dir, 'm.safetensors')
  writeSafetensors(model, tensors)
  const config = join(dir, 'config.json')
  writeFileSync(config, JSON.stringify({ model_type: 'llama', num_attention_heads: heads, num_key_value_heads: kvHeads, hidden_size: hidden, vocab_size: vocab }))
  return { dir, a, b, ctl, hidden, tensors, model, config }
}

t.test('publish --config, pull --preset with vLLM\'s vocab split and head counts; refusals leave nothing', { skip }, async t => {
  const { dir, a, b, ctl, hidden, tensors, model, config } = await twoAgentsAndModel(t, true)
  const address = (await a.client.status()).weights!.address!

  // Without head counts anywhere, a preset refuses before moving a byte.
  t.equal((await ctl(a, 'weights', 'publish', '--model', 'bare', '--from-safetensors', model)).code, 0)
  const refused = await ctl(b, 'weights', 'pull', '--from', address, '--model', 'bare', '--version', '0', '--preset', 'llama', '--tp', '2', '--rank', '0')
  t.equal(refused.code, 1)
  t.match(refused.stderr, /ERR_LAYOUT_INVALID.*q_proj\.weight: splitting query heads needs the head count \(--config/)
  const wrong = await ctl(b, 'weights', 'pull', '--from', address, '--model', 'bare', '--version', '0', '--preset', 'llama', '--tp', '2', '--rank', '0', '--heads', '8', '--kv-heads', '4')
  t.match(wrong.stderr, /k_proj\.weight: 16 rows make 4 heads of 4, but .*q_proj\.weight has heads of 8/, 'a wrong kv-head count is caught against the head size')
  t.same((await b.client.call('GET', '/v1/state/residency') as { keys: unknown[] }).keys, [], 'the refused pulls stored nothing')
  const usage = await ctl(b, 'weights', 'pull', '--from', address, '--model', 'bare', '--layout', config, '--tp', '2', '--rank', '0', '--engine', 'vllm')
  t.equal(usage.code, 2)
  t.match(usage.stderr, /--engine shape a --preset's split; a --layout file states its own/)
  const badEngine = await ctl(b, 'weights', 'pull', '--from', address, '--model', 'bare', '--preset', 'llama', '--tp', '2', '--rank', '0', '--engine', 'trt')
  t.match(badEngine.stderr, /--engine must be one of vllm, sglang, megatron, got "trt"/)

  // --config on the pull gives the counts.
  const withConfig = await ctl(b, '--json', 'weights', 'pull', '--from', address, '--model', 'bare', '--version', '0', '--preset', 'llama', '--tp', '2', '--rank', '1', '--config', config)
  t.equal(withConfig.code, 0, withConfig.stderr)
  t.equal(JSON.parse(withConfig.stdout).bytes, (36 * hidden + 32 * hidden + 8 * hidden * 2) * 2 + hidden * 4, 'rank 1 of 2: vocab rows 64..99 (of 64..127 padded), half the q heads, one kv head each')
  t.same(JSON.parse(withConfig.stdout).paddedShapes, { [Object.keys(JSON.parse(withConfig.stdout).paddedShapes)[0]!]: [64, hidden] })

  // The same rank's shard written to a file, as an engine loads it: sliced shapes under the version's names.
  const shardFile = join(dir, 'rank1.safetensors')
  const shard = await ctl(b, 'weights', 'pull', '--from', address, '--model', 'bare', '--version', '0', '--preset', 'llama', '--tp', '2', '--rank', '1', '--config', config, '--out', shardFile)
  t.equal(shard.code, 0, shard.stderr)
  const header = await readSafetensorsHeader(shardFile)
  t.same(header.tensors.map(x => [x.name, x.shape]).sort(), [
    ['model.embed_tokens.weight', [36, hidden]],
    ['model.layers.0.self_attn.k_proj.weight', [8, hidden]],
    ['model.layers.0.self_attn.q_proj.weight', [32, hidden]],
    ['model.layers.0.self_attn.v_proj.weight', [8, hidden]],
    ['model.norm.weight', [hidden]],
  ])
  t.match(header.metadata, { 'agentd.model': 'bare', 'agentd.version': '0', 'agentd.layout': 'llama', 'agentd.tp': '2', 'agentd.rank': '1', 'agentd.engine': 'vllm' })
  t.same(JSON.parse(header.metadata['agentd.padded_shapes']!), { 'model.embed_tokens.weight': [64, hidden] })
  const bytes = readFileSync(shardFile)
  const q = tensors[1]!
  const entry = header.tensors.find(x => x.name === q.name)!
  t.ok(bytes.subarray(header.dataStart + entry.start, header.dataStart + entry.end).equals(q.data.subarray(32 * hidden * 2, 64 * hidden * 2)), 'rank 1\'s q heads, byte-exact')

  // Published with --config, the version carries them; rank 7 of 8's vocab part is all padding.
  t.equal((await ctl(a, 'weights', 'publish', '--model', 'm', '--from-safetensors', model, '--config', config)).code, 0)
  const manifest = await a.client.call('GET', '/v1/weights/m/0/manifest') as { metadata: Record<string, string> }
  t.match(manifest.metadata, { num_attention_heads: '8', num_key_value_heads: '2', vocab_size: '100' })
  const last = await b.client.call('POST', '/v1/weights/pull', { from: address, model: 'm', version: 0, layout: { tp: 8, rank: 7, preset: 'llama' } }) as { keys: string[], tensors: number, paddedShapes?: Record<string, number[]> }
  t.equal(last.tensors, 5)
  t.equal(last.keys.length, 4, 'the empty vocab slice stores no key')
  t.same(Object.values(last.paddedShapes ?? {}), [[16, hidden]], 'its padded shape is told')
  t.match(Object.keys(last.paddedShapes ?? {})[0], /embed_tokens\.weight/)
  const first = await b.client.call('POST', '/v1/weights/pull', { from: address, model: 'm', version: 0, layout: { tp: 8, rank: 6, preset: 'llama', engine: 'megatron' } }) as { keys: string[], paddedShapes?: Record<string, number[]> }
  t.same(Object.values(first.paddedShapes ?? {}), [[128, hidden]], 'Megatron pads 100 to 1024 (128 × tp): 128 rows a rank, rank 6\'s all padding')
})

t.test('--all-ranks --out-dir: every rank\'s shard file from one read of the source; the slices do not stay', { skip }, async t => {
  const { dir, a, b, ctl, hidden, tensors, model, config } = await twoAgentsAndModel(t, false)
  t.equal((await ctl(a, 'weights', 'publish', '--model', 'm', '--from-safetensors', model, '--config', config)).code, 0)
  const address = (await a.client.status()).weights!.address!

  for (const [words, message] of [
    [['--tp', '2', '--all-ranks'], /--all-ranks needs --out-dir DIR/],
    [['--tp', '2', '--rank', '0', '--all-ranks', '--out-dir', dir], /--all-ranks writes every rank: leave out --rank/],
    [['--tp', '2', '--rank', '0', '--out-dir', dir], /--out-dir needs --all-ranks/],
    [['--all-ranks', '--out-dir', dir], /--all-ranks needs --layout F or --preset P, and --tp/],
  ] as Array<[string[], RegExp]>) {
    const refused = await ctl(b, 'weights', 'pull', '--from', address, '--model', 'm', '--preset', 'llama', ...words)
    t.equal(refused.code, 2, words.join(' '))
    t.match(refused.stderr, message)
  }

  // tp 8: vLLM pads vocab 100 to 128, 16 rows a rank: rank 6 holds rows 96..99, rank 7's part is all padding.
  const outDir = join(dir, 'shards')
  const run = await ctl(b, '--json', 'weights', 'pull', '--from', address, '--model', 'm', '--version', '0', '--preset', 'llama', '--tp', '8', '--all-ranks', '--out-dir', outDir)
  t.equal(run.code, 0, run.stderr || run.stdout)
  const files = (JSON.parse(run.stdout) as { files: string[] }).files
  t.same(files, [0, 1, 2, 3, 4, 5, 6, 7].map(r => join(outDir, `m-v0-tp8-rank${r}.safetensors`)), 'one file a rank')
  t.equal((JSON.parse(run.stdout) as { bytes: number }).bytes, tensors.reduce((sum, x) => sum + x.data.length, 0), 'the source was read once, whole')
  for (const [rank, file] of files.entries()) {
    const header = rawSafetensorsHeader(file)
    t.match(header.metadata, { 'agentd.model': 'm', 'agentd.version': '0', 'agentd.layout': 'llama', 'agentd.tp': '8', 'agentd.rank': String(rank), 'agentd.engine': 'vllm' })
    const rows = rank < 6 ? 16 : rank === 6 ? 4 : 0
    t.same(header.tensors.map(x => [x.name, x.shape]).sort(), [
      ['model.embed_tokens.weight', [rows, hidden]],
      ['model.layers.0.self_attn.k_proj.weight', [8, hidden]],
      ['model.layers.0.self_attn.q_proj.weight', [8, hidden]],
      ['model.norm.weight', [hidden]],
    ], `rank ${rank}: ${rows} vocab rows of its 16 (vLLM's padded split), one q head, the kv head it serves`)
    if (rows < 16) t.same(JSON.parse(header.metadata['agentd.padded_shapes']!), { 'model.embed_tokens.weight': [16, hidden] }, `rank ${rank}: the engine's parameter is 16 rows, ${16 - rows} of them padding`)
    else t.equal(header.metadata['agentd.padded_shapes'], undefined, `rank ${rank}: no padding`)
    const bytes = readFileSync(file)
    const slice = (name: string): Buffer => { const e = header.tensors.find(x => x.name === name)!; return bytes.subarray(header.dataStart + e.start, header.dataStart + e.end) }
    t.ok(slice('model.layers.0.self_attn.q_proj.weight').equals(tensors[1]!.data.subarray(rank * 8 * hidden * 2, (rank + 1) * 8 * hidden * 2)), `rank ${rank}'s q head, byte-exact`)
    const kvHead = Math.floor(rank / 4)
    t.ok(slice('model.layers.0.self_attn.k_proj.weight').equals(tensors[2]!.data.subarray(kvHead * 8 * hidden * 2, (kvHead + 1) * 8 * hidden * 2)), `rank ${rank}'s kv head ${kvHead}, replicated as vLLM does`)
    t.ok(slice('model.embed_tokens.weight').equals(tensors[0]!.data.subarray(rank * 16 * hidden * 2, (rank * 16 + rows) * hidden * 2)), `rank ${rank}'s vocab rows, byte-exact${rows === 0 ? ' (an empty tensor)' : ''}`)
  }
  const held = (await b.client.call('GET', '/v1/state/residency') as { keys: Array<{ key: string }> }).keys.map(k => k.key)
  t.equal(held.length, tensors.length, 'afterwards the agent holds the version whole, and no rank\'s slices')
})

t.test('--all-ranks of a model 12x the pools: the version spills to NVMe, each rank is sliced from it, byte-exact', { skip }, async t => {
  const { dir, a, b, ctl } = await twoAgents(t, 4 * 2 ** 20, 262144)
  // 48 MiB in 48 tensors of 1 MiB against 4 MiB pools; each rank's half of every tensor by columns.
  const tensors = Array.from({ length: 48 }, (_, i) => tensor(`model.layers.${i}.mlp.down_proj.weight`, 'bf16', [512, 1024], 10 + i))
  const model = join(dir, 'big.safetensors')
  writeSafetensors(model, tensors)
  const layout = join(dir, 'layout.json')
  writeFileSync(layout, JSON.stringify({ rules: [{ pattern: 'down_proj', dim: 1 }] }))
  const published = await ctl(a, 'weights', 'publish', '--model', 'big', '--from-safetensors', model)
  t.equal(published.code, 0, published.stderr)
  const address = (await a.client.status()).weights!.address!

  const outDir = join(dir, 'shards')
  const peakBefore = processMemory(b.proc.pid!).peak
  const run = await ctl(b, '--json', 'weights', 'pull', '--from', address, '--model', 'big', '--version', '0', '--layout', layout, '--tp', '2', '--all-ranks', '--out-dir', outDir)
  t.equal(run.code, 0, run.stderr || run.stdout)
  // The version (48 MiB) and both shards (24 MiB each) pass through B's 4 MiB pool: none of them is ever in its memory whole.
  const growth = processMemory(b.proc.pid!).peak - peakBefore
  t.ok(growth < 16 * 2 ** 20, `B's peak RSS grew ${(growth / 2 ** 20).toFixed(1)} MiB writing every rank's shard of a 48 MiB model (bound 16 MiB)`)
  const files = (JSON.parse(run.stdout) as { files: string[] }).files
  t.equal(files.length, 2, 'one file a rank')
  for (const [rank, file] of files.entries()) {
    const header = rawSafetensorsHeader(file)
    t.equal(header.tensors.length, 48)
    t.ok(header.tensors.every(x => x.shape[0] === 512 && x.shape[1] === 512), `rank ${rank}: every tensor's half of the columns`)
    const bytes = readFileSync(file)
    for (const i of [0, 23, 47]) {
      const e = header.tensors.find(x => x.name === tensors[i]!.name)!
      const half = Buffer.concat(Array.from({ length: 512 }, (_, r) => tensors[i]!.data.subarray(r * 2048 + rank * 1024, r * 2048 + rank * 1024 + 1024)))
      t.ok(bytes.subarray(header.dataStart + e.start, header.dataStart + e.end).equals(half), `rank ${rank}: ${tensors[i]!.name} byte-exact`)
    }
  }
  const residency = await b.client.call('GET', '/v1/state/residency?limit=1000') as { keys: Array<{ key: string, tier: string }> }
  t.equal(residency.keys.length, 48, 'afterwards the agent holds the version whole, and no rank\'s slices')
  t.ok(residency.keys.filter(k => k.tier === 'nvme').length >= 40, `most of it on NVMe (${residency.keys.filter(k => k.tier === 'nvme').length} of 48 keys): the pool holds 4 MiB`)
})

t.test('--out with part of a version already here as keys copies that part from them and fetches only the rest; the file is whole', { skip }, async t => {
  const { dir, a, b, ctl } = await twoAgents(t, 4 * 2 ** 20, 262144)
  const tensors = Array.from({ length: 24 }, (_, i) => tensor(`model.layers.${i}.mlp.down_proj.weight`, 'bf16', [512, 1024], 60 + i)) // 24 MiB, 6x the pools
  const model = join(dir, 'm.safetensors')
  writeSafetensors(model, tensors)
  t.equal((await ctl(a, 'weights', 'publish', '--model', 'm', '--from-safetensors', model)).code, 0)
  const address = (await a.client.status()).weights!.address!
  const first = await b.client.weightsPull({ from: address, model: 'm', version: 0 })
  // What a pull cut off after 10 tensors keeps (test/agent/weights/pull-window.test.ts cuts one for real): drop the other 14.
  await b.client.call('POST', '/v1/state/drop', { keys: first.keys.slice(10) })
  const out = join(dir, 'm-copy.safetensors')
  const run = await ctl(b, '--json', 'weights', 'pull', '--from', address, '--model', 'm', '--version', '0', '--out', out)
  t.equal(run.code, 0, run.stderr)
  const result = JSON.parse(run.stdout) as { bytes: number, bytesReceived: number }
  t.equal(result.bytes, 24 * 2 ** 20)
  t.equal(result.bytesReceived, 14 * 2 ** 20, 'only the 14 missing tensors were fetched')
  const header = rawSafetensorsHeader(out)
  const bytes = readFileSync(out)
  for (const i of [0, 9, 10, 23]) {
    const e = header.tensors.find(x => x.name === tensors[i]!.name)!
    t.ok(bytes.subarray(header.dataStart + e.start, header.dataStart + e.end).equals(tensors[i]!.data), `${tensors[i]!.name} byte-exact (${i < 10 ? 'kept' : 'fetched'})`)
  }
  t.equal((await b.client.call('GET', '/v1/state/residency') as { keys: unknown[] }).keys.length, 10, 'a pull into a file stores nothing: the agent holds the 10 keys it held')
  const human = await ctl(b, 'weights', 'pull', '--from', address, '--model', 'm', '--version', '0')
  t.match(human.stdout, /pulled m v0: 24 tensors, 24\.0 MiB in [\d.]+ s \([^)]+\), 10\.0 MiB of it already here/)
})

t.test('--out: the pulling agent killed halfway and restarted; the repeat fetches only what the file lacks', { skip }, async t => {
  const dir = tempDir(t, 'agentd-w-')
  const keyFile = clusterKeyFile(dir)
  const args = (state: string, pool: number): string[] => ['--dev', '--state-dir', state, '--cluster-key', keyFile, '--set', 'weights.chunkBytes=262144', '--set', `state.hostPoolBytes=${pool}`]
  const aDir = tempDir(t); const bDir = tempDir(t)
  const a = await spawnAgent(t, { stateDir: aDir, args: args(aDir, 128 * 2 ** 20) })
  // 128 MiB, 32x B's pool: long enough to be cut halfway on a fast machine.
  const tensors = Array.from({ length: 64 }, (_, i) => tensor(`model.layers.${i}.mlp.down_proj.weight`, 'bf16', [1024, 1024], 200 + i))
  const model = join(dir, 'm.safetensors')
  writeSafetensors(model, tensors)
  t.equal((await runNode(agentctlMain, ['--socket', a.socketPath, 'weights', 'publish', '--model', 'm', '--from-safetensors', model])).code, 0)
  const address = (await a.client.status()).weights!.address!
  const out = join(dir, 'copy.safetensors')
  const pullArgs = (b: { socketPath: string }): string[] => ['--socket', b.socketPath, '--json', 'weights', 'pull', '--from', address, '--model', 'm', '--version', '0', '--streams', '1', '--out', out]

  const b1 = await spawnAgent(t, { stateDir: bDir, args: args(bDir, 4 * 2 ** 20) })
  const cut = runNode(agentctlMain, pullArgs(b1))
  // Kill B (SIGKILL: no cleanup) once its journal lists a quarter of the model.
  const journal = `${out}.pull-journal`
  for (let lines = 0; lines < 128 && !existsSync(out);) {
    await new Promise(resolve => setTimeout(resolve, 2))
    lines = existsSync(journal) ? readFileSync(journal, 'utf8').split('\n').length - 2 : 0
  }
  t.notOk(existsSync(out), 'the pull was cut before it completed')
  b1.proc.kill('SIGKILL')
  await b1.exited
  t.not((await cut).code, 0, 'the cut pull failed')
  const journaled = readFileSync(journal, 'utf8').trim().split('\n').slice(1).flatMap(l => { try { return [JSON.parse(l) as { l: number }] } catch { return [] } }).reduce((s, p) => s + p.l, 0)

  const b2 = await spawnAgent(t, { stateDir: bDir, args: args(bDir, 4 * 2 ** 20) })
  const repeat = await runNode(agentctlMain, pullArgs(b2))
  t.equal(repeat.code, 0, repeat.stderr)
  const result = JSON.parse(repeat.stdout) as { bytes: number, bytesReceived: number, files: string[] }
  t.equal(result.bytes, 128 * 2 ** 20)
  t.ok(result.bytesReceived <= result.bytes - journaled + 2 ** 20 && result.bytesReceived < result.bytes, `the repeat fetched ${result.bytesReceived / 2 ** 20} MiB of 128 (${journaled / 2 ** 20} MiB journaled before the kill)`)
  t.same(result.files, [out])
  const header = rawSafetensorsHeader(out)
  const bytes = readFileSync(out)
  t.ok(tensors.every(x => { const e = header.tensors.find(h => h.name === x.name)!; return bytes.subarray(header.dataStart + e.start, header.dataStart + e.end).equals(x.data) }), 'every tensor byte-exact')
})

