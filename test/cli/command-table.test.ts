// The command table that help, usage errors and completion are generated from: every command documents
// every flag and argument in one line, its usage line names exactly those, and each example is a line
// the dispatcher runs as that command.
import t from 'tap'
import { commands } from '../../cli/command-table.ts'
import { dispatch } from '../../cli/dispatch.ts'
import { flagValueName } from '../../cli/commands/command.ts'

const oneLine = (text: string): boolean => text.trim() !== '' && !text.includes('\n')

/** The words of an example's agentctl invocation: up to a redirection, pipe or closing parenthesis; '…' quoting kept together. */
function exampleArgs (line: string): string[] {
  const invocation = /agentctl ([^>|)]*)/.exec(line)?.[1] ?? ''
  return [...invocation.trim().matchAll(/'([^']*)'|(\S+)/g)].map(m => m[1] ?? m[2]!)
}

for (const [name, command] of Object.entries(commands)) {
  t.test(name, async t => {
    t.ok(oneLine(command.summary), 'a one-line summary')
    const usage = command.usage ?? ''
    const flags = Object.entries(command.options ?? {})
    for (const [flag, spec] of flags) {
      t.ok(oneLine(spec.description), `--${flag} is described in one line`)
      t.ok(usage.includes(spec.type === 'string' ? `--${flag} ${flagValueName(spec)}` : `--${flag}`), `the usage line shows --${flag}${spec.type === 'string' ? ` ${flagValueName(spec)}` : ''}`)
    }
    t.same([...usage.matchAll(/--([a-z][a-z-]*)/g)].map(m => m[1]).sort(), flags.map(([flag]) => flag).sort(), 'the usage line names no other flag')
    for (const argument of command.arguments ?? []) {
      t.ok(oneLine(argument.description), `${argument.name} is described in one line`)
      t.match(usage, new RegExp(`(^|[ [])${argument.name}\\b`), `the usage line shows ${argument.name}`)
    }
    t.ok(command.examples.length >= 1, 'at least one example')
    for (const example of command.examples) {
      t.ok(oneLine(example.what), `"${example.what}" is one line`)
      t.match(example.run, /^(agentctl |source <\(agentctl )/, 'an agentctl line')
      const args = exampleArgs(example.run)
      t.match(dispatch(args, commands), { kind: 'run', name }, `${example.run} runs ${name}`)
    }
  })
}
