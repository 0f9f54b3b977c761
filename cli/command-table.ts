/**
 * agentctl's whole command table: the commands of cli/commands/ and help,
 * which reads the table itself (defined beside the text it prints, in
 * cli/help.ts, so cli/commands/ imports nothing from cli/). The dispatcher,
 * the help texts and the README's usage block all read this one table.
 */
import type { Command } from './commands/command.ts'
import { commands as registered } from './commands/index.ts'
import { createHelpCommand } from './help.ts'

export const commands: Record<string, Command> = {
  ...registered,
  help: createHelpCommand(() => commands),
}
