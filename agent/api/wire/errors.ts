/**
 * The error body every route may answer with. core/errors.ts holds the codes
 * and the ErrorBody type; this is its schema and the responses a route lists.
 */
import { Type } from '@sinclair/typebox'

export const ErrorBodySchema = Type.Object({
  error: Type.Object({
    code: Type.String({ description: 'Stable error code, e.g. ERR_BAD_REQUEST' }),
    message: Type.String(),
    details: Type.Optional(Type.Unknown()),
  }),
}, { $id: 'ErrorBody', description: 'Every error response' })

/** Error responses every route may return. */
export const errorResponses = {
  400: Type.Ref('ErrorBody'),
  404: Type.Ref('ErrorBody'),
  413: Type.Ref('ErrorBody'),
  500: Type.Ref('ErrorBody'),
  503: Type.Ref('ErrorBody'),
}
