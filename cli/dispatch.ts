/**
 * Reads an agentctl command line: finds the command its words name, parses
 * the flags with node:util parseArgs, and says what to do: run a command,
 * print help, print the version, or report a line that names no command to
 * run. Throws UsageError, with the mistake named and a hint, for anything it
 * cannot read.
 *
 * Command words (one to three: "status", "sim reward", "sim trace reward")
 * come first; global flags may stand anywhere, a command's own flags only
 * after its words. The words before the last of a command's name form a
 * group ("sim", "sim trace", "weights"): a group alone lists its commands.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util'
import { closestName } from '../core/schema-walk.ts'
import { UsageError, flagValueName, type Command, type CommandContext, type FlagSpec } from './commands/command.ts'
import { defaultSocketPath } from '../agent/client/client.ts'

export interface GlobalFlagSpec extends FlagSpec {
  /** A one-letter alias ("-h"). */
  short?: string
}

/** Flags every command takes, anywhere on the line. */
export const globalFlags: Readonly<Record<string, GlobalFlagSpec>> = {
  socket: { type: 'string', value: 'PATH', description: `agent socket (default ${defaultSocketPath}; env AGENTD_SOCKET)`, complete: 'file' },
  json: { type: 'boolean', description: 'machine-readable output (errors too, as { "error": { code, message } })' },
  help: { type: 'boolean', short: 'h', description: 'help: every command, a group\'s commands, or one command\'s flags and examples' },
}

/** agentctl's own --version: only before any command word, since `weights publish --version N` is that command's flag. */
export const versionFlag: FlagSpec = { type: 'boolean', description: 'print agentctl\'s version and exit' }

export type Invocation =
  /** Run `command` with its parsed flags and arguments. */
  | { kind: 'run', name: string, command: Command, values: CommandContext['values'], positionals: string[], socket: string | undefined, json: boolean }
  /** --help or -h: print the help of `topic` ('' every command, a group, or a command) on stdout; exit 0. */
  | { kind: 'help', topic: string, json: boolean }
  /** --version without a command. */
  | { kind: 'version', json: boolean }
  /** No command named: `agentctl` or a group alone. Its listing goes to stderr; exit 2. */
  | { kind: 'incomplete', topic: string }

/** Every group: the words of a command name before its last one ("sim", "sim trace"). */
export function groupNames (commands: Record<string, Command>): Set<string> {
  const groups = new Set<string>()
  for (const name of Object.keys(commands)) {
    const words = name.split(' ')
    for (let n = 1; n < words.length; n++) groups.add(words.slice(0, n).join(' '))
  }
  return groups
}

/** The commands under a group ('' for all), by the words after the group's: [["trace reward", command], ...]. */
export function commandsOf (group: string, commands: Record<string, Command>): Array<[string, Command]> {
  const prefix = group === '' ? '' : `${group} `
  return Object.entries(commands).filter(([name]) => name.startsWith(prefix)).map(([name, c]) => [name.slice(prefix.length), c])
}

/** The first word of each command under a group: what may follow the group's words. */
export function nextWords (group: string, commands: Record<string, Command>): string[] {
  return [...new Set(commandsOf(group, commands).map(([rest]) => rest.split(' ')[0]!))]
}

/**
 * The UsageError for a word that names no command: `known` are the words
 * before it that did (a group), `rest` the unknown word and those after it
 * (which may complete a mistyped name of several words).
 */
export function unknownCommandError (known: readonly string[], rest: readonly string[], commands: Record<string, Command>): UsageError {
  const names = [...Object.keys(commands), ...groupNames(commands)]
  let hint: string | undefined
  for (let n = Math.min(rest.length, Math.max(1, 3 - known.length)); n >= 1 && hint === undefined; n--) {
    hint = closestName([...known, ...rest.slice(0, n)].join(' '), names)
  }
  const typed = [...known, rest[0]].join(' ')
  return new UsageError(`unknown command "${typed}"${hint !== undefined ? `; did you mean "${hint}"?` : ''}`, { commandsOf: known.join(' ') })
}

/**
 * What topic words name for `agentctl help WORDS`: '' (every command), a
 * group or a command. UsageError naming the first word that does not fit.
 */
export function resolveTopic (words: readonly string[], commands: Record<string, Command>): string {
  const groups = groupNames(commands)
  for (let n = 1; n <= words.length; n++) {
    const name = words.slice(0, n).join(' ')
    if (commands[name] === undefined && !groups.has(name)) throw unknownCommandError(words.slice(0, n - 1), words.slice(n - 1), commands)
  }
  return words.join(' ')
}

/** The global flag a token is, if any (`--socket=PATH` included); --version only where `top`. */
function globalFlagOf (token: string, top: boolean): FlagSpec | undefined {
  if (token.startsWith('--')) {
    const name = token.slice(2).split('=')[0]!
    if (name === 'version') return top ? versionFlag : undefined
    return globalFlags[name]
  }
  return Object.values(globalFlags).find(f => f.short !== undefined && token === `-${f.short}`)
}

