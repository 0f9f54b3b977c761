/**
 * Validation of JSON input (placement and reward traces, workflow graphs, job
 * specs, reward messages) against a TypeBox schema, turning every problem into
 * one AgentError whose message names each bad field by its dotted path
 * ("jobs[3].segments[1].durationS") and, for a misspelt key, the closest
 * valid one.
 */
import type { TSchema, Static } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { AgentError, type ErrorCode } from './errors.ts'
import { closestName, propertiesOf, schemaAt } from './schema-walk.ts'

export interface InputIssue { path: string, message: string }

const maxIssues = 10

export interface InputValidator<S extends TSchema> {
  /**
   * Parses JSON text (when `input` is a string) and checks it against the
   * schema, then runs `consistency` (cross-field rules) on a schema-valid value.
   * Throws AgentError(code) listing at most 10 issues.
   */
  parse(input: unknown, source?: string): Static<S>
}

export function createInputValidator<S extends TSchema> (
  schema: S,
  code: ErrorCode,
  what: string,
  consistency: (value: Static<S>, add: (path: string, message: string) => void) => void,
): InputValidator<S> {
  const compiled = TypeCompiler.Compile(schema)
  return {
    parse (input, source = what) {
      let value = input
      if (typeof input === 'string') {
        try {
          value = JSON.parse(input)
        } catch (err) {
          throw new AgentError(code, `${source} is not JSON: ${(err as Error).message}`, { cause: err })
        }
      }
      const issues: InputIssue[] = []
      if (!compiled.Check(value)) {
        const seen = new Set<string>()
        for (const error of compiled.Errors(value)) {
          const segments = error.path.split('/').filter(Boolean)
          const path = dottedPath(segments) || '(root)'
          if (seen.has(path)) continue
          seen.add(path)
          // A union of literals says which values it takes, not just "Expected union value".
          const choices = (error.schema.anyOf as TSchema[] | undefined)?.map(option => option.const as unknown)
          const expected = choices?.every(c => c !== undefined) ? `Expected one of ${choices.map(c => JSON.stringify(c)).join(', ')}` : error.message
          let message = `${expected}${error.value === undefined ? '' : `, got ${JSON.stringify(error.value)}`}`
          if (error.message === 'Unexpected property') {
            const parent = schemaAt(schema, segments.slice(0, -1))
            const hint = parent === undefined ? undefined : closestName(segments.at(-1)!, Object.keys(propertiesOf(parent)))
            if (hint !== undefined) message += `; did you mean "${hint}"?`
          }
          issues.push({ path, message })
          if (issues.length >= maxIssues) break
        }
      } else {
        consistency(value as Static<S>, (path, message) => { if (issues.length < maxIssues) issues.push({ path, message }) })
      }
      if (issues.length > 0) {
        const lines = issues.map(i => `  ${i.path}: ${i.message}`)
        throw new AgentError(code, `${source} is not a valid ${what}:\n${lines.join('\n')}`, { details: issues })
      }
      return value as Static<S>
    },
  }
}

/** ["jobs", "0", "segments"] → "jobs[0].segments" */
function dottedPath (segments: readonly string[]): string {
  return segments.reduce((out, seg) => /^\d+$/.test(seg) ? `${out}[${seg}]` : out === '' ? seg : `${out}.${seg}`, '')
}
