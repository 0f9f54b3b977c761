/**
 * Helpers that read a TypeBox/JSON schema: find the schema at a path, describe
 * what a leaf expects in words, list the leaves, suggest the closest valid name
 * for a misspelt one. Pure functions over the schema object (no I/O). Used by
 * config loading, the env-variable mapping, the generated config reference,
 * input validation (validate-input.ts) and the CLI's "did you mean" hints.
 */
import type { TSchema } from '@sinclair/typebox'

interface SchemaNode {
  type?: string
  properties?: Record<string, SchemaNode>
  items?: SchemaNode
  anyOf?: SchemaNode[]
  const?: unknown
  minimum?: number
  maximum?: number
  minLength?: number
  maxLength?: number
  pattern?: string
  description?: string
}

const node = (s: TSchema): SchemaNode => s as unknown as SchemaNode

export function isObjectSchema (s: TSchema): boolean {
  return node(s).type === 'object' && node(s).properties !== undefined
}

export function propertiesOf (s: TSchema): Record<string, TSchema> {
  return (node(s).properties ?? {}) as Record<string, TSchema>
}

/** The schema at `path` (object keys and array indices), or undefined. */
export function schemaAt (root: TSchema, path: readonly string[]): TSchema | undefined {
  let cur: SchemaNode | undefined = node(root)
  for (const seg of path) {
    if (cur === undefined) return undefined
    if (cur.type === 'array') cur = /^\d+$/.test(seg) ? cur.items : undefined
    else cur = cur.properties?.[seg]
  }
  return cur as TSchema | undefined
}

/** Leaf paths of an object schema (arrays and scalars are leaves). */
export function leafPaths (root: TSchema, prefix: string[] = []): string[][] {
  const out: string[][] = []
  for (const [key, child] of Object.entries(propertiesOf(root))) {
    if (isObjectSchema(child)) out.push(...leafPaths(child, [...prefix, key]))
    else out.push([...prefix, key])
  }
  return out
}

/** What a leaf schema accepts, in words: "an integer from 1024 to 67108864". */
export function describeExpected (s: TSchema): string {
  const n = node(s)
  if (n.anyOf?.every(a => a.const !== undefined)) {
    return `one of ${n.anyOf.map(a => JSON.stringify(a.const)).join(', ')}`
  }
  const bounds = (lo: number | undefined, hi: number | undefined, unit: string): string => {
    if (lo !== undefined && hi !== undefined) return ` from ${lo} to ${hi}${unit}`
    if (lo !== undefined) return ` >= ${lo}${unit}`
    if (hi !== undefined) return ` <= ${hi}${unit}`
    return ''
  }
  switch (n.type) {
    case 'integer': return `an integer${bounds(n.minimum, n.maximum, '')}`
    case 'number': return `a number${bounds(n.minimum, n.maximum, '')}`
    case 'boolean': return 'true or false'
    case 'string': {
      let text = 'a string'
      if (n.minLength !== undefined || n.maxLength !== undefined) text += ` of length${bounds(n.minLength, n.maxLength, '')}`
      if (n.pattern !== undefined) text += ` matching /${n.pattern}/`
      return text
    }
    case 'array': return `an array${n.items !== undefined ? ` of ${describeExpected(n.items as TSchema)}` : ''}`
    case 'object': return `a table with keys ${Object.keys(n.properties ?? {}).join(', ')}`
    default: return 'a valid value'
  }
}

export function descriptionOf (s: TSchema): string {
  return node(s).description ?? ''
}

export function schemaType (s: TSchema): string | undefined {
  const n = node(s)
  if (n.anyOf !== undefined) return 'string'
  return n.type
}

/** Closest candidate by edit distance, for "did you mean" hints; undefined when nothing is close. */
export function closestName (name: string, candidates: Iterable<string>): string | undefined {
  let best: string | undefined
  let bestDistance = Infinity
  for (const c of candidates) {
    const [a, b] = [name.toLowerCase(), c.toLowerCase()]
    // A truncated or over-long name ("bodyLimit" for "bodyLimitBytes") is as good as one typo.
    const d = a.startsWith(b) || b.startsWith(a) ? 1 : editDistance(a, b)
    if (d < bestDistance) { best = c; bestDistance = d }
  }
  return bestDistance <= Math.max(2, Math.floor(name.length / 3)) ? best : undefined
}

function editDistance (a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i)
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0]!
    row[0] = i
    for (let j = 1; j <= b.length; j++) {
      const above = row[j]!
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1))
      diagonal = above
    }
  }
  return row[b.length]!
}
