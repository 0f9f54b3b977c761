/** Flag parsing and input files shared by agentctl's local commands. */
import { readFile } from 'node:fs/promises'
import { AgentError } from '../../core/errors.ts'
import { UsageError } from './command.ts'
import { closestName } from '../../core/schema-walk.ts'

/** A required (unless `fallback` is given) integer flag >= min; UsageError naming the command otherwise. */
export function integerFlag (command: string, value: unknown, name: string, min: number, fallback?: number): number {
  if (value === undefined && fallback !== undefined) return fallback
  if (typeof value !== 'string') throw new UsageError(`${command}: --${name} is required`)
  const n = Number(value)
  if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min) {
    throw new UsageError(`${command}: --${name} must be an integer >= ${min}, got "${value}"`)
  }
  return n
}

/** A number flag >= min (fractions allowed), `fallback` when absent; UsageError naming the command otherwise. */
export function numberFlag (command: string, value: unknown, name: string, min: number, fallback: number): number {
  if (value === undefined) return fallback
  const n = Number(value)
  if (typeof value !== 'string' || value.trim() === '' || !Number.isFinite(n) || n < min) throw new UsageError(`${command}: --${name} must be a number >= ${min}, got "${String(value)}"`)
  return n
}

/** A flag whose value must be one of `choices`. */
export function choiceFlag<T extends string> (command: string, value: unknown, name: string, choices: readonly T[], fallback?: T): T {
  if (value === undefined && fallback !== undefined) return fallback
  if (typeof value !== 'string') throw new UsageError(`${command}: --${name} is required (one of ${choices.join(', ')})`)
  if (!(choices as readonly string[]).includes(value)) {
    const hint = closestName(value, choices)
    throw new UsageError(`${command}: --${name} must be one of ${choices.join(', ')}, got "${value}"${hint !== undefined ? `; did you mean "${hint}"?` : ''}`)
  }
  return value as T
}

/** Reads a UTF-8 input file; a missing or unreadable file is AgentError ERR_NOT_FOUND / ERR_IO naming the path. */
export async function readInputFile (path: string, what: string): Promise<string> {
  try {
    return await readFile(path, 'utf8')
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    throw new AgentError(code === 'ENOENT' ? 'ERR_NOT_FOUND' : 'ERR_IO', `cannot read ${what} ${path}: ${(err as Error).message}`, { cause: err })
  }
}
