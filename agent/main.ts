#!/usr/bin/env node
/**
 * `agentd` entry point: parse flags, load config, start the daemon, tell
 * systemd when ready, stop gracefully on SIGTERM/SIGINT (a second signal
 * forces exit). Exit codes: 0 clean stop, 1 start-up failure, 78 bad
 * configuration (EX_CONFIG; the systemd unit does not restart on it).
 */
import './runtime-check.ts'
import { hostname } from 'node:os'
import { parseAgentdArgs, agentdUsage } from './config/flags.ts'
import { loadConfig } from './config/load.ts'
import { renderConfigReference } from './config/reference.ts'
import { createRootLogger, isJournalStream, journalPriorityPrefix } from '../core/logger.ts'
import { createDaemon } from './daemon.ts'
import { notifySystemd } from './systemd-notify.ts'
import { agentVersion } from './version.ts'

const exitConfig = 78

async function main (): Promise<number> {
  const began = performance.now()
  let loaded
  let action
  let exitWithStdin = false
  try {
    const args = parseAgentdArgs(process.argv.slice(2), process.env)
    action = args.action
    exitWithStdin = args.exitWithStdin
    if (action === 'help') { process.stdout.write(agentdUsage + '\n'); return 0 }
    if (action === 'version') { process.stdout.write(`agentd ${agentVersion}\n`); return 0 }
    if (action === 'config-reference') { process.stdout.write(renderConfigReference() + '\n'); return 0 }
    loaded = loadConfig({
      hostname: hostname(),
      ...(args.devStateDir !== undefined ? { devStateDir: args.devStateDir } : {}),
      ...(args.configFile !== undefined ? { configFile: args.configFile } : {}),
      readDefaultFile: !args.dev,
      env: process.env,
      flags: args.assignments,
    })
  } catch (err) {
    // Before the logger exists; under systemd each line is an error entry in the journal.
    const prefix = isJournalStream(2) ? journalPriorityPrefix(50) : ''
    process.stderr.write(`agentd: ${(err as Error).message}`.replace(/^/gm, prefix) + '\n')
    return exitConfig
  }
  if (action === 'print-config') {
    process.stdout.write(JSON.stringify(loaded.config, null, 2) + '\n')
    return 0
  }

  const logger = createRootLogger(loaded.config.log.level)
  // Node prints an uncaught exception's stack to stderr (no priority prefix: an info entry in the
  // journal) and exits 1; this line makes the crash an entry `journalctl -p err` shows.
  process.on('uncaughtExceptionMonitor', (err, origin) => { logger.fatal({ err, origin }, 'agentd crashed') })
  logger.info({ version: agentVersion, dev: loaded.dev, configFile: loaded.configFile, node: loaded.config.node.name }, 'agentd starting')
  const daemon = createDaemon({ config: loaded.config, dev: loaded.dev }, { logger })

  let signals = 0
  const stopped = Promise.withResolvers<number>()
  const onSignal = (signal: NodeJS.Signals): void => {
    signals++
    if (signals > 1) {
      logger.warn({ signal }, 'second signal: forcing exit')
      process.exit(130)
    }
    logger.info({ signal }, 'stopping')
    void notifySystemd('STOPPING=1', logger)
    const force = setTimeout(() => {
      logger.error({ graceMs: loaded.config.shutdown.graceMs }, 'graceful stop took too long: forcing exit')
      process.exit(1)
    }, loaded.config.shutdown.graceMs)
    force.unref()
    void daemon.stop().then(() => stopped.resolve(0))
  }
  process.on('SIGTERM', onSignal)
  process.on('SIGINT', onSignal)
  if (exitWithStdin) {
    // The parent holds the other end; it closes when the parent exits, however it exits.
    process.stdin.once('end', () => { if (signals === 0) onSignal('SIGHUP') })
    process.stdin.resume()
  }

  try {
    await daemon.start()
  } catch (err) {
    logger.fatal({ err }, 'agentd failed to start')
    return 1
  }
  if (signals > 0) return stopped.promise
  const startupMs = Math.round(performance.now() - began)
  await notifySystemd(`READY=1\nSTATUS=serving on ${loaded.config.api.socketPath}`, logger)
  logger.info({ startupMs, socket: loaded.config.api.socketPath, subsystems: daemon.subsystems() }, 'agentd ready')
  return stopped.promise
}

const exitCode = await main()
// Every subsystem has stopped (or never started) and the log is written synchronously, as is
// stdout on Linux: exit now. Left to drain, the event loop would wait for library timers that
// nothing cancels (libp2p's address manager arms a 1 s debounce while it stops), so every stop
// took a second longer than its work.
process.exit(exitCode)
