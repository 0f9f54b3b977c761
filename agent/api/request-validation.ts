/**
 * Validation of requests against their route schemas, one Ajv per kind of
 * input. Path parameters, query strings and headers are text on the wire:
 * their declared types are reached by coercion ("5" is 5), as fastify does by
 * default. A JSON body carries its own types and is checked as sent: `null`,
 * `"0"` or `true` where an integer is declared is ERR_BAD_REQUEST naming the
 * field, never a silent 0 or 1 (fastify's default coerces bodies too).
 *
 * Unknown fields are refused, never stripped: where a schema declares
 * `additionalProperties: false`, a field it does not list is ERR_BAD_REQUEST
 * naming the field (schemaErrorFormatter), in a body and in a query string
 * alike. Fastify's default (`removeAdditional: true`) deletes such a field
 * and lets the request through, so a misspelt optional field was silently
 * ignored and a field the caller may not set (a submission's internal
 * `retried`) silently dropped.
 *
 * Both instances come from fastify's own compiler (@fastify/ajv-compiler), so
 * they keep its other defaults (useDefaults, ajv-formats, the shared schemas
 * of `addSchema`, fastify's `ajv` option); both set `removeAdditional: false`,
 * and the body's also `coerceTypes: false`.
 */
import { AjvCompiler } from '@fastify/ajv-compiler'
import type { FastifySchemaCompiler, FastifyServerOptions } from 'fastify'

type SchemaErrorFormatter = NonNullable<FastifyServerOptions['schemaErrorFormatter']>
type ValidatorBuilder = NonNullable<NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>['buildValidator']>
type RouteCompiler = FastifySchemaCompiler<unknown>
/** What a pooled builder of @fastify/ajv-compiler is at run time (its typings declare an Ajv `compile` instead). */
type PooledBuilder = (externalSchemas: Record<string, unknown>, options: { customOptions?: Record<string, unknown> }) => RouteCompiler

/** A `schemaController.compilersFactory.buildValidator` for Fastify(); one per app (it holds the Ajv instances). */
export function requestValidatorBuilder (): ValidatorBuilder {
  const textParts = AjvCompiler() as unknown as PooledBuilder
  const jsonBody = AjvCompiler() as unknown as PooledBuilder
  const build: PooledBuilder = (externalSchemas, options) => {
    const forText = textParts(externalSchemas, { ...options, customOptions: { ...options.customOptions, removeAdditional: false } })
    const forBody = jsonBody(externalSchemas, { ...options, customOptions: { ...options.customOptions, removeAdditional: false, coerceTypes: false } })
    return route => route.httpPart === 'body' ? forBody(route) : forText(route)
  }
  return build as unknown as ValidatorBuilder
}

/**
 * Fastify's message for a failed validation ("body/batch must be integer"),
 * except that an unknown field is named: "body/retried is not a field of
 * this request" instead of Ajv's "body must NOT have additional properties".
 */
export const schemaErrorFormatter: SchemaErrorFormatter = (errors, dataVar) => new Error(errors.map(e => {
  const at = `${dataVar}${e.instancePath ?? ''}`
  const unknown = e.keyword === 'additionalProperties' ? (e.params as { additionalProperty?: string }).additionalProperty : undefined
  return unknown !== undefined ? `${at}/${unknown} is not a field of this request` : `${at} ${e.message ?? 'is invalid'}`
}).join(', '))
