/**
 * The shape of an agentctl command. Each command lives in its own module
 * under cli/commands/ and is listed once in cli/commands/index.ts; the
 * dispatcher (cli/dispatch.ts) parses global and command flags, cli/agentctl.ts
 * builds the client and prints `json` with --json or `human` otherwise.
 * Help, usage errors and shell completion (cli/help.ts, cli/completion.ts)
 * are generated from these same fields, so a flag is declared once.
 */
import type { AgentClient } from '../../agent/client/client.ts'
import type { ProgressStream } from './progress-bar.ts'

export interface CommandResult {
  /** What --json prints (the API's own JSON where there is one). */
  json: unknown
  /** What a person reads. */
  human: string
}

export interface CommandContext {
  /** Client of the agent at --socket / AGENTD_SOCKET (connects only when called; local commands ignore it). */
  client: AgentClient
  /** The command's own flags, parsed and type-checked by node:util parseArgs. */
  values: Record<string, string | boolean | string[] | boolean[] | undefined>
  /** Positional arguments after the command words. */
  positionals: string[]
  json: boolean
  signal: AbortSignal
  /** Where progress bars draw (only when it is a terminal). Default process.stderr; tests pass a stand-in. */
  stderr?: ProgressStream
}

/** What the shell offers for a value: file names, or one of these words. Default: nothing. */
export type Completion = 'file' | readonly string[]

/** One flag of a command: parsed by node:util parseArgs, described by `agentctl help <command>`. */
export interface FlagSpec {
  type: 'string' | 'boolean'
  /** May be given more than once; the values arrive as an array. Default: false. */
  multiple?: boolean
  /** The value's placeholder in help ("M", "F.json"); string flags only. Default: the `complete` words joined by "|", else VALUE. */
  value?: string
  /** One line: what the flag does, with its unit and default. */
  description: string
  complete?: Completion
}

/** One positional argument, in order. */
export interface ArgumentSpec {
  /** Its placeholder in the usage line: "F", "ID". */
  name: string
  /** One line: what it is. */
  description: string
  complete?: Completion
}

/** A command line that shows the command at work, for `agentctl help <command>`. */
export interface Example {
  /** One line: what it does. */
  what: string
  /** The line itself, starting with "agentctl". */
  run: string
}

export interface Command {
  /** One line, for listings. */
  summary: string
  /** Flags and arguments after the command words, for the usage line: "[--prefix P] [--watch]". */
  usage?: string
  /** The command's own flags (the global ones are --socket, --json, --help). */
  options?: Readonly<Record<string, FlagSpec>>
  /** Its positional arguments, for help and completion. */
  arguments?: readonly ArgumentSpec[]
  /** How many positional arguments it takes at most. Default: the number of `arguments`. */
  maxPositionals?: number
  /** At least one, each a line the dispatcher accepts. */
  examples: readonly Example[]
  run(context: CommandContext): Promise<CommandResult>
}

/** The placeholder a string flag's value has in help and usage errors. */
export function flagValueName (flag: FlagSpec): string {
  return flag.value ?? (Array.isArray(flag.complete) ? flag.complete.join('|') : 'VALUE')
}

/** What a usage error is about, for the lines that follow its message (cli/help.ts). */
export type UsageSubject =
  /** A command: its usage line and where its help is. */
  | { command: string }
  /** A group ('' is agentctl itself): its usage line and where its help is. */
  | { group: string }
  /** A word that names no command under this group: where the group's list of commands is. */
  | { commandsOf: string }

/**
 * A usage error (exit 2): a command line agentctl cannot run as written, or a
 * missing or malformed flag a command found. A command throws it without a
 * subject; the dispatcher makes it the command itself.
 */
export class UsageError extends Error {
  subject: UsageSubject | undefined
  constructor (message: string, subject?: UsageSubject) {
    super(message)
    this.name = 'UsageError'
    this.subject = subject
  }
}
