/**
 * agentctl weights pull: the agent pulls a version (or one tensor-parallel
 * rank's slices of it) from another agent (--from, or a holder the agent
 * finds in its mesh view) into its StateManager, where
 * rollout workers onload the keys. A progress bar (bytes, rate, time left) on
 * a terminal unless --quiet; --json prints { version, bytes, seconds, tensors }.
 * --out writes the version (or the rank's shard) to a safetensors file
 * instead, straight from the network (the agent stores nothing; a repeat
 * resumes what a stopped pull left); --all-ranks --out-dir writes every
 * rank's shard file from one read of the source (writeEveryRank).
 */
import { mkdir, readFile } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import type { PullResult } from '../../agent/weights/puller.ts'
import type { PullBody } from '../../agent/api/wire/weights.ts'
import { AgentError } from '../../core/errors.ts'
import { UsageError, type Command, type CommandContext } from './command.ts'
import { formatBytes } from './table.ts'
import { layoutPresetNames } from '../../agent/weights/layout-presets.ts'
import { parseVersion, readModelConfig } from './weights-publish.ts'
import { presetOptionsOf } from '../../agent/weights/model-config.ts'
import { vocabEngines } from '../../agent/weights/reshard.ts'
import { choiceFlag } from './flags.ts'
import { followWeightsProgress } from './weights-progress.ts'

const positiveInt = (name: string, text: string | undefined): number | undefined => {
  if (text === undefined) return undefined
  if (!/^[1-9]\d*$/.test(text)) throw new UsageError(`--${name} must be a positive integer, got "${text}"`)
  return Number(text)
}

/**
 * --all-ranks: every rank's shard file from the version this agent now holds
 * whole (one read of the source): rank by rank, the agent pulls that rank's
 * slices from its own data server (local copies, no network) straight into
 * the rank's file; nothing more is stored.
 */
async function writeEveryRank (
  { client, signal }: Pick<CommandContext, 'client' | 'signal'>,
  o: { model: string, version: number, tp: number, dir: string, layoutOf(rank: number): PullBody['layout'], metadata: Record<string, string> },
): Promise<string[]> {
  const own = (await client.status()).weights?.address
  if (own === undefined) throw new AgentError('ERR_UNAVAILABLE', 'the agent reports no weights data address: its weights subsystem is not running')
  await mkdir(o.dir, { recursive: true })
  const files: string[] = []
  for (let rank = 0; rank < o.tp; rank++) {
    const path = join(o.dir, `${o.model}-v${o.version}-tp${o.tp}-rank${rank}.safetensors`)
    const result = await client.weightsPull({ model: o.model, version: o.version, from: own, layout: o.layoutOf(rank), out: { path, overwrite: true, metadata: o.metadata } }, { signal })
    files.push(result.file!)
  }
  return files
}

