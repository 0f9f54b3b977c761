/**
 * Route schemas compiled at their first use instead of at start-up. Fastify
 * compiles every route's request validators (Ajv) and response serializers
 * (fast-json-stringify) when the app becomes ready: ~0.4 s of CPU for this
 * API's ~80 routes, on every agent start, for routes most agents never serve.
 * Here each route gets a stand-in that compiles the real function the first
 * time it runs and then forwards to it; answers and errors are the ones the
 * real function gives.
 *
 * A schema that does not compile fails at the first request of its route, a
 * 500, instead of at start-up; `compileAll()` compiles every stand-in now and
 * throws the first such error (the API's tests call it, so no broken schema
 * ships).
 */
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler'
import type { FastifyServerOptions } from 'fastify'

type CompilersFactory = NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>
type ValidatorBuilder = NonNullable<CompilersFactory['buildValidator']>
type SerializerBuilder = NonNullable<CompilersFactory['buildSerializer']>
/** A compiled validator as fastify calls it: `false` (or a rejecting promise) and `.errors` on a failure. */
type Validator = ((data: unknown) => unknown) & { errors?: unknown }
/** Fastify's route compilers at run time: one route's description in, its compiled function out. */
type RouteCompiler = (route: unknown) => Validator
type Builder = (externalSchemas: unknown, options: unknown) => RouteCompiler

export interface LazySchemaCompilers {
  buildValidator: ValidatorBuilder
  buildSerializer: SerializerBuilder
  /** Compiles every route's validators and serializers not compiled yet; throws the first compile error. */
  compileAll(): void
}

/** Wraps `validators` (default compiler of response serializers: fastify's own) so that routes compile lazily. */
export function lazySchemaCompilers (validators: ValidatorBuilder): LazySchemaCompilers {
  const pending = new Set<() => void>()
  const lazyBuilder = (builder: Builder): Builder => (externalSchemas, options) => {
    const compileRoute = builder(externalSchemas, options)
    return route => {
      let compiled: Validator | undefined
      const compile = (): Validator => {
        compiled ??= compileRoute(route)
        pending.delete(compile)
        return compiled
      }
      pending.add(compile)
      const standIn: Validator = data => {
        const real = compiled ?? compile()
        const result = real(data)
        // Ajv sets .errors on its function after each call; fastify reads them from the one it holds.
        standIn.errors = real.errors
        return result
      }
      return standIn
    }
  }
  return {
    buildValidator: lazyBuilder(validators as unknown as Builder) as unknown as ValidatorBuilder,
    buildSerializer: lazyBuilder(SerializerSelector() as unknown as Builder) as unknown as SerializerBuilder,
    compileAll () { for (const compile of [...pending]) compile() },
  }
}
