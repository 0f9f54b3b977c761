/**
 * Maps whatever a route or fastify raised to `{ error: { code, message } }`
 * with a matching HTTP status. Bad client input is 4xx, never a crash; only
 * unexpected errors are 500 and logged.
 */
import { nodeHttp } from '../../core/node-http.ts'
import type { Socket } from 'node:net'
import { finished } from 'node:stream'
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import type { Logger } from 'pino'
import { AgentError, toErrorBody, type ErrorCode } from '../../core/errors.ts'
import { httpStatusOf } from './error-status.ts'

const fastifyCodes: Record<string, ErrorCode> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'ERR_BODY_TOO_LARGE',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'ERR_UNSUPPORTED_MEDIA_TYPE',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'ERR_BAD_REQUEST',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'ERR_BAD_REQUEST',
  FST_ERR_CTP_INVALID_JSON_BODY: 'ERR_BAD_REQUEST',
}

export function toAgentError (err: FastifyError | Error): AgentError {
  if (err instanceof AgentError) return err
  const fe = err as FastifyError
  if (fe.validation !== undefined) {
    const where = fe.validationContext ?? 'request'
    return new AgentError('ERR_BAD_REQUEST', `invalid ${where}: ${fe.message}`, { cause: err })
  }
  const mapped = fastifyCodes[fe.code]
  if (mapped !== undefined) return new AgentError(mapped, fe.message, { cause: err })
  if (err instanceof SyntaxError || (fe.statusCode !== undefined && fe.statusCode >= 400 && fe.statusCode < 500)) {
    return new AgentError('ERR_BAD_REQUEST', fe.message, { cause: err })
  }
  return new AgentError('ERR_INTERNAL', 'internal error (see the agent log)', { cause: err })
}

export function createErrorHandler (logger: Logger) {
  return (err: FastifyError, request: FastifyRequest, reply: FastifyReply): void => {
    const mapped = toAgentError(err)
    if (mapped.code === 'ERR_INTERNAL') logger.error({ err, method: request.method, url: request.url }, 'request failed')
    else logger.debug({ code: mapped.code, method: request.method, url: request.url }, 'request rejected')
    if (mapped.code === 'ERR_BODY_TOO_LARGE') {
      answerAfterBody(request, reply, bodyTooLarge(request, mapped))
      return
    }
    void reply.status(httpStatusOf(mapped)).send(toErrorBody(mapped))
  }
}

/** ERR_BODY_TOO_LARGE that says which limit the body broke and where it comes from. */
function bodyTooLarge (request: FastifyRequest, cause: AgentError): AgentError {
  const limit = request.routeOptions.bodyLimit
  const origin = limit === request.server.initialConfig.bodyLimit ? 'api.bodyLimitBytes' : 'the largest body its schema admits'
  return new AgentError('ERR_BODY_TOO_LARGE', `request body larger than the ${limit} bytes ${request.method} ${request.routeOptions.url ?? request.url} accepts (${origin})`, { cause })
}

/**
 * Answers `err` once the rest of the refused body has been read and discarded.
 * Fastify refuses a body over the limit before reading it (or midway) and closes
 * the connection after the answer: a client that sends its whole body before
 * reading (Python's http.client, node's http for bodies larger than the socket
 * buffers) then hits a closed socket (EPIPE) and never sees the 413. Reading
 * costs no memory and is bounded like any request's reception, by
 * api.requestTimeoutMs (a sender slower than that gets the timeout's 400 from
 * createClientErrorHandler instead). The connection is closed after the answer.
 */
function answerAfterBody (request: FastifyRequest, reply: FastifyReply, err: AgentError): void {
  const send = (): void => { void reply.status(httpStatusOf(err)).send(toErrorBody(err)) }
  if (request.raw.complete) {
    send()
    return
  }
  finished(request.raw, { writable: false }, failed => {
    if (failed === undefined && !reply.raw.destroyed) send()
  })
  request.raw.resume()
}

export function notFoundHandler (request: FastifyRequest, reply: FastifyReply): void {
  const err = new AgentError('ERR_NOT_FOUND', `no route ${request.method} ${request.url}`)
  void reply.status(httpStatusOf(err)).send(toErrorBody(err))
}

/**
 * Node's 'clientError' for a request the server could not take: not received
 * in full within api.requestTimeoutMs, malformed, or headers too large. Answers
 * ERR_BAD_REQUEST (unless a response on the connection has already started:
 * nothing is written into an event stream) and closes the connection. Logged
 * at debug only: a caller can cause one per connection.
 */
export function createClientErrorHandler (logger: Logger, requestTimeoutMs: number) {
  return (err: NodeJS.ErrnoException, socket: Socket): void => {
    if (err.code === 'ECONNRESET' || socket.destroyed) return
    const message = err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? `request not received in full within ${requestTimeoutMs} ms (api.requestTimeoutMs)`
      : err.code === 'HPE_HEADER_OVERFLOW' ? 'request headers too large' : `malformed HTTP request (${err.code ?? err.message})`
    const mapped = new AgentError('ERR_BAD_REQUEST', message, { cause: err })
    logger.debug({ code: err.code }, 'HTTP request refused, connection closed')
    // The response in flight on this connection, as node's own handler checks it.
    const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage
    if (socket.writable && inFlight?.headersSent !== true) {
      const status = httpStatusOf(mapped)
      const body = JSON.stringify(toErrorBody(mapped))
      socket.write(`HTTP/1.1 ${status} ${nodeHttp.STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`)
    }
    socket.destroy()
  }
}
