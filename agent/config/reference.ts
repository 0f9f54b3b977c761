/**
 * The config reference (Markdown), rendered from the schema so the README
 * cannot drift: a test compares the README's block with this output, and
 * `agentd --config-reference` prints it.
 */
import { configSchema } from './schema.ts'
import { describeExpected, descriptionOf, leafPaths, schemaAt } from '../../core/schema-walk.ts'
import { envName } from './load.ts'

export function renderConfigReference (): string {
  const rows = leafPaths(configSchema).map(path => {
    const schema = schemaAt(configSchema, path)!
    return `| \`${path.join('.')}\` | \`${envName(path)}\` | ${describeExpected(schema).replaceAll('|', '\\|')} | ${descriptionOf(schema).replaceAll('|', '\\|')} |`
  })
  return ['| key | env | accepts | meaning |', '|---|---|---|---|', ...rows].join('\n')
}
