/**
 * agentctl weights publish: commit a version from a safetensors file, stored
 * keys or a handed-out region. A progress bar (stage, bytes, rate, time left)
 * on a terminal unless --quiet or --json.
 */
import { resolve } from 'node:path'
import type { PublishSource } from '../../agent/weights/publisher.ts'
import { parseModelConfig, type ModelConfig } from '../../agent/weights/model-config.ts'
import { UsageError, type Command } from './command.ts'
import { readInputFile } from './flags.ts'
import { formatBytes } from './table.ts'
import { followWeightsProgress } from './weights-progress.ts'

export const weightsPublishCommand: Command = {
  summary: 'publish a version of a model (versions are monotonic and immutable; old ones retire by weights.retainVersions)',
  usage: '--model M [--version N] (--from-safetensors F | --from-keys PREFIX | --from-region NAME) [--config config.json] [--meta KEY=VALUE ...] [--quiet]',
  options: {
    model: { type: 'string', value: 'M', description: 'the model\'s name (qwen3-8b); its versions are numbered on their own' },
    version: { type: 'string', value: 'N', description: 'the version to commit (>= 0, above every earlier one); default: one above the highest known' },
    'from-safetensors': { type: 'string', value: 'F', description: 'read the tensors from safetensors file F (a path the agent can read)', complete: 'file' },
    'from-keys': { type: 'string', value: 'PREFIX', description: 'use the StateManager keys under PREFIX (a trainer offloaded them)' },
    'from-region': { type: 'string', value: 'NAME', description: 'use the region NAME the agent handed out and the trainer wrote (zero copy)' },
    config: { type: 'string', value: 'config.json', description: 'the model\'s Hugging Face config.json: its head counts and sizes are stored with the version, so pullers\' presets split it as the engines do', complete: 'file' },
    meta: { type: 'string', multiple: true, value: 'KEY=VALUE', description: 'metadata stored with the version (repeat it for more)' },
    quiet: { type: 'boolean', description: 'no progress bar (there is none either when stderr is not a terminal, or with --json)' },
  },
  examples: [
    { what: 'publish the checkpoint a trainer saved, as the next version', run: 'agentctl weights publish --model qwen3-8b --from-safetensors /data/step-1200.safetensors' },
    { what: 'publish version 7 from offloaded keys, with a note', run: 'agentctl weights publish --model qwen3-8b --version 7 --from-keys job42/actor/ --meta step=1200' },
    { what: 'publish with the model\'s head counts, for resharded pulls', run: 'agentctl weights publish --model qwen3-8b --from-safetensors model.safetensors --config config.json' },
  ],
  async run ({ client, values, signal, json, stderr }) {
    const model = values.model as string | undefined
    if (model === undefined) throw new UsageError('weights publish needs --model')
    const sources = (['from-safetensors', 'from-keys', 'from-region'] as const).filter(k => values[k] !== undefined)
    if (sources.length !== 1) throw new UsageError('weights publish needs exactly one of --from-safetensors, --from-keys, --from-region')
    const version = parseVersion(values.version as string | undefined, false)
    const source: PublishSource = values['from-safetensors'] !== undefined
      ? { kind: 'safetensors', path: resolve(values['from-safetensors'] as string) }
      : values['from-keys'] !== undefined ? { kind: 'keys', prefix: values['from-keys'] as string } : { kind: 'region', region: values['from-region'] as string }
    const metadata: Record<string, string> = values.config !== undefined ? { ...(await readModelConfig(values.config as string)).metadata } : {}
    for (const pair of (values.meta as string[] | undefined) ?? []) {
      const eq = pair.indexOf('=')
      if (eq < 1) throw new UsageError(`--meta takes KEY=VALUE, got "${pair}"`)
      metadata[pair.slice(0, eq)] = pair.slice(eq + 1)
    }
    const bar = followWeightsProgress(client, list => {
      const mine = list.publishing.find(p => p.model === model && (version === undefined || p.version === version))
      return mine !== undefined ? { doneBytes: mine.doneBytes, totalBytes: mine.totalBytes, label: `${mine.stage} ${model}` } : undefined
    }, { label: `publishing ${model}`, quiet: json || values.quiet === true, stream: stderr })
    let manifest
    try {
      manifest = await client.weightsPublish({ model, source, ...(typeof version === 'number' ? { version } : {}), ...(Object.keys(metadata).length > 0 ? { metadata } : {}) }, { signal })
    } finally {
      bar.stop()
    }
    return {
      json: { model: manifest.model, version: manifest.version, tensors: manifest.tensors.length, bytes: manifest.totalBytes, durable: manifest.durable },
      human: `published ${manifest.model} v${manifest.version}: ${manifest.tensors.length} tensors, ${formatBytes(manifest.totalBytes)}${manifest.durable ? ' (on NVMe)' : ''}`,
    }
  },
}

/** A Hugging Face config.json named by --config. */
export async function readModelConfig (path: string): Promise<ModelConfig> {
  return parseModelConfig(await readInputFile(path, 'model config'), path)
}

/** "--version N" (or "latest" where allowed); undefined when absent. */
export function parseVersion (text: string | undefined, latestAllowed: boolean): number | 'latest' | undefined {
  if (text === undefined) return undefined
  if (latestAllowed && text === 'latest') return 'latest'
  if (!/^(0|[1-9]\d*)$/.test(text)) throw new UsageError(`--version must be a non-negative integer${latestAllowed ? ' or "latest"' : ''}, got "${text}"`)
  return Number(text)
}
