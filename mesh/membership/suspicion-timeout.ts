/**
 * How long a suspected member has to refute before it is declared dead —
 * memberlist's formula with Lifeguard's confirmation-driven shrinking:
 *
 *   min = suspicionMult × max(1, log10(max(1, members))) × probeIntervalMs
 *   max = suspicionMaxTimeoutMult × min
 *   k   = suspicionMult − 2 expected independent confirmations (0 when fewer
 *         than k other members could confirm)
 *   timeout(c) = max(min, max − (max − min) × log(c + 1) / log(k + 1))
 *
 * with c the confirmations received (distinct members that also suspect it).
 * Pure: the membership table owns the timers.
 */

export interface SuspicionTimeoutOptions {
  suspicionMult: number
  suspicionMaxTimeoutMult: number
  probeIntervalMs: number
}

export interface SuspicionBounds {
  minMs: number
  maxMs: number
  /** Confirmations after which the timeout reaches minMs. */
  expectedConfirmations: number
}

/** Bounds for a cluster of `members` (alive and suspect, this agent included). */
export function suspicionBounds (members: number, options: SuspicionTimeoutOptions): SuspicionBounds {
  const scale = Math.max(1, Math.log10(Math.max(1, members)))
  const minMs = options.suspicionMult * scale * options.probeIntervalMs
  let k = options.suspicionMult - 2
  if (members - 2 < k) k = 0
  return { minMs, maxMs: options.suspicionMaxTimeoutMult * minMs, expectedConfirmations: Math.max(0, k) }
}

/** Timeout after `confirmations` independent confirmations, ms. */
export function suspicionTimeoutMs (bounds: SuspicionBounds, confirmations: number): number {
  const k = bounds.expectedConfirmations
  if (k === 0) return bounds.minMs
  const frac = Math.log(confirmations + 1) / Math.log(k + 1)
  return Math.max(bounds.minMs, Math.floor(bounds.maxMs - (bounds.maxMs - bounds.minMs) * frac))
}
