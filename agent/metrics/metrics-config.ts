/**
 * Config section `metrics`: the Prometheus endpoint (agent/metrics/metrics-server.ts).
 *
 * Off by default. When on, it listens on loopback unless `allowRemote` says
 * otherwise: the endpoint has no authentication, and what it shows (job
 * namespaces resident here, peers and their states, who leads, reward
 * traffic) is more than a neighbour on the network should read; every scrape
 * also costs the agent's event loop a little. A Prometheus on the node (or
 * an agent that forwards, e.g. Grafana Agent / vmagent) scrapes loopback;
 * `allowRemote` is for a central Prometheus on a trusted management network.
 */
import { BlockList, isIP } from 'node:net'
import { Type, type Static } from '@sinclair/typebox'
import { AgentError } from '../../core/errors.ts'

export const MetricsSection = Type.Object({
  listen: Type.String({
    pattern: '^$|^(\\[[0-9a-fA-F:.]+\\]|[^:\\s\\[\\]]+):\\d{1,5}$',
    description: 'host:port of the Prometheus endpoint (GET /metrics, text format 0.0.4, plain HTTP on TCP); "" = off. The host must be a loopback address (127.0.0.0/8, [::1] or localhost) unless metrics.allowRemote is true; port 0 picks a free one (GET /v1/status shows it as metrics.address). Default: "" (off). Example: "127.0.0.1:9464".',
  }),
  allowRemote: Type.Boolean({
    description: 'Allow metrics.listen on an address other hosts can reach (e.g. 0.0.0.0 or a management interface). The endpoint has no authentication and shows job namespaces, peers and leader state: only for a trusted network. Default: false.',
  }),
}, { additionalProperties: false })

export type MetricsConfig = Static<typeof MetricsSection>

export const defaultMetricsConfig: MetricsConfig = { listen: '', allowRemote: false }

/** host and port of a `host:port` (IPv6 in brackets, returned without them). */
export function splitHostPort (listen: string): { host: string, port: number } {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s[\]]+)):(\d{1,5})$/.exec(listen)
  if (match === null) throw new AgentError('ERR_CONFIG_INVALID', `metrics.listen: expected host:port (e.g. "127.0.0.1:9464"), got ${JSON.stringify(listen)}`)
  return { host: match[1] ?? match[2]!, port: Number(match[3]) }
}

const loopback = new BlockList()
loopback.addSubnet('127.0.0.0', 8, 'ipv4')
loopback.addAddress('::1', 'ipv6')

/** 127.0.0.0/8, ::1 (any spelling), an IPv4-mapped 127.x address, or the name localhost. */
export function isLoopbackHost (host: string): boolean {
  if (host === 'localhost') return true
  const family = isIP(host)
  return family !== 0 && loopback.check(host, family === 4 ? 'ipv4' : 'ipv6')
}

/** Rules the schema cannot state; one line per broken rule. */
export function metricsConfigProblems (c: MetricsConfig): string[] {
  if (c.listen === '') return []
  const problems: string[] = []
  let host: string
  let port: number
  try {
    ({ host, port } = splitHostPort(c.listen))
  } catch (err) {
    return [(err as Error).message]
  }
  if (port > 65_535) problems.push(`metrics.listen ${JSON.stringify(c.listen)}: port ${port} is over 65535`)
  if (!c.allowRemote && !isLoopbackHost(host)) {
    problems.push(`metrics.listen ${JSON.stringify(c.listen)} is not a loopback address: the metrics endpoint has no authentication and shows job namespaces, peers and leader state to whoever connects. ` +
      'Listen on 127.0.0.1 or [::1] and scrape from this node, or set metrics.allowRemote = true to expose it on purpose (a trusted management network only)')
  }
  return problems
}

/** Checks the section at config load; throws ERR_CONFIG_INVALID naming each broken rule. */
export function validateMetricsConfig (c: MetricsConfig): void {
  const problems = metricsConfigProblems(c)
  if (problems.length > 0) throw new AgentError('ERR_CONFIG_INVALID', problems.join('; '), { details: problems })
}
