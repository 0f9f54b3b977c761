/** agentctl state materialize: export a namespace/version to safetensors through the agent. */
import { resolve } from 'node:path'
import type { MaterializeResult } from '../../agent/state/materialize.ts'
import { UsageError, type Command } from './command.ts'
import { formatBytes } from './table.ts'

export const stateMaterializeCommand: Command = {
  summary: 'write a namespace/version to safetensors from host memory and NVMe (no GPU needed)',
  usage: '--prefix P --version V --out FILE.safetensors [--max-file-bytes N] [--overwrite]',
  options: {
    prefix: { type: 'string', value: 'P', description: 'the namespace to export: keys that start with P (job42/actor/)' },
    version: { type: 'string', value: 'V', description: 'the keys\' version to export (the #vN of their canonical keys)' },
    out: { type: 'string', value: 'FILE.safetensors', description: 'the file to write; split into FILE-0000i-of-0000N.safetensors + an index over --max-file-bytes', complete: 'file' },
    'max-file-bytes': { type: 'string', value: 'N', description: 'largest file in bytes before the export is split; default: one file' },
    overwrite: { type: 'boolean', description: 'replace files that exist; default: refuse' },
  },
  examples: [
    { what: 'export version 17 of a job\'s actor as one file', run: 'agentctl state materialize --prefix job42/actor/ --version 17 --out /data/actor-v17.safetensors' },
    { what: 'in files of at most 5 GB each', run: 'agentctl state materialize --prefix job42/actor/ --version 17 --out /data/actor-v17.safetensors --max-file-bytes 5000000000' },
  ],
  async run ({ client, values, signal }) {
    const { prefix, version, out } = values as Record<string, string | undefined>
    if (prefix === undefined || version === undefined || out === undefined) throw new UsageError('state materialize needs --prefix, --version and --out')
    if (!/^(0|[1-9]\d*)$/.test(version)) throw new UsageError(`--version must be a non-negative integer, got "${version}"`)
    const maxFileBytes = values['max-file-bytes'] as string | undefined
    if (maxFileBytes !== undefined && !/^[1-9]\d*$/.test(maxFileBytes)) throw new UsageError(`--max-file-bytes must be a positive integer, got "${maxFileBytes}"`)
    const body = {
      prefix, version: Number(version), path: resolve(out),
      ...(maxFileBytes !== undefined ? { maxFileBytes: Number(maxFileBytes) } : {}),
      ...(values.overwrite === true ? { overwrite: true } : {}),
    }
    const result = await client.call<MaterializeResult>('POST', '/v1/state/materialize', body, { signal })
    const human = `wrote ${result.tensors} tensors, ${formatBytes(result.bytes)}:\n${result.files.map(f => `  ${f}`).join('\n')}${result.index !== null ? `\nindex: ${result.index}` : ''}`
    return { json: result, human }
  },
}
