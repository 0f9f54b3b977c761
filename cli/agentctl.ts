#!/usr/bin/env node
/**
 * agentctl: the command-line client of the local agent; just another client
 * of the API. Exit codes: 0 ok, 1 the agent (or reaching it) failed, 2 bad
 * usage, and the shell's 141 (SIGPIPE) when its output pipe closes early
 * (closed-pipe.ts). With --json, results and agent errors are JSON on stdout.
 * What was asked for (results, --help, help, --version) goes to stdout; a
 * usage error, or the listing shown for a line that names no command to run
 * (`agentctl`, `agentctl weights`), goes to stderr with status 2.
 */
import '../agent/runtime-check.ts'
import { createAgentClient, defaultSocketPath } from '../agent/client/client.ts'
import { agentVersion } from '../agent/version.ts'
import { AgentError, toErrorBody } from '../core/errors.ts'
import { UsageError } from './commands/command.ts'
import { commands } from './command-table.ts'
import { dispatch, type Invocation } from './dispatch.ts'
import { helpJson, helpText, usageErrorText } from './help.ts'
import { dieOnClosedPipe } from './closed-pipe.ts'

async function main (argv: string[]): Promise<number> {
  let invocation: Invocation
  try {
    invocation = dispatch(argv, commands)
  } catch (err) {
    if (!(err instanceof UsageError)) throw err
    process.stderr.write(usageErrorText(err, commands) + '\n')
    return 2
  }
  if (invocation.kind === 'version') {
    process.stdout.write((invocation.json ? JSON.stringify({ agentctl: agentVersion }, null, 2) : `agentctl ${agentVersion}`) + '\n')
    return 0
  }
  if (invocation.kind === 'help') {
    const { topic, json } = invocation
    process.stdout.write((json ? JSON.stringify(helpJson(topic, commands), null, 2) : helpText(topic, commands)) + '\n')
    return 0
  }
  if (invocation.kind === 'incomplete') {
    process.stderr.write(helpText(invocation.topic, commands) + '\n')
    return 2
  }
  const { name, command, values, positionals, json } = invocation
  const client = createAgentClient({ socketPath: invocation.socket ?? process.env.AGENTD_SOCKET ?? defaultSocketPath })
  const controller = new AbortController()
  process.once('SIGINT', () => controller.abort())
  try {
    const result = await command.run({ client, values, positionals, json, signal: controller.signal })
    process.stdout.write((json ? JSON.stringify(result.json, null, 2) : result.human) + '\n')
    return 0
  } catch (err) {
    if (err instanceof UsageError) {
      err.subject ??= { command: name }
      process.stderr.write(usageErrorText(err, commands) + '\n')
      return 2
    }
    const agentError = err instanceof AgentError ? err : new AgentError('ERR_INTERNAL', (err as Error).message, { cause: err })
    if (json) process.stdout.write(JSON.stringify(toErrorBody(agentError), null, 2) + '\n')
    else process.stderr.write(`agentctl: ${agentError.code}: ${agentError.message}\n`)
    return 1
  }
}

dieOnClosedPipe()
process.exitCode = await main(process.argv.slice(2))
