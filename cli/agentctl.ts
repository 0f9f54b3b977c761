#!/usr/bin/env node
/**
 * agentctl: the command-line client of the local agent; just another client
 * of the API. Exit codes: 0 ok, 1 the agent (or reaching it) failed, 2 bad
 * usage, and the shell's 141 (SIGPIPE) when its output pipe closes early
 * (closed-pipe.ts). With --json, results and errors are JSON on stdout.
 */
import '../agent/runtime-check.ts'
import { createAgentClient, defaultSocketPath } from '../agent/client/client.ts'
import { AgentError, toErrorBody } from '../core/errors.ts'
import { UsageError } from './commands/command.ts'
import { commands } from './commands/index.ts'
import { dispatch, usageText } from './dispatch.ts'
import { dieOnClosedPipe } from './closed-pipe.ts'

async function main (argv: string[]): Promise<number> {
  let dispatched
  try {
    dispatched = dispatch(argv, commands)
  } catch (err) {
    process.stderr.write(`agentctl: ${(err as Error).message}\n\n${usageText(commands)}\n`)
    return 2
  }
  if (dispatched === undefined || dispatched.help) {
    const helpAsked = argv.includes('--help') || argv.includes('-h')
    process.stdout.write(usageText(commands) + '\n')
    return helpAsked ? 0 : 2
  }
  const { command, values, positionals, json } = dispatched
  const client = createAgentClient({ socketPath: dispatched.socket ?? process.env.AGENTD_SOCKET ?? defaultSocketPath })
  const controller = new AbortController()
  process.once('SIGINT', () => controller.abort())
  try {
    const result = await command.run({ client, values, positionals, json, signal: controller.signal })
    process.stdout.write((json ? JSON.stringify(result.json, null, 2) : result.human) + '\n')
    return 0
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`agentctl: ${err.message}\n`)
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