export function dispatch (argv: string[], commands: Record<string, Command>): Invocation {
  const groups = groupNames(commands)
  const terminator = argv.indexOf('--')
  const flagPart = terminator === -1 ? argv : argv.slice(0, terminator)
  const helpAsked = flagPart.includes('--help') || flagPart.includes('-h')
  const json = flagPart.includes('--json')

  // The command words: the leading words that extend a known name, global flags skipped.
  const words: string[] = []
  let stop = argv.length
  for (let i = 0; i < argv.length; i++) {
    const token = argv[i]!
    if (token.startsWith('-') && token !== '-') {
      const flag = token === '--' ? undefined : globalFlagOf(token, words.length === 0)
      if (flag === undefined) { stop = i; break }
      if (flag.type === 'string' && !token.includes('=')) i++
      continue
    }
    const longer = [...words, token].join(' ')
    if (commands[longer] === undefined && !groups.has(longer)) { stop = i; break }
    words.push(token)
  }
  const name = words.join(' ')
  const command = commands[name]

  if (command === undefined) {
    // agentctl itself or a group: what follows may only be global flags.
    const next = argv[stop] === '--' ? stop + 1 : stop
    const first = argv[next]
    if (first !== undefined && (next > stop || !first.startsWith('-') || first === '-')) {
      const rest = argv.slice(next)
      const end = rest.findIndex((w, i) => i > 0 && w.startsWith('-'))
      throw unknownCommandError(words, end === -1 ? rest : rest.slice(0, end), commands)
    }
    if (helpAsked) return { kind: 'help', topic: name, json }
    if (name !== '' && stop < argv.length) {
      throw new UsageError(`"${name}" needs a command before its flags: ${nextWords(name, commands).join(', ')}`, { group: name })
    }
    checkFlags(argv, { ...globalFlags, ...(name === '' ? { version: versionFlag } : {}) }, '', { group: name })
    if (name === '' && flagPart.includes('--version')) return { kind: 'version', json }
    return { kind: 'incomplete', topic: name }
  }

  if (helpAsked) return { kind: 'help', topic: name, json }
  const options = { ...globalFlags, ...command.options }
  checkFlags(argv, options, name, { command: name })
  let parsed
  try {
    parsed = parseArgs({ args: argv, options: parseArgsOptions(options), strict: true, allowPositionals: true })
  } catch (err) {
    throw new UsageError((err as Error).message.split('\n')[0]!, { command: name })
  }
  const positionals = parsed.positionals.slice(words.length)
  const max = command.maxPositionals ?? command.arguments?.length ?? 0
  if (positionals.length > max) throw new UsageError(`unexpected argument "${positionals[max]}" for "${name}"`, { command: name })
  const { socket, json: _json, help: _help, ...values } = parsed.values
  return { kind: 'run', name, command, values: values as CommandContext['values'], positionals, socket: socket as string | undefined, json }
}

/** Our flag table as node:util parseArgs options. */
function parseArgsOptions (flags: Record<string, GlobalFlagSpec>): NonNullable<ParseArgsConfig['options']> {
  return Object.fromEntries(Object.entries(flags).map(([name, f]) => [name, {
    type: f.type,
    ...(f.multiple === true ? { multiple: true } : {}),
    ...(f.short !== undefined ? { short: f.short } : {}),
  }]))
}

/**
 * The first flag of argv that `flags` does not allow as written: unknown (with
 * the nearest known one), a value missing or given to a switch. parseArgs
 * finds these too, but its messages name neither the command nor the fix.
 */
function checkFlags (argv: string[], flags: Record<string, GlobalFlagSpec>, command: string, subject: { command: string } | { group: string }): void {
  const { tokens } = parseArgs({ args: argv, options: parseArgsOptions(flags), strict: false, allowPositionals: true, tokens: true })
  for (const token of tokens) {
    if (token.kind !== 'option') continue
    const flag = flags[token.name]
    if (flag === undefined) {
      const hint = token.rawName.startsWith('--') ? closestName(token.name, Object.keys(flags)) : undefined
      throw new UsageError(`unknown flag ${token.rawName}${command !== '' ? ` for "${command}"` : ''}${hint !== undefined ? `; did you mean --${hint}?` : ''}`, subject)
    }
    if (flag.type === 'string' && (token.value === undefined || (token.inlineValue === false && token.value.startsWith('-')))) {
      throw new UsageError(`--${token.name} needs a value (--${token.name} ${flagValueName(flag)})`, subject)
    }
    if (flag.type === 'boolean' && token.value !== undefined) throw new UsageError(`--${token.name} takes no value`, subject)
  }
}
