/**
 * Validation of requests against their route schemas, one Ajv per kind of
 * input. Path parameters, query strings and headers are text on the wire:
 * their declared types are reached by coercion ("5" is 5), as fastify does by
 * default. A JSON body carries its own types and is checked as sent: `null`,
 * `"0"` or `true` where an integer is declared is ERR_BAD_REQUEST naming the
 * field, never a silent 0 or 1 (fastify's default coerces bodies too).
 *
 * Both instances come from fastify's own compiler (@fastify/ajv-compiler), so
 * they keep its defaults (useDefaults, removeAdditional, ajv-formats, the
 * shared schemas of `addSchema`, fastify's `ajv` option); the body's differs
 * only in `coerceTypes: false`.
 */
import { AjvCompiler } from '@fastify/ajv-compiler'
import type { FastifySchemaCompiler, FastifyServerOptions } from 'fastify'

type ValidatorBuilder = NonNullable<NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>['buildValidator']>
type RouteCompiler = FastifySchemaCompiler<unknown>
/** What a pooled builder of @fastify/ajv-compiler is at run time (its typings declare an Ajv `compile` instead). */
type PooledBuilder = (externalSchemas: Record<string, unknown>, options: { customOptions?: Record<string, unknown> }) => RouteCompiler

/** A `schemaController.compilersFactory.buildValidator` for Fastify(); one per app (it holds the Ajv instances). */
export function requestValidatorBuilder (): ValidatorBuilder {
  const textParts = AjvCompiler() as unknown as PooledBuilder
  const jsonBody = AjvCompiler() as unknown as PooledBuilder
  const build: PooledBuilder = (externalSchemas, options) => {
    const forText = textParts(externalSchemas, options)
    const forBody = jsonBody(externalSchemas, { ...options, customOptions: { ...options.customOptions, coerceTypes: false } })
    return route => route.httpPart === 'body' ? forBody(route) : forText(route)
  }
  return build as unknown as ValidatorBuilder
}
