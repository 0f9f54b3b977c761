/**
 * Typed client of the local API over the unix socket. `agentctl` and the tests
 * use it; there are no private endpoints. Error bodies from the daemon come
 * back as AgentError with the daemon's code and message; an agent that does
 * not answer gives ERR_AGENT_UNREACHABLE with what to check.
 */
import { request } from 'node:http'
import { AgentError, isErrorCode, type ErrorBody } from '../errors.ts'
import type { StatusBody } from '../api/schemas.ts'
import type { NodeInventory } from '../inventory/inventory.ts'

export const defaultSocketPath = '/run/agentd/agentd.sock'

export interface AgentClientOptions {
  /** Unix socket of the agent. Default: /run/agentd/agentd.sock. */
  socketPath?: string
  /** Per-request timeout, ms. Default: 30000. */
  timeoutMs?: number
}

export interface RequestOptions {
  signal?: AbortSignal
}

export interface AgentClient {
  readonly socketPath: string
  status(options?: RequestOptions): Promise<StatusBody>
  node(options?: RequestOptions): Promise<NodeInventory>
  health(options?: RequestOptions): Promise<{ ok: true }>
  openapi(options?: RequestOptions): Promise<Record<string, unknown>>
  /** Any route: parsed JSON of a 2xx response, AgentError otherwise. */
  call<T>(method: string, path: string, body?: unknown, options?: RequestOptions): Promise<T>
}

export function createAgentClient (options: AgentClientOptions = {}): AgentClient {
  const socketPath = options.socketPath ?? defaultSocketPath
  const timeoutMs = options.timeoutMs ?? 30_000

  function call<T> (method: string, path: string, body?: unknown, requestOptions: RequestOptions = {}): Promise<T> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
    return new Promise<T>((resolve, reject) => {
      const req = request({
        socketPath,
        method,
        path,
        timeout: timeoutMs,
        headers: payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': payload.length },
        ...(requestOptions.signal !== undefined ? { signal: requestOptions.signal } : {}),
      }, res => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('error', reject)
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          let parsed: unknown
          try {
            parsed = text === '' ? undefined : JSON.parse(text)
          } catch (cause) {
            reject(new AgentError('ERR_INTERNAL', `agent at ${socketPath} answered ${res.statusCode} with a body that is not JSON`, { cause }))
            return
          }
          if (res.statusCode !== undefined && res.statusCode >= 200 && res.statusCode < 300) resolve(parsed as T)
          else reject(errorFromBody(parsed, res.statusCode ?? 0))
        })
      })
      req.on('timeout', () => req.destroy(new AgentError('ERR_AGENT_UNREACHABLE', `agent at ${socketPath} did not answer within ${timeoutMs} ms`)))
      req.on('error', err => reject(err instanceof AgentError ? err : unreachable(socketPath, err as NodeJS.ErrnoException)))
      req.end(payload)
    })
  }

  return {
    socketPath,
    call,
    status: o => call('GET', '/v1/status', undefined, o),
    node: o => call('GET', '/v1/node', undefined, o),
    health: o => call('GET', '/healthz', undefined, o),
    openapi: o => call('GET', '/v1/openapi.json', undefined, o),
  }
}

function errorFromBody (body: unknown, status: number): AgentError {
  const error = (body as Partial<ErrorBody> | undefined)?.error
  if (error !== undefined && isErrorCode(error.code) && typeof error.message === 'string') {
    return new AgentError(error.code, error.message, { details: error.details })
  }
  return new AgentError('ERR_INTERNAL', `agent answered HTTP ${status} without an error body`)
}

function unreachable (socketPath: string, err: NodeJS.ErrnoException): AgentError {
  const why = err.code === 'ENOENT'
    ? 'no socket there'
    : err.code === 'ECONNREFUSED'
      ? 'a stale socket, no agent listening'
      : err.code === 'EACCES'
        ? 'permission denied (join the socket\'s group, usually agentd)'
        : err.message
  return new AgentError('ERR_AGENT_UNREACHABLE',
    `no agent answers at ${socketPath}: ${why}. Is agentd running? (systemctl status agentd; or pass --socket / AGENTD_SOCKET)`,
    { cause: err })
}
