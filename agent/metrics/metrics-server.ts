/**
 * The Prometheus endpoint: a small node:http server on its own TCP address
 * (config `metrics.listen`), separate from the unix-socket API so a scraper
 * needs no access to the socket and gets no access to anything else.
 *
 * Contracts:
 * - GET and HEAD /metrics (a query string is ignored) answer 200 with the text
 *   format 0.0.4; another method on /metrics answers 405 with `Allow`; any
 *   other path answers 404. No request body is read.
 * - Each scrape collects afresh (no cache); scrapes may overlap.
 * - Bound to loopback unless `allowRemote` (checked at config load, and again
 *   on the address actually bound, so a name like localhost cannot end up
 *   on another interface).
 * - start() rejects with an AgentError naming the address when it cannot
 *   listen: ERR_SOCKET_IN_USE (address in use), ERR_CONFIG_INVALID (no such
 *   local address, a privileged port, or a non-loopback bind without
 *   allowRemote). stop() closes every connection; idempotent.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import { nodeHttp } from '../../core/node-http.ts'
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { contentType, renderExposition, type MetricFamily } from './exposition.ts'
import { isLoopbackHost, splitHostPort, type MetricsConfig } from './metrics-config.ts'

export interface MetricsServerOptions extends MetricsConfig {
  /** Most connections open at once; more are closed on accept. Default 64. */
  maxConnections?: number
  /** Time a client has to send its request headers, ms. Default 10000. */
  headersTimeoutMs?: number
}

/** What the endpoint renders: started with the server, stopped after it. */
export interface MetricsSource {
  start?(): void
  stop?(): void
  collect(): Promise<MetricFamily[]>
}

export interface MetricsServerComponents {
  logger: Logger
  source: MetricsSource
}

export interface MetricsServer {
  start(): Promise<void>
  stop(): Promise<void>
  /** host:port actually bound (the port chosen when the config says 0); "" before start. */
  address(): string
}

export function createMetricsServer (options: MetricsServerOptions, components: MetricsServerComponents): MetricsServer {
  const { logger, source } = components
  const { host, port } = splitHostPort(options.listen)
  let server: Server | undefined
  let address = ''
  let stopping: Promise<void> | undefined

  async function answer (request: IncomingMessage, response: ServerResponse): Promise<void> {
    const path = (request.url ?? '').split('?', 1)[0]
    if (path !== '/metrics') {
      reply(response, 404, 'not found: the metrics are at GET /metrics\n')
      return
    }
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      response.setHeader('Allow', 'GET, HEAD')
      reply(response, 405, `method ${request.method ?? ''} not allowed: GET or HEAD /metrics\n`)
      return
    }
    let body: string
    try {
      body = renderExposition(await source.collect())
    } catch (err) {
      logger.error({ err }, 'metrics: rendering failed')
      reply(response, 500, 'metrics could not be rendered; see the agent log\n')
      return
    }
    response.writeHead(200, { 'Content-Type': contentType, 'Content-Length': Buffer.byteLength(body), 'Cache-Control': 'no-store' })
    response.end(request.method === 'HEAD' ? undefined : body)
  }

  return {
    async start () {
      if (server !== undefined) return
      const s = nodeHttp.createServer({ requestTimeout: options.headersTimeoutMs ?? 10_000, headersTimeout: options.headersTimeoutMs ?? 10_000 }, (request, response) => {
        answer(request, response).catch(err => {
          logger.error({ err }, 'metrics: request failed')
          if (!response.headersSent) reply(response, 500, 'internal error\n')
          else response.destroy()
        })
      })
      s.maxConnections = options.maxConnections ?? 64
      await new Promise<void>((resolve, reject) => {
        s.once('error', cause => reject(listenError(options.listen, cause as NodeJS.ErrnoException)))
        s.listen({ host, port }, () => { s.removeAllListeners('error'); resolve() })
      })
      s.on('error', err => logger.error({ err }, 'metrics server error'))
      const bound = s.address() as { address: string, port: number }
      if (!options.allowRemote && !isLoopbackHost(bound.address)) {
        await new Promise(resolve => s.close(resolve))
        throw new AgentError('ERR_CONFIG_INVALID', `metrics.listen ${JSON.stringify(options.listen)} bound ${bound.address}, which is not loopback; set metrics.allowRemote = true to expose the endpoint on purpose`)
      }
      server = s
      address = bound.address.includes(':') ? `[${bound.address}]:${bound.port}` : `${bound.address}:${bound.port}`
      source.start?.()
      logger.info({ address, allowRemote: options.allowRemote }, 'metrics endpoint listening')
      if (options.allowRemote && !isLoopbackHost(bound.address)) {
        logger.warn({ address }, 'the metrics endpoint is reachable from other hosts (metrics.allowRemote): it has no authentication')
      }
    },
    stop () {
      stopping ??= (async () => {
        const s = server
        server = undefined
        if (s === undefined) return
        source.stop?.()
        const closed = new Promise(resolve => s.close(resolve))
        s.closeAllConnections()
        await closed
      })()
      return stopping
    },
    address: () => address,
  }
}

function reply (response: ServerResponse, status: number, text: string): void {
  response.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': Buffer.byteLength(text) })
  response.end(text)
}

function listenError (listen: string, cause: NodeJS.ErrnoException): AgentError {
  const where = `metrics.listen ${JSON.stringify(listen)}`
  switch (cause.code) {
    case 'EADDRINUSE':
      return new AgentError('ERR_SOCKET_IN_USE', `${where}: the address is already in use (another agentd or exporter on that port?); choose a free port, or set metrics.listen = "" to turn the endpoint off`, { cause })
    case 'EADDRNOTAVAIL':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return new AgentError('ERR_CONFIG_INVALID', `${where}: no local interface has that address (${cause.code})`, { cause })
    case 'EACCES':
      return new AgentError('ERR_CONFIG_INVALID', `${where}: not permitted to listen there (a port below 1024 needs privileges)`, { cause })
    default:
      return new AgentError('ERR_SYSTEM', `${where}: cannot listen: ${cause.message}`, { cause })
  }
}
