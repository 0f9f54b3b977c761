/**
 * Maps whatever a route or fastify raised to `{ error: { code, message } }`
 * with a matching HTTP status. Bad client input is 4xx, never a crash; only
 * unexpected errors are 500 and logged.
 */
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
    void reply.status(httpStatusOf(mapped)).send(toErrorBody(mapped))
  }
}

export function notFoundHandler (request: FastifyRequest, reply: FastifyReply): void {
  const err = new AgentError('ERR_NOT_FOUND', `no route ${request.method} ${request.url}`)
  void reply.status(httpStatusOf(err)).send(toErrorBody(err))
}
