#!/usr/bin/env node
/**
 * agentctl: the command-line client of the local agent. It is just another
 * client of the API. Exit codes: 0 ok, 1 the agent (or reaching it) failed,
 * 2 bad usage. With --json, results and errors are JSON on stdout.
 */
import '../agent/runtime-check.ts'
import { parseArgs } from 'node:util'
import { createAgentClient, defaultSocketPath } from '../agent/client/client.ts'
import { AgentError, toErrorBody } from '../agent/errors.ts'
import { closestName } from '../agent/config/schema-walk.ts'
import { commands } from './commands.ts'

const usage = `usage: agentctl [--socket PATH] [--json] <command>

commands:
${Object.entries(commands).map(([name, c]) => `  ${name.padEnd(10)}${c.summary}`).join('\n')}

options:
  --socket PATH   agent socket (default ${defaultSocketPath}; env AGENTD_SOCKET)
  --json          machine-readable output (errors too, as { "error": { code, message } })
  -h, --help      this text`

async function main (argv: string[]): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: { socket: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
    })
  } catch (err) {
    process.stderr.write(`agentctl: ${(err as Error).message}\n\n${usage}\n`)
    return 2
  }
  const { values, positionals } = parsed
  if (values.help === true || positionals.length === 0) {
    process.stdout.write(usage + '\n')
    return values.help === true ? 0 : 2
  }
  const name = positionals[0]!
  const command = commands[name]
  if (command === undefined || positionals.length > 1) {
    const hint = closestName(name, Object.keys(commands))
    const problem = command === undefined ? `unknown command "${name}"${hint !== undefined ? `; did you mean "${hint}"?` : ''}` : `unexpected argument "${positionals[1]}"`
    process.stderr.write(`agentctl: ${problem}\n\n${usage}\n`)
    return 2
  }
  const client = createAgentClient({ socketPath: values.socket ?? process.env.AGENTD_SOCKET ?? defaultSocketPath })
  const controller = new AbortController()
  process.once('SIGINT', () => controller.abort())
  try {
    const result = await command.run(client, { signal: controller.signal })
    process.stdout.write((values.json === true ? JSON.stringify(result.json, null, 2) : result.human) + '\n')
    return 0
  } catch (err) {
    const agentError = err instanceof AgentError ? err : new AgentError('ERR_INTERNAL', (err as Error).message, { cause: err })
    if (values.json === true) process.stdout.write(JSON.stringify(toErrorBody(agentError), null, 2) + '\n')
    else process.stderr.write(`agentctl: ${agentError.code}: ${agentError.message}\n`)
    return 1
  }
}

process.exitCode = await main(process.argv.slice(2))
