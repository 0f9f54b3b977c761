/**
 * What routes ask of the API's authorization (agent/api/authorization.ts
 * implements both; AUTHORIZATION.md lists each route's class): refusals that
 * name the caller, and the namespace ownership checks of routes that store
 * or read state keys. Declared here so the routes depend on no file above them.
 */
import type { FastifyRequest } from 'fastify'
import type { AgentError } from '../../../core/errors.ts'

/** The rules of one app, for the checks routes make themselves. */
export interface Authorization {
  /** ERR_FORBIDDEN saying that the caller may not `action` and who may (`who`); logs the refusal (warn). */
  forbidden(request: FastifyRequest, action: string, who: string, details?: Record<string, unknown>): AgentError
  /** Who passes admin checks, for messages ("root, the agent's uid 0, ..."). */
  admins(): string
}

/**
 * The namespace ownership check of the /v1/state routes and of the routes
 * that store or read state keys for a caller (worker registration, publish
 * from keys). Rules for a caller that is not an admin:
 * - weights/... namespaces (published and pulled weights, stored by the
 *   weight-transfer agent): read by anyone; changed only through /v1/weights.
 * - any other namespace: nobody owns it while it holds no key (a store
 *   claims it for the caller's uid); then only its owner's uid uses it, read
 *   or write. Keys the agent stored for itself (owner 'agent') are admins' only.
 * - a namespace nobody owns cannot be written (claimed) while a namespace
 *   above or below it ("job1" or "job1/actor/x" for "job1/actor") belongs to
 *   someone else: a uid's prefix operations ("drop job1/") never meet another
 *   uid's keys planted under its namespaces.
 * The checks are synchronous: a route calls `check` and starts its operation
 * in the same tick, so ownership cannot change in between.
 */
export interface NamespaceGuard {
  /** Namespaces of the keys named (keys that do not parse are left to the operation, which refuses them). */
  ofKeys(keys: Iterable<string>): string[]
  /**
   * Namespaces holding keys that a prefix can select: those whose keys all
   * start with it, and those it reaches into (a prefix that starts with
   * "<namespace>/", whether or not a key matches it). One pass over the
   * stored keys however many prefixes.
   */
  ofPrefixes(prefixes: readonly string[]): string[]
  /**
   * ERR_FORBIDDEN unless the caller may `use` every one of `namespaces`
   * (given as a function when costly: not called for admins); `action` says
   * what it tried ("drop keys").
   */
  check(request: FastifyRequest, namespaces: Iterable<string> | (() => Iterable<string>), use: 'read' | 'write', action: string): void
  /**
   * check(write), then claims the namespaces for the caller's uid (the
   * owner of those nobody owns yet); returns the release, to call once the
   * store settled.
   */
  claimForStore(request: FastifyRequest, namespaces: Iterable<string>, action: string): () => void
}
