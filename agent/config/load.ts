/**
 * Loads the agent configuration from its layers — defaults < file < env <
 * flags — and validates the result against `configSchema`. A rejected
 * configuration throws one AgentError(ERR_CONFIG_INVALID) whose message names
 * every bad key, where it came from and what it expects; `details` holds the
 * same as a list.
 */
import { readFileSync } from 'node:fs'
import { parse as parseToml } from 'smol-toml'
import { Value } from '@sinclair/typebox/value'
import type { TSchema } from '@sinclair/typebox'
import { AgentError } from '../../core/errors.ts'
import { validateElectionConfig } from '../../mesh/election/election-config.ts'
import { validateWeightsConfig } from '../weights/weights-config.ts'
import { validateMetricsConfig } from '../metrics/metrics-config.ts'
import { configSchema, defaultConfig, devConfig, type AgentConfig } from './schema.ts'
import {
  closestName, describeExpected, isObjectSchema, leafPaths, propertiesOf, schemaAt, schemaType,
} from '../../core/schema-walk.ts'

export const defaultConfigFile = '/etc/agentd/agentd.toml'

/** Env variables with the AGENTD_ prefix that are not config keys. */
export const nonConfigEnv = new Set(['AGENTD_CONFIG', 'AGENTD_SOCKET', 'AGENTD_NATIVE_ADDON'])

export interface ConfigIssue {
  /** Dotted key, e.g. "api.bodyLimitBytes". */
  key: string
  /** Where the value came from: "defaults", "file /etc/…", "env AGENTD_…", "flag --…". */
  origin: string
  message: string
}

/** A value for one key, with where it came from. */
export interface ConfigAssignment {
  path: string[]
  value: unknown
  origin: string
}

export interface ConfigLayers {
  hostname: string
  /** `--dev --state-dir DIR`: dev defaults with every path under DIR. */
  devStateDir?: string
  /** Explicit config file (flag or AGENTD_CONFIG); missing ⇒ an error. */
  configFile?: string
  /** Read the default file when no explicit one is given (false in dev mode). */
  readDefaultFile: boolean
  env: NodeJS.ProcessEnv
  /** Key assignments from flags, already mapped to paths. */
  flags: ConfigAssignment[]
}

export interface LoadedConfig {
  config: AgentConfig
  dev: boolean
  /** The file actually read, or null. */
  configFile: string | null
  /** Dotted key → origin of its final value. */
  origins: Map<string, string>
}

export function loadConfig (layers: ConfigLayers): LoadedConfig {
  const dev = layers.devStateDir !== undefined
  const config: Record<string, unknown> = dev
    ? devConfig(layers.hostname, layers.devStateDir!)
    : defaultConfig(layers.hostname)
  const origins = new Map<string, string>()
  const issues: ConfigIssue[] = []

  const file = layers.configFile ?? (layers.readDefaultFile ? defaultConfigFile : undefined)
  let configFile: string | null = null
  if (file !== undefined) {
    const text = readConfigFile(file, layers.configFile !== undefined)
    if (text !== null) {
      configFile = file
      const assignments = fileAssignments(text, file, issues)
      for (const a of assignments) assign(config, a, origins)
    }
  }
  for (const a of envAssignments(layers.env, issues)) assign(config, a, origins)
  for (const a of layers.flags) assign(config, a, origins)

  for (const error of Value.Errors(configSchema, config)) {
    const path = error.path.split('/').filter(Boolean)
    const key = path.join('.')
    if (issues.some(i => i.key === key)) continue
    const leaf = schemaAt(configSchema, path)
    const expected = leaf !== undefined ? describeExpected(leaf) : error.message
    issues.push({ key, origin: originOf(origins, path), message: `expected ${expected}, got ${JSON.stringify(error.value)}` })
  }
  if (issues.length > 0) throw configError(issues)
  // Cross-field rules of the sections that have them.
  validateElectionConfig((config as AgentConfig).election)
  validateWeightsConfig((config as AgentConfig).weights)
  validateMetricsConfig((config as AgentConfig).metrics)
  checkShutdownGrace(config as AgentConfig, origins)
  return { config: config as AgentConfig, dev, configFile, origins }
}

