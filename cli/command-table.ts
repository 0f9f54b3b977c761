/**
 * agentctl's whole command table: the commands of cli/commands/ and the two
 * that read the table itself, help and completion (defined beside the text
 * they print, in cli/help.ts and cli/completion.ts, so cli/commands/ imports
 * nothing from cli/). The dispatcher, the help texts and the README's usage
 * block all read this one table.
 */
import type { Command } from './commands/command.ts'
import { commands as registered } from './commands/index.ts'
import { createCompletionCommand } from './completion.ts'
import { createHelpCommand } from './help.ts'

export const commands: Record<string, Command> = {
  ...registered,
  help: createHelpCommand(() => commands),
  completion: createCompletionCommand(() => commands),
}
