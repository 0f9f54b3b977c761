/**
 * The shape of an agentctl command. Each command lives in its own module
 * under cli/commands/ and is listed once in cli/commands/index.ts; the
 * dispatcher (cli/agentctl.ts) parses global and command flags, builds the
 * client, and prints `json` with --json or `human` otherwise.
 */
import type { ParseArgsConfig } from 'node:util'
import type { AgentClient } from '../../agent/client/client.ts'

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
}

export interface Command {
  summary: string
  /** Flags and arguments after the command words, for the usage text: "[--prefix P] [--watch]". */
  usage?: string
  /** The command's own flags (the global ones are --socket, --json, --help). */
  options?: NonNullable<ParseArgsConfig['options']>
  /** How many positional arguments it takes at most. Default: 0. */
  maxPositionals?: number
  run(context: CommandContext): Promise<CommandResult>
}

/** A usage error (exit 2) raised by a command after parsing, e.g. a missing required flag. */
export class UsageError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'UsageError'
  }
}