/** What a graceful stop needs besides waiting for the reward workers to exit (closing the API, the mesh, the state). */
export const shutdownMarginMs = 2000

/**
 * A graceful stop waits for the reward workers' exits, and a worker asked to
 * stop may take reward.workerStopGraceMs before it is killed: a shutdown
 * grace no longer than that forced every stop with live workers to exit
 * with "graceful stop took too long".
 */
export function checkShutdownGrace (config: AgentConfig, origins: Map<string, string>): void {
  const need = config.reward.workerStopGraceMs + shutdownMarginMs
  if (config.shutdown.graceMs >= need) return
  throw configError([{
    key: 'shutdown.graceMs',
    origin: originOf(origins, ['shutdown', 'graceMs']),
    message: `${config.shutdown.graceMs} ms is too short: a graceful stop waits up to reward.workerStopGraceMs (${config.reward.workerStopGraceMs} ms, ${originOf(origins, ['reward', 'workerStopGraceMs'])}) for the reward workers to exit, so it needs at least ${need} ms`,
  }])
}

export function configError (issues: ConfigIssue[]): AgentError {
  const lines = issues.map(i => `  ${i.key} (${i.origin}): ${i.message}`)
  return new AgentError('ERR_CONFIG_INVALID', `invalid configuration:\n${lines.join('\n')}`, { details: issues })
}

function readConfigFile (file: string, explicit: boolean): string | null {
  try {
    return readFileSync(file, 'utf8')
  } catch (cause) {
    const code = (cause as NodeJS.ErrnoException).code
    if (code === 'ENOENT' && !explicit) return null
    throw new AgentError('ERR_CONFIG_INVALID', `cannot read config file ${file}: ${(cause as Error).message}`, { cause })
  }
}

/** Parses TOML and maps it to leaf assignments, reporting unknown keys with a hint. */
export function fileAssignments (text: string, file: string, issues: ConfigIssue[]): ConfigAssignment[] {
  let doc: Record<string, unknown>
  try {
    doc = parseToml(text) as Record<string, unknown>
  } catch (cause) {
    throw new AgentError('ERR_CONFIG_INVALID', `config file ${file} is not valid TOML: ${(cause as Error).message}`, { cause })
  }
  const out: ConfigAssignment[] = []
  const walk = (value: Record<string, unknown>, schema: TSchema, path: string[]): void => {
    const props = propertiesOf(schema)
    for (const [key, child] of Object.entries(value)) {
      const childPath = [...path, key]
      const childSchema = props[key]
      if (childSchema === undefined) {
        issues.push(unknownKeyIssue(childPath, Object.keys(props), `file ${file}`))
      } else if (isObjectSchema(childSchema)) {
        if (isPlainObject(child)) walk(child, childSchema, childPath)
        else issues.push({ key: childPath.join('.'), origin: `file ${file}`, message: `expected ${describeExpected(childSchema)}, got ${JSON.stringify(child)}` })
      } else {
        out.push({ path: childPath, value: normalizeToml(child), origin: `file ${file}` })
      }
    }
  }
  walk(doc, configSchema, [])
  return out
}

/** Env variable name of a key path: ["api","socketPath"] → AGENTD_API_SOCKET_PATH. */
export function envName (path: readonly string[]): string {
  return 'AGENTD_' + path.map(p => p.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase()).join('_')
}

const envToPath = new Map(leafPaths(configSchema).map(p => [envName(p), p]))

