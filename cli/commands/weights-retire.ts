/** agentctl weights retire: retire a committed version (pullers of it get ERR_WEIGHTS_RETIRED; its keys are dropped once in-flight reads finish). */
import { UsageError, type Command } from './command.ts'
import { parseVersion } from './weights-publish.ts'

export const weightsRetireCommand: Command = {
  summary: 'retire a committed weight version',
  usage: '--model M --version N',
  options: {
    model: { type: 'string', value: 'M', description: 'the model\'s name' },
    version: { type: 'string', value: 'N', description: 'the committed version to retire' },
  },
  examples: [
    { what: 'retire version 5 of a model', run: 'agentctl weights retire --model qwen3-8b --version 5' },
  ],
  async run ({ client, values, signal }) {
    const model = values.model as string | undefined
    const version = parseVersion(values.version as string | undefined, false)
    if (model === undefined || typeof version !== 'number') throw new UsageError('weights retire needs --model and --version')
    const result = await client.weightsRetire({ model, version }, { signal })
    return { json: result, human: `retired ${model} v${version}` }
  },
}
