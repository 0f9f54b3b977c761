/**
 * Body limits derived from a route's body schema, for routes whose schema
 * bounds every part of the body (the StateManager's batch routes): such a
 * route accepts every body its schema admits, however many items, so a
 * schema-valid batch is never refused for its size while api.bodyLimitBytes
 * still bounds the routes whose bodies are open-ended.
 */
import type { TSchema } from '@sinclair/typebox'

interface BodySchemaNode {
  type?: string
  properties?: Record<string, BodySchemaNode>
  additionalProperties?: unknown
  items?: BodySchemaNode
  maxItems?: number
  maxLength?: number
  minimum?: number
  maximum?: number
  anyOf?: BodySchemaNode[]
  const?: unknown
}

/** Characters of the longest JSON number text: a double such as -2.2250738585072014e-308. */
const longestNumberText = 24

/**
 * Bytes of the largest JSON text `schema` admits, written as JSON.stringify(value, null, 2)
 * writes it (so compact JSON and two-space indentation both fit). Strings count one byte a
 * character (canonical keys are ASCII by grammar; other strings are names), integers without
 * a bound as long as the largest safe integer. Infinity when some part is unbounded: a string
 * without maxLength, an array without maxItems, an object open to further properties, any
 * value of unknown type.
 */
export function largestJsonBytes (schema: TSchema): number {
  return largestAt(schema as unknown as BodySchemaNode, 0)
}

/**
 * The body limit of a route with this body schema: its largest body (largestJsonBytes), or
 * `apiLimitBytes` (api.bodyLimitBytes) when that is larger or the schema leaves the body unbounded.
 */
export function schemaBodyLimit (schema: TSchema, apiLimitBytes: number): number {
  const largest = largestJsonBytes(schema)
  return Number.isFinite(largest) ? Math.max(apiLimitBytes, largest) : apiLimitBytes
}

/** `depth`: how many objects and arrays enclose the value (its indentation is 2 × depth). */
function largestAt (node: BodySchemaNode, depth: number): number {
  if (node.anyOf !== undefined) return Math.max(...node.anyOf.map(alternative => largestAt(alternative, depth)))
  if (node.const !== undefined) return JSON.stringify(node.const).length
  switch (node.type) {
    case 'string': return node.maxLength === undefined ? Infinity : node.maxLength + 2
    case 'integer': return integerBytes(node)
    case 'number': return longestNumberText
    case 'boolean': return 'false'.length
    case 'null': return 'null'.length
    case 'array': {
      if (node.maxItems === undefined || node.items === undefined) return Infinity
      return enclosed(Array<number>(node.maxItems).fill(largestAt(node.items, depth + 1)), depth)
    }
    case 'object': {
      if (node.additionalProperties !== false) return Infinity
      const members = Object.entries(node.properties ?? {}).map(([name, value]) => JSON.stringify(name).length + ': '.length + largestAt(value, depth + 1))
      return enclosed(members, depth)
    }
    default: return Infinity
  }
}

/** `{…}` or `[…]` around members of these sizes: each on its own line, indented one level deeper, comma-separated. */
function enclosed (members: number[], depth: number): number {
  if (members.length === 0) return 2
  const perMember = '\n'.length + 2 * (depth + 1)
  const body = members.reduce((sum, bytes) => sum + bytes + perMember, 0) + (members.length - 1)
  return 2 + body + '\n'.length + 2 * depth
}

function integerBytes (node: BodySchemaNode): number {
  const largest = String(node.maximum ?? Number.MAX_SAFE_INTEGER).length
  const smallest = String(node.minimum ?? Number.MIN_SAFE_INTEGER).length
  return Math.max(largest, smallest)
}