export function envAssignments (env: NodeJS.ProcessEnv, issues: ConfigIssue[]): ConfigAssignment[] {
  const out: ConfigAssignment[] = []
  for (const [name, raw] of Object.entries(env)) {
    if (!name.startsWith('AGENTD_') || nonConfigEnv.has(name) || raw === undefined) continue
    const path = envToPath.get(name)
    const origin = `env ${name}`
    if (path === undefined) {
      const hint = closestName(name, envToPath.keys())
      issues.push({ key: name, origin, message: `unknown variable${hint !== undefined ? `; did you mean ${hint}?` : ''}` })
      continue
    }
    const parsed = parseScalar(path, raw)
    if (parsed.ok) out.push({ path, value: parsed.value, origin })
    else issues.push({ key: path.join('.'), origin, message: parsed.message })
  }
  return out
}

/**
 * Maps `--set key=value` to an assignment. The value is parsed by the key's
 * schema type (integers, booleans, JSON for arrays).
 */
export function setFlagAssignment (expr: string): ConfigAssignment {
  const eq = expr.indexOf('=')
  if (eq <= 0) throw new AgentError('ERR_CONFIG_INVALID', `--set expects key=value, got ${JSON.stringify(expr)}`)
  const path = expr.slice(0, eq).split('.')
  const origin = `flag --set ${expr.slice(0, eq)}`
  const schema = schemaAt(configSchema, path)
  if (schema === undefined || isObjectSchema(schema)) {
    const known = leafPaths(configSchema).map(p => p.join('.'))
    const hint = closestName(path.join('.'), known)
    throw configError([{ key: path.join('.'), origin, message: `unknown key${hint !== undefined ? `; did you mean ${hint}?` : ''}` }])
  }
  const parsed = parseScalar(path, expr.slice(eq + 1))
  if (!parsed.ok) throw configError([{ key: path.join('.'), origin, message: parsed.message }])
  return { path, value: parsed.value, origin }
}

function parseScalar (path: string[], raw: string): { ok: true, value: unknown } | { ok: false, message: string } {
  const schema = schemaAt(configSchema, path)!
  const expected = describeExpected(schema)
  const fail = { ok: false as const, message: `expected ${expected}, got ${JSON.stringify(raw)}` }
  switch (schemaType(schema)) {
    case 'integer': return /^-?\d+$/.test(raw) ? { ok: true, value: Number(raw) } : fail
    case 'number': return raw.trim() !== '' && Number.isFinite(Number(raw)) ? { ok: true, value: Number(raw) } : fail
    case 'boolean': return raw === 'true' || raw === 'false' ? { ok: true, value: raw === 'true' } : fail
    case 'array':
    case 'object':
      try { return { ok: true, value: JSON.parse(raw) } } catch { return { ok: false, message: `expected ${expected} as JSON, got ${JSON.stringify(raw)}` } }
    default: return { ok: true, value: raw }
  }
}

function unknownKeyIssue (path: string[], known: string[], origin: string): ConfigIssue {
  const hint = closestName(path.at(-1)!, known)
  const prefix = path.slice(0, -1).join('.')
  const suggestion = hint !== undefined ? `; did you mean ${prefix ? `${prefix}.` : ''}${hint}?` : `; known keys here: ${known.join(', ')}`
  return { key: path.join('.'), origin, message: `unknown key${suggestion}` }
}

function assign (config: Record<string, unknown>, a: ConfigAssignment, origins: Map<string, string>): void {
  let cur = config
  for (const seg of a.path.slice(0, -1)) {
    if (!isPlainObject(cur[seg])) cur[seg] = {}
    cur = cur[seg] as Record<string, unknown>
  }
  cur[a.path.at(-1)!] = a.value
  origins.set(a.path.join('.'), a.origin)
}

function originOf (origins: Map<string, string>, path: string[]): string {
  for (let n = path.length; n > 0; n--) {
    const origin = origins.get(path.slice(0, n).join('.'))
    if (origin !== undefined) return origin
  }
  return 'defaults'
}

function isPlainObject (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Date)
}

/** smol-toml returns bigint for large integers and Date-like objects for dates; keep plain JSON values. */
function normalizeToml (v: unknown): unknown {
  if (typeof v === 'bigint') return Number(v)
  if (Array.isArray(v)) return v.map(normalizeToml)
  if (isPlainObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, normalizeToml(x)]))
  return v
}
