/**
 * Finds the command named by argv and parses its flags. Command words (one to
 * three, the longest known name wins) come first among the positionals
 * ("sim reward --trace F", "sim trace reward --tasks 6"); global flags may
 * stand anywhere. Throws UsageError with a hint on anything it cannot parse.
 */
import { parseArgs } from 'node:util'
import { closestName } from '../core/schema-walk.ts'
import { UsageError, type Command } from './commands/command.ts'
import { defaultSocketPath } from '../agent/client/client.ts'

export const globalOptions = {
  socket: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const

export interface Dispatched {
  name: string
  command: Command
  values: Record<string, string | boolean | string[] | boolean[] | undefined>
  positionals: string[]
  socket: string | undefined
  json: boolean
  help: boolean
}

export function usageText (commands: Record<string, Command>): string {
  const width = Math.max(...Object.keys(commands).map(n => n.length)) + 2
  return `usage: agentctl [--socket PATH] [--json] <command> [flags]

commands:
${Object.entries(commands).map(([name, c]) => `  ${name.padEnd(width)}${c.summary}${c.usage !== undefined ? `\n  ${' '.repeat(width)}  ${name} ${c.usage}` : ''}`).join('\n')}

global flags:
  --socket PATH   agent socket (default ${defaultSocketPath}; env AGENTD_SOCKET)
  --json          machine-readable output (errors too, as { "error": { code, message } })
  -h, --help      this text`
}

/** Returns undefined when argv names no command (print usage). */
export function dispatch (argv: string[], commands: Record<string, Command>): Dispatched | undefined {
  const loose = parseArgs({ args: argv, options: globalOptions, strict: false, allowPositionals: true })
  const words = loose.positionals
  if (words.length === 0) return undefined
  const candidates = [words.slice(0, 3).join(' '), words.slice(0, 2).join(' '), words[0]!]
  const name = candidates.find(n => commands[n] !== undefined)
  if (name === undefined) {
    const hint = candidates.map(n => closestName(n, Object.keys(commands))).find(h => h !== undefined)
    throw new UsageError(`unknown command "${words[0]}"${hint !== undefined ? `; did you mean "${hint}"?` : ''}`)
  }
  const command = commands[name]!
  let parsed
  try {
    parsed = parseArgs({ args: argv, options: { ...globalOptions, ...command.options }, strict: true, allowPositionals: true })
  } catch (err) {
    throw new UsageError(`${name}: ${(err as Error).message}`)
  }
  const positionals = parsed.positionals.slice(name.split(' ').length)
  if (positionals.length > (command.maxPositionals ?? 0)) {
    throw new UsageError(`${name}: unexpected argument "${positionals[command.maxPositionals ?? 0]}"`)
  }
  const { socket, json, help, ...values } = parsed.values
  return { name, command, values, positionals, socket: socket as string | undefined, json: json === true, help: help === true }
}
