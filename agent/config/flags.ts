/**
 * Command-line flags of `agentd`. Flags are the last config layer; the named
 * ones are shorthands for config keys, `--set key=value` reaches any key.
 */
import { parseArgs } from 'node:util'
import { AgentError } from '../../core/errors.ts'
import { closestName } from '../../core/schema-walk.ts'
import { setFlagAssignment, type ConfigAssignment } from './load.ts'

/** Flags that are shorthands for one config key. */
const keyFlags = {
  'state-dir': ['node', 'stateDir'],
  'node-name': ['node', 'name'],
  socket: ['api', 'socketPath'],
  'log-level': ['log', 'level'],
  'cluster-key': ['mesh', 'clusterKeyFile'],
} as const

/** Repeatable flags whose values together replace one list-valued config key. */
const listFlags = {
  join: ['mesh', 'join'],
  'mesh-listen': ['mesh', 'listen'],
} as const

const options = {
  config: { type: 'string' },
  dev: { type: 'boolean' },
  'state-dir': { type: 'string' },
  'node-name': { type: 'string' },
  socket: { type: 'string' },
  'log-level': { type: 'string' },
  'cluster-key': { type: 'string' },
  join: { type: 'string', multiple: true },
  'mesh-listen': { type: 'string', multiple: true },
  server: { type: 'boolean' },
  'bootstrap-expect': { type: 'string' },
  set: { type: 'string', multiple: true },
  'print-config': { type: 'boolean' },
  'config-reference': { type: 'boolean' },
  'exit-with-stdin': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean' },
} as const

export const agentdUsage = `usage: agentd [--config FILE] [--dev --state-dir DIR] [options]

  --config FILE       TOML config file (default /etc/agentd/agentd.toml; env AGENTD_CONFIG)
  --dev               single-node development agent: every path under --state-dir,
                      socket DIR/agentd.sock, loopback only, no config file unless --config
  --state-dir DIR     node.stateDir
  --node-name NAME    node.name
  --socket PATH       api.socketPath
  --log-level LEVEL   log.level
  --join MULTIADDR    mesh.join: a seed agent to join, e.g. /ip4/10.0.0.5/tcp/7460 (repeatable)
  --mesh-listen MA    mesh.listen: a TCP multiaddr the mesh listens on (repeatable)
  --cluster-key FILE  mesh.clusterKeyFile: the cluster's pre-shared key (agentctl keygen)
  --server            election.server=true: this agent may vote and lead
  --bootstrap-expect N  election.bootstrapExpect: the first N servers that see each other
                      become the voter set
  --set KEY=VALUE     any config key, e.g. --set api.bodyLimitBytes=2097152 (repeatable)
  --print-config      print the effective configuration as JSON and exit
  --config-reference  print the reference of every config key (Markdown) and exit
  --exit-with-stdin   stop gracefully when standard input closes: a supervisor or test
                      harness that dies, even by SIGKILL, takes its agents with it
  --version           print the version and exit
  -h, --help          this text

Precedence: defaults < config file < AGENTD_* environment < flags.`

export interface AgentdArgs {
  action: 'run' | 'help' | 'version' | 'print-config' | 'config-reference'
  dev: boolean
  devStateDir?: string
  configFile?: string
  assignments: ConfigAssignment[]
  /** Stop when stdin closes (--exit-with-stdin). */
  exitWithStdin: boolean
}

export function parseAgentdArgs (argv: string[], env: NodeJS.ProcessEnv): AgentdArgs {
  let values: Record<string, unknown>
  try {
    values = parseArgs({ args: argv, options, strict: true, allowPositionals: false }).values
  } catch (cause) {
    throw new AgentError('ERR_CONFIG_INVALID', flagErrorMessage(cause as Error), { cause })
  }
  const dev = values.dev === true
  const action: AgentdArgs['action'] = values.help === true
    ? 'help'
    : values.version === true
      ? 'version'
      : values['config-reference'] === true
        ? 'config-reference'
        : values['print-config'] === true ? 'print-config' : 'run'
  const assignments: ConfigAssignment[] = []
  for (const [flag, path] of Object.entries(keyFlags)) {
    const value = values[flag]
    if (typeof value === 'string') assignments.push({ path: [...path], value, origin: `flag --${flag}` })
  }
  for (const [flag, path] of Object.entries(listFlags)) {
    const value = values[flag]
    if (Array.isArray(value)) assignments.push({ path: [...path], value, origin: `flag --${flag}` })
  }
  if (values.server === true) assignments.push({ ...setFlagAssignment('election.server=true'), origin: 'flag --server' })
  const expect = values['bootstrap-expect']
  if (typeof expect === 'string') assignments.push({ ...setFlagAssignment(`election.bootstrapExpect=${expect}`), origin: 'flag --bootstrap-expect' })
  for (const expr of (values.set as string[] | undefined) ?? []) assignments.push(setFlagAssignment(expr))

  const stateDir = values['state-dir'] as string | undefined
  if (dev && stateDir === undefined && action === 'run') {
    throw new AgentError('ERR_CONFIG_INVALID', '--dev needs --state-dir DIR (every path of the dev agent lives under it)')
  }
  const configFile = (values.config as string | undefined) ?? env.AGENTD_CONFIG
  const args: AgentdArgs = { action, dev, assignments, exitWithStdin: values['exit-with-stdin'] === true }
  if (dev && stateDir !== undefined) args.devStateDir = stateDir
  if (configFile !== undefined) args.configFile = configFile
  return args
}

function flagErrorMessage (err: Error): string {
  const unknown = /Unknown option '(-{1,2}[^']+)'/.exec(err.message)
  if (unknown !== null) {
    const hint = closestName(unknown[1]!.replace(/^-+/, ''), Object.keys(options))
    return `unknown flag ${unknown[1]}${hint !== undefined ? `; did you mean --${hint}?` : ''} (see agentd --help)`
  }
  return `${err.message} (see agentd --help)`
}
