/**
 * agentctl's help texts and usage-error messages, generated from the command
 * table (cli/command-table.ts) the dispatcher reads: every command with its
 * usage line (`agentctl help`, the README's usage block), a group's commands
 * (`agentctl help weights`), one command's flags and examples (`agentctl help
 * weights publish`), and the few lines after a usage error; and the `help`
 * command that prints them.
 */
import { type UsageError, flagValueName, type Command, type FlagSpec } from './commands/command.ts'
import { commandsOf, globalFlags, groupNames, resolveTopic, versionFlag, type GlobalFlagSpec } from './dispatch.ts'

const topUsage = 'usage: agentctl [--socket PATH] [--json] <command> [flags]'

/** "  --model M" / "  -h, --help": a flag as help lists it. */
function flagLabel (name: string, flag: GlobalFlagSpec): string {
  return `${flag.short !== undefined ? `-${flag.short}, ` : ''}--${name}${flag.type === 'string' ? ` ${flagValueName(flag)}` : ''}`
}

/** Rows of two columns, the first padded to its widest cell. */
function columns (rows: ReadonlyArray<readonly [string, string]>, indent = 2, gap = 2): string {
  const width = Math.max(...rows.map(([left]) => left.length))
  return rows.map(([left, right]) => `${' '.repeat(indent)}${left.padEnd(width + gap)}${right}`.trimEnd()).join('\n')
}

function flagRows (flags: Readonly<Record<string, GlobalFlagSpec>>): Array<[string, string]> {
  return Object.entries(flags).map(([name, flag]) => [flagLabel(name, flag), flag.description])
}

/** "usage: agentctl NAME USAGE", the one line that shows how a command is written. */
export function commandUsageLine (name: string, command: Command): string {
  return `usage: agentctl ${name}${command.usage !== undefined ? ` ${command.usage}` : ''}`
}

/** The usage line of a group ('' is agentctl itself). */
export function groupUsageLine (group: string): string {
  return group === '' ? topUsage : `usage: agentctl ${group} <command> [flags]`
}

/** Every command with its summary and usage line, and the global flags: `agentctl help`, and the README's block. */
export function usageText (commands: Record<string, Command>): string {
  const width = Math.max(...Object.keys(commands).map(n => n.length)) + 2
  return `${topUsage}

commands:
${Object.entries(commands).map(([name, c]) => `  ${name.padEnd(width)}${c.summary}${c.usage !== undefined ? `\n  ${' '.repeat(width)}  ${name} ${c.usage}` : ''}`).join('\n')}

global flags:
${columns(flagRows({ ...globalFlags, version: versionFlag }))}

run "agentctl help <command>" for a command's flags and examples`
}

/** A group's commands, one line each. */
export function groupHelp (group: string, commands: Record<string, Command>): string {
  return `${groupUsageLine(group)}

commands:
${columns(commandsOf(group, commands).map(([rest, c]) => [rest, c.summary]))}

run "agentctl help ${group} <command>" for a command's flags and examples`
}

/** One command: usage line, summary, arguments, flags, global flags, examples. */
export function commandHelp (name: string, command: Command): string {
  const sections = [commandUsageLine(name, command), command.summary]
  if (command.arguments !== undefined && command.arguments.length > 0) {
    sections.push(`arguments:\n${columns(command.arguments.map(a => [a.name, a.description]))}`)
  }
  if (command.options !== undefined && Object.keys(command.options).length > 0) sections.push(`flags:\n${columns(flagRows(command.options))}`)
  sections.push(`global flags:\n${columns(flagRows(globalFlags))}`)
  sections.push(`examples:\n${command.examples.map(e => `  # ${e.what}\n  ${e.run}`).join('\n')}`)
  return sections.join('\n\n')
}

/** The help of a topic: '' (every command), a group or a command. */
export function helpText (topic: string, commands: Record<string, Command>): string {
  const command = commands[topic]
  if (command !== undefined) return commandHelp(topic, command)
  return topic === '' ? usageText(commands) : groupHelp(topic, commands)
}

const flagJson = (name: string, flag: FlagSpec): object => ({
  flag: `--${name}`, ...(flag.type === 'string' ? { value: flagValueName(flag) } : {}), ...(flag.multiple === true ? { multiple: true } : {}), description: flag.description,
})

/** The help of a topic as data, for --json. */
export function helpJson (topic: string, commands: Record<string, Command>): unknown {
  const command = commands[topic]
  if (command !== undefined) {
    return {
      command: topic,
      summary: command.summary,
      usage: commandUsageLine(topic, command).slice('usage: '.length),
      arguments: (command.arguments ?? []).map(a => ({ name: a.name, description: a.description })),
      flags: Object.entries(command.options ?? {}).map(([name, f]) => flagJson(name, f)),
      examples: command.examples,
    }
  }
  return {
    ...(topic !== '' ? { group: topic } : {}),
    commands: commandsOf(topic, commands).map(([rest, c]) => ({ command: topic === '' ? rest : `${topic} ${rest}`, summary: c.summary, usage: commandUsageLine(topic === '' ? rest : `${topic} ${rest}`, c).slice('usage: '.length) })),
    ...(topic === '' ? { globalFlags: Object.entries({ ...globalFlags, version: versionFlag }).map(([name, f]) => flagJson(name, f)) } : {}),
  }
}

/**
 * A usage error as agentctl prints it, at most five lines: the mistake (with
 * a hint where there is one), the right form, and where to read more.
 */
export function usageErrorText (err: UsageError, commands: Record<string, Command>): string {
  const lines = [`agentctl: ${err.message}`]
  const subject = err.subject
  if (subject === undefined) return lines[0]!
  if ('command' in subject) {
    const command = commands[subject.command]
    if (command !== undefined) lines.push(commandUsageLine(subject.command, command))
    lines.push(`run "agentctl help ${subject.command}" for more`)
  } else if ('group' in subject) {
    lines.push(groupUsageLine(subject.group), `run "agentctl help${subject.group !== '' ? ` ${subject.group}` : ''}" for more`)
  } else {
    const group = subject.commandsOf
    lines.push(group !== '' && groupNames(commands).has(group) ? `run "agentctl help ${group}" for its commands` : 'run "agentctl help" for the list of commands')
  }
  return lines.join('\n')
}

/**
 * agentctl help [COMMAND]: the same text as --help. It reads the table it is
 * part of, hence the function.
 */
export function createHelpCommand (table: () => Record<string, Command>): Command {
  return {
    summary: 'help: every command, a group\'s commands, or one command\'s flags and examples (same as --help)',
    usage: '[COMMAND]',
    arguments: [{ name: 'COMMAND', description: 'a command or a group, one to three words ("weights", "weights publish"); none: every command' }],
    maxPositionals: 3,
    examples: [
      { what: 'the flags and examples of one command', run: 'agentctl help weights publish' },
      { what: 'the commands of a group', run: 'agentctl help sim' },
    ],
    async run ({ positionals }) {
      const commands = table()
      const topic = resolveTopic(positionals, commands)
      return { json: helpJson(topic, commands), human: helpText(topic, commands) }
    },
  }
}