export const weightsPullCommand: Command = {
  summary: 'pull a version (or this rank\'s resharded slices) from another agent into this agent\'s StateManager, or into a safetensors file',
  usage: '[--from HOST:PORT] --model M [--version N|latest] [--layout F.json | --preset llama|qwen] [--tp T --rank R] [--config config.json | --heads H --kv-heads K] [--engine vllm|sglang|megatron] [--streams S] [--out F.safetensors | --all-ranks --out-dir DIR] [--quiet]',
  options: {
    from: { type: 'string', value: 'HOST:PORT', description: 'the serving agent\'s data address; default: an alive agent that advertises the version in the mesh' },
    model: { type: 'string', value: 'M', description: 'the model\'s name' },
    version: { type: 'string', value: 'N|latest', description: 'the version to pull; default latest (the highest one served)' },
    layout: { type: 'string', value: 'F.json', description: 'pull only this rank\'s slices, by the rules in F ({ "rules": [...] }); needs --tp and --rank', complete: 'file' },
    preset: { type: 'string', description: 'like --layout, with the built-in rules of a model family', complete: layoutPresetNames },
    tp: { type: 'string', value: 'T', description: 'tensor-parallel size of the rollout engine (>= 1)' },
    rank: { type: 'string', value: 'R', description: 'this engine\'s tensor-parallel rank (0 .. T-1)' },
    config: { type: 'string', value: 'config.json', description: 'the model\'s Hugging Face config.json, for a preset\'s head counts and MLP size; default: the version\'s metadata (weights publish --config)', complete: 'file' },
    heads: { type: 'string', value: 'H', description: 'attention heads (a preset splits q_proj and a fused qkv by them); default: --config, else the version\'s metadata' },
    'kv-heads': { type: 'string', value: 'K', description: 'key/value heads (GQA); default: --config, else the metadata, else --heads' },
    engine: { type: 'string', description: 'the engine whose vocab split a preset follows (default vllm; megatron pads to 128 x tp)', complete: vocabEngines },
    streams: { type: 'string', value: 'S', description: 'parallel connections (1..64); default the agent\'s weights.streams (4)' },
    out: { type: 'string', value: 'F.safetensors', description: 'write to this file instead of the agent\'s keys, straight from the network: the whole version, or with a layout this rank\'s shard (tensors named as in the version, sliced shapes; metadata names model, version, layout, tp, rank and vocab padding); replaces the file; a repeat of a pull that stopped fetches only what the file lacks', complete: 'file' },
    'all-ranks': { type: 'boolean', description: 'with a layout and --tp (no --rank): write every rank\'s shard into --out-dir from one read of the source (the version is pulled whole into this agent, then sliced here)' },
    'out-dir': { type: 'string', value: 'DIR', description: 'with --all-ranks: the folder for one shard file per rank, <model>-v<version>-tp<T>-rank<R>.safetensors (created if missing)', complete: 'file' },
    quiet: { type: 'boolean', description: 'no progress bar (there is none either when stderr is not a terminal, or with --json)' },
  },
  examples: [
    { what: 'the latest version of a model, from whichever agent serves it', run: 'agentctl weights pull --model qwen3-8b' },
    { what: 'only rank 1 of 4\'s slices of version 7, from a named agent', run: 'agentctl weights pull --from 10.0.0.5:7070 --model qwen3-8b --version 7 --preset qwen --tp 4 --rank 1' },
    { what: 'every rank\'s shard file of tp 8, from one read of the source', run: 'agentctl weights pull --model qwen3-8b --preset qwen --tp 8 --all-ranks --out-dir /srv/shards' },
  ],
  async run ({ client, values, signal, json, stderr }) {
    const from = values.from as string | undefined
    const model = values.model as string | undefined
    if (model === undefined) throw new UsageError('weights pull needs --model (and --from HOST:PORT unless an agent in the mesh advertises the model)')
    const version = parseVersion(values.version as string | undefined, true) ?? 'latest'
    const tp = positiveInt('tp', values.tp as string | undefined)
    const rankText = values.rank as string | undefined
    if (rankText !== undefined && !/^(0|[1-9]\d*)$/.test(rankText)) throw new UsageError(`--rank must be a non-negative integer, got "${rankText}"`)
    const layoutFile = values.layout as string | undefined
    const preset = values.preset as string | undefined
    if (layoutFile !== undefined && preset !== undefined) throw new UsageError('give --layout or --preset, not both')
    const sliced = layoutFile !== undefined || preset !== undefined
    const presetFlags = (['config', 'heads', 'kv-heads', 'engine'] as const).filter(k => values[k] !== undefined)
    if (presetFlags.length > 0 && preset === undefined) throw new UsageError(`--${presetFlags.join(', --')} shape a --preset's split; a --layout file states its own`)
    const allRanks = values['all-ranks'] === true
    const out = values.out as string | undefined
    const outDir = values['out-dir'] as string | undefined
    if (allRanks) {
      if (!sliced || tp === undefined) throw new UsageError('--all-ranks needs --layout F or --preset P, and --tp')
      if (rankText !== undefined) throw new UsageError('--all-ranks writes every rank: leave out --rank')
      if (outDir === undefined) throw new UsageError('--all-ranks needs --out-dir DIR')
      if (out !== undefined) throw new UsageError('--out writes one file; --all-ranks writes one a rank into --out-dir')
    } else if (outDir !== undefined) {
      throw new UsageError('--out-dir needs --all-ranks (one rank: --rank R --out F)')
    }
    if (sliced && (tp === undefined || (rankText === undefined && !allRanks))) throw new UsageError('a layout needs --tp and --rank')
    if (!sliced && (tp !== undefined || rankText !== undefined)) throw new UsageError('--tp/--rank need --layout F or --preset P')
    let rules: unknown[] | undefined
    if (layoutFile !== undefined) {
      try {
        rules = (JSON.parse(await readFile(layoutFile, 'utf8')) as { rules?: unknown[] }).rules
      } catch (cause) {
        throw new AgentError('ERR_LAYOUT_INVALID', `cannot read the layout ${layoutFile}: ${(cause as Error).message}`, { cause })
      }
      if (!Array.isArray(rules)) throw new AgentError('ERR_LAYOUT_INVALID', `${layoutFile}: expected { "rules": [...] }`)
    }
    const config = values.config !== undefined ? presetOptionsOf(await readModelConfig(values.config as string)) : {}
    const heads = positiveInt('heads', values.heads as string | undefined) ?? config.heads
    const kvHeads = positiveInt('kv-heads', values['kv-heads'] as string | undefined) ?? config.kvHeads
    const intermediateSize = config.intermediateSize
    const engine = values.engine !== undefined ? choiceFlag('weights pull', values.engine, 'engine', vocabEngines) : undefined
    const streams = positiveInt('streams', values.streams as string | undefined)
    const layoutOf = (rank: number): PullBody['layout'] => ({ tp: tp!, rank, ...(rules !== undefined ? { rules } : {}), ...(preset !== undefined ? { preset } : {}), ...(heads !== undefined ? { heads } : {}), ...(kvHeads !== undefined ? { kvHeads } : {}), ...(intermediateSize !== undefined ? { intermediateSize } : {}), ...(engine !== undefined ? { engine } : {}) })
    // What the agent cannot know: the layout's name and whose vocab split it follows (it adds model, version, tp, rank, padding).
    const vocabEngine = engine ?? (preset !== undefined ? 'vllm' : undefined)
    const shardMetadata: Record<string, string> = sliced ? { 'agentd.layout': preset ?? `rules from ${layoutFile}`, ...(vocabEngine !== undefined ? { 'agentd.engine': vocabEngine } : {}) } : {}
    const body = {
      model, version,
      ...(from !== undefined ? { from } : {}),
      ...(streams !== undefined ? { streams } : {}),
      ...(sliced && !allRanks ? { layout: layoutOf(Number(rankText)) } : {}),
      ...(out !== undefined ? { out: { path: resolve(out), overwrite: true, metadata: shardMetadata } } : {}),
    }
    const bar = followWeightsProgress(client, list => {
      const mine = list.pulling.find(p => (from === undefined || p.from === from) && p.model === model)
      return mine !== undefined ? { doneBytes: mine.doneBytes, totalBytes: mine.totalBytes, label: `pulling ${model}` } : undefined
    }, { label: `pulling ${model}`, quiet: json || values.quiet === true, stream: stderr })
    let result: PullResult
    try {
      result = await client.weightsPull(body, { signal })
    } finally {
      bar.stop()
    }
    const files = allRanks
      ? await writeEveryRank({ client, signal }, { model, version: result.version, tp: tp!, dir: resolve(outDir!), layoutOf, metadata: shardMetadata })
      : result.file !== undefined ? [result.file] : undefined
    const rate = result.seconds > 0 ? `${formatBytes(result.bytes / result.seconds)}/s` : '-'
    return {
      json: { version: result.version, bytes: result.bytes, bytesReceived: result.bytesReceived, seconds: result.seconds, tensors: result.tensors, sources: result.sources, ...(result.droppedSources !== undefined ? { droppedSources: result.droppedSources } : {}), ...(result.ucx !== undefined ? { ucx: result.ucx } : {}), ...(result.paddedShapes !== undefined ? { paddedShapes: result.paddedShapes } : {}), ...(files !== undefined ? { files } : {}) },
      human: `pulled ${model} v${result.version}: ${result.tensors} tensors, ${formatBytes(result.bytes)} in ${result.seconds.toFixed(2)} s (${rate})` +
        `${result.bytesReceived < result.bytes ? `, ${formatBytes(result.bytes - result.bytesReceived)} of it already here` : ''}` +
        `${result.refetchedPieces > 0 ? `, ${result.refetchedPieces} pieces refetched` : ''}${result.reconnects > 0 ? `, ${result.reconnects} reconnects` : ''}` +
        `${Object.keys(result.sources).length > 1 ? `\nfrom ${Object.entries(result.sources).sort((a, b) => b[1] - a[1]).map(([address, bytes]) => `${address} ${formatBytes(bytes)}`).join(', ')}` : ''}` +
        `${(result.droppedSources ?? []).map(d => `\ndropped swarm peer ${d.address}: ${d.reason}`).join('')}` +
        // Which transport carried the bytes: UCX (and which of its transports) or TCP, with why not UCX.
        `${result.ucx === undefined ? '' : result.ucx.bytes > 0 ? `\nover UCX (${result.ucx.transports.join(', ')}): ${formatBytes(result.ucx.bytes)}, the rest over TCP` : `\nover TCP: UCX not used (${result.ucx.fallback ?? 'no slice with rows of 1 KiB or more'})`}` +
        `${files !== undefined ? `\nwrote ${files.join(', ')}` : ''}` +
        `${result.paddedShapes !== undefined ? `\n${Object.entries(result.paddedShapes).map(([key, shape]) => `${key}: the engine's parameter is [${shape.join(', ')}] (vocab padding)`).join('\n')}` : ''}`,
    }
  },
}
