#!/usr/bin/env node
/**
 * `npm start`: runs a single-node dev agent (`agentd --dev`) with its state in
 * ./.agentd-dev, waits until it answers, prints `agentctl status`, and keeps
 * the agent running until Ctrl-C. Logs go to .agentd-dev/agentd.log.
 */
import '../agent/runtime-check.ts'
import { spawn } from 'node:child_process'
import { mkdirSync, openSync, readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { createAgentClient } from '../agent/client/client.ts'
import { agentEnvironment, agentNodeFlags } from '../agent/node-flags.ts'
import { commands } from './commands/index.ts'

const stateDir = resolve('.agentd-dev')
const socketPath = `${stateDir}/agentd.sock`
const logFile = `${stateDir}/agentd.log`
// From the sources, the agent's sources; from the build, the agent as installed (its bundle).
const agentMain = fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? '../agent/main.ts' : '../bundle/agentd.js', import.meta.url))

mkdirSync(stateDir, { recursive: true })
const log = openSync(logFile, 'a')
const agent = spawn(process.execPath, [...agentNodeFlags, agentMain, '--dev', '--state-dir', stateDir], { env: { ...agentEnvironment, ...process.env }, stdio: ['ignore', log, log], detached: true })
let exited = false
agent.once('exit', (code, signal) => {
  exited = true
  if (stopping) {
    process.stdout.write(`agentd stopped (${signal ?? `exit ${code}`})\n`)
    return
  }
  process.stderr.write(`agentd exited (${signal ?? `exit ${code}`}); last log lines:\n${readFileSync(logFile, 'utf8').split('\n').slice(-10).join('\n')}\n`)
  process.exit(1)
})
let stopping = false
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => { stopping = true; agent.kill('SIGTERM') })
}

const client = createAgentClient({ socketPath, timeoutMs: 2000 })
const began = performance.now()
for (;;) {
  if (exited) break
  try {
    await client.health()
    break
  } catch {
    if (performance.now() - began > 15_000) {
      process.stderr.write('agentd did not answer within 15 s; see ' + logFile + '\n')
      agent.kill('SIGKILL')
      process.exit(1)
    }
    await sleep(50)
  }
}
if (!exited) {
  const status = await commands.status!.run({ client, values: {}, positionals: [], json: false, signal: AbortSignal.timeout(5000) })
  process.stdout.write(`agentd ${agent.pid} is running in dev mode (ready in ${Math.round(performance.now() - began)} ms)\n` +
    `state and logs in ${stateDir}\n\n$ agentctl --socket ${socketPath} status\n${status.human}\n\n` +
    `Try: npx agentctl --socket ${socketPath} node\n     curl -s --unix-socket ${socketPath} http://agent/v1/status\n` +
    'Ctrl-C stops the agent.\n')
}
