/**
 * Limits on the local API's connections, so that a process allowed on the
 * socket cannot use up the agent's descriptors or memory by opening sockets
 * or by sending a request slowly:
 *
 * - a cap on open connections (node's `net.Server.maxConnections`): a
 *   connection over it is closed as soon as it is accepted, and a warning is
 *   logged, at most one per interval, with how many were refused;
 * - a bound on receiving one request, headers and body (node's HTTP server
 *   `requestTimeout`): a request not received in full by then is answered
 *   with an error and its connection closed. The clock starts when the
 *   connection opens (first request) or when the request's first byte comes
 *   (later ones), and stops once the request is received: the response (an
 *   event stream, a long poll, a waiting lock request) may take any time.
 */
import type { ServerOptions } from 'node:http'
import type { Server } from 'node:net'
import type { Logger } from 'pino'

export interface ConnectionLimits {
  /** Most connections open at once on the socket. Default: 512. */
  maxConnections: number
  /** Longest time to receive one whole request (headers and body), ms. Default: 30000. */
  requestTimeoutMs: number
}

/**
 * 512 connections: a worker holds two or three (its event streams, one call in
 * flight), a node runs tens of workers, so this is far above real use while
 * bounding descriptors. 30 s: a 1 MiB body (the default api.bodyLimitBytes) at
 * 35 KiB/s; local callers send a body in milliseconds.
 */
export const defaultConnectionLimits: Readonly<ConnectionLimits> = { maxConnections: 512, requestTimeoutMs: 30_000 }

/** Least time between two warnings about refused connections, ms. */
export const refusedWarningIntervalMs = 10_000

/**
 * The node HTTP server options that bound request reception. Node checks for
 * late requests every `connectionsCheckingInterval` (30 s by default, which
 * would let a 30 s timeout run to 60): here a tenth of the timeout, at most
 * 1 s. The headers' own bound stays node's default, min(60 s, requestTimeout).
 */
export function receptionTimeoutOptions (requestTimeoutMs: number): Pick<ServerOptions, 'requestTimeout' | 'connectionsCheckingInterval'> {
  return { requestTimeout: requestTimeoutMs, connectionsCheckingInterval: Math.max(10, Math.min(1000, Math.floor(requestTimeoutMs / 10))) }
}

export interface ConnectionCapOptions {
  maxConnections: number
  /** Least time between two warnings, ms. Default: refusedWarningIntervalMs. */
  warningIntervalMs?: number
}

/**
 * Caps `server`'s open connections. The first refusal is logged at once; later
 * ones are counted and logged as one warning per interval (nothing when none
 * came). The interval's timer is unref'd and ends with the server ('close').
 */
export function capConnections (server: Server, options: ConnectionCapOptions, logger: Logger): void {
  const { maxConnections } = options
  const intervalMs = options.warningIntervalMs ?? refusedWarningIntervalMs
  server.maxConnections = maxConnections
  let refused = 0 // since the last warning
  let holdingBack: NodeJS.Timeout | undefined // set for intervalMs after each warning
  const warn = (): void => {
    logger.warn({ maxConnections, refused, intervalMs }, 'local API connections refused: api.maxConnections are open')
    refused = 0
    holdingBack = setTimeout(() => {
      holdingBack = undefined
      if (refused > 0) warn()
    }, intervalMs).unref()
  }
  server.on('drop', () => {
    refused++
    if (holdingBack === undefined) warn()
  })
  server.once('close', () => clearTimeout(holdingBack))
}
