/**
 * SWIM failure detection (Das et al. 2002, §3; memberlist's probe loop):
 * each protocol period one member is probed, in a shuffled round-robin order
 * over this agent's neighbors (the `targets`);
 * no answer within the (health-scaled) probe timeout → `indirectProbes` other
 * members are asked to probe it (ping-req); no answer from anyone → suspect.
 *
 * Conclusive evidence short-cuts the suspicion: when the member's port refuses
 * connections here and at a helper (no helper reaching it), the process is
 * gone, not slow, and it is declared dead at once (how a SIGKILLed agent is
 * detected in milliseconds, even by agents too starved to trust their timeouts). A member whose connection closes is probed at once
 * (`probeNow`) instead of waiting for its turn.
 *
 * A probe whose window saw this agent's event loop stall is discarded
 * (local-health.ts), so a paused or starved agent never accuses anyone.
 */
import type { LocalHealth } from './local-health.ts'
import type { Membership } from './membership.ts'
import { systemClock, type Clock, type ClockTimer } from '../../core/clock.ts'

/** What probing a member found. */
export type ProbeOutcome = 'ack' | 'timeout' | 'refused'

export interface Prober {
  /** Probes `target` directly. */
  ping(target: string, timeoutMs: number, signal: AbortSignal): Promise<ProbeOutcome>
  /** Asks `helper` to probe `target` with `timeoutMs`; 'timeout' when the helper does not answer. */
  pingReq(helper: string, target: string, timeoutMs: number, signal: AbortSignal): Promise<ProbeOutcome>
}

export interface FailureDetectorOptions {
  /** Protocol period, ms. */
  probeIntervalMs: number
  /** Direct probe timeout, ms (the indirect phase gets as long again). */
  probeTimeoutMs: number
  /** Helpers asked to probe indirectly. */
  indirectProbes: number
}

export interface FailureDetectorComponents {
  membership: Membership
  prober: Prober
  health: LocalHealth
  log: { debug(obj: object, msg: string): void }
  /**
   * The members to probe and to ask for indirect probes: this agent's
   * neighbors (peer-dialer.ts), whose connections are open. Every member is
   * some agents' neighbor, so every member is probed, and each agent's probe
   * traffic stays independent of the cluster's size. Default: every listed member.
   */
  targets?(): string[]
  /** A member outside the targets was probed (its connection was opened for the probe alone). */
  probedOutside?(peer: string): void
  random?(): number
  /** Default: the system clock. */
  clock?: Clock
}

/**
 * Every this many periods the probe goes to a random listed member outside
 * the targets instead (SWIM's random probing): a member that is nobody's
 * neighbor yet (it joined and died before any link formed) is still probed.
 */
const outsideProbeEvery = 8

export interface FailureDetector {
  start(options: { signal: AbortSignal }): void
  stop(): void
  /** Probes `peerId` now (e.g. its connection closed); one probe per member at a time. */
  probeNow(peerId: string): void
  readonly probes: { sent: number, failed: number, discarded: number }
}

export function createFailureDetector (options: FailureDetectorOptions, components: FailureDetectorComponents): FailureDetector {
  const { membership, prober, health, log } = components
  const random = components.random ?? Math.random
  const clock = components.clock ?? systemClock
  const inFlight = new Set<string>()
  const counters = { sent: 0, failed: 0, discarded: 0 }
  let order: string[] = []
  let controller: AbortController | undefined
  let timer: ClockTimer | undefined

  const listedLive = (): string[] => membership.livePeerIds()
  /** The targets that are listed and not dead; O(targets), not O(members), per period. */
  const probeable = (): string[] => {
    if (components.targets === undefined) return listedLive()
    const targets = components.targets()
    // No neighbor yet (joining, or cut off): probe the members themselves rather than no one.
    if (targets.length === 0) return listedLive()
    return targets.filter(p => { const m = membership.get(p); return m !== undefined && m.state !== 'dead' })
  }

  const nextTarget = (): string | undefined => {
    const live = new Set(probeable())
    while (order.length > 0) {
      const next = order.pop()!
      if (live.has(next)) return next
    }
    order = shuffle([...live], random)
    return order.pop()
  }

  async function probe (target: string, signal: AbortSignal): Promise<void> {
    if (inFlight.has(target)) return
    inFlight.add(target)
    counters.sent++
    const began = clock.monotonic()
    try {
      const timeoutMs = health.scale(options.probeTimeoutMs)
      const direct = await prober.ping(target, timeoutMs, signal)
      if (signal.aborted) return
      if (direct === 'ack') {
        membership.heard(target)
        health.probeSucceeded()
        return
      }
      const helpers = shuffle(probeable().filter(p => p !== target), random).slice(0, options.indirectProbes)
      const indirect = await Promise.all(helpers.map(h => prober.pingReq(h, target, timeoutMs, signal)))
      if (signal.aborted) return
      if (indirect.includes('ack')) {
        membership.heard(target)
        return
      }
      // Refused here, and by a helper (or no helper to ask: a two-node cluster). A helper that did
      // not answer in time says nothing either way. A refusal is the kernel's answer, not a missed
      // deadline: it holds even when this agent stalled meanwhile (overloaded agents still notice
      // a killed one), where a timeout would not.
      const refused = direct === 'refused' && (helpers.length === 0 || (indirect.includes('refused') && indirect.every(o => o !== 'ack')))
      if (!refused && health.stalledSince(began)) {
        counters.discarded++
        log.debug({ peer: target }, 'probe discarded: this agent stalled during it')
        return
      }
      counters.failed++
      log.debug({ peer: target, direct, indirect }, 'probe failed')
      if (refused) {
        membership.declareDead(target, 'refused')
      } else {
        if (helpers.length > 0) health.probeFailedEverywhere()
        membership.suspect(target)
      }
    } finally {
      inFlight.delete(target)
    }
  }

  let ticks = 0
  /** A random listed member that is not a target, or undefined when there is none (or no targets). */
  const outsideTarget = (): string | undefined => {
    if (components.targets === undefined) return undefined
    const targets = new Set(components.targets())
    if (targets.size === 0) return undefined
    const outside = membership.livePeerIds().filter(p => !targets.has(p))
    return outside[Math.floor(random() * outside.length)]
  }

  const tick = (): void => {
    if (controller === undefined || controller.signal.aborted) return
    const signal = controller.signal
    const outside = ++ticks % outsideProbeEvery === 0 ? outsideTarget() : undefined
    const target = outside ?? nextTarget()
    const began = clock.monotonic()
    const done = target === undefined ? Promise.resolve() : probe(target, signal).finally(() => { if (outside !== undefined) components.probedOutside?.(outside) })
    void done.catch(() => {}).finally(() => {
      if (signal.aborted) return
      // One probe per period; a probe that outlasts the period delays the next (memberlist).
      const wait = Math.max(0, health.scale(options.probeIntervalMs) - (clock.monotonic() - began))
      timer = clock.setTimeout(tick, wait)
    })
  }

  return {
    start ({ signal }) {
      controller = new AbortController()
      signal.addEventListener('abort', () => this.stop(), { once: true })
      timer = clock.setTimeout(tick, options.probeIntervalMs)
    },
    stop () {
      controller?.abort()
      clock.clearTimeout(timer)
    },
    probeNow (peerId) {
      const m = membership.get(peerId)
      if (controller === undefined || controller.signal.aborted || m === undefined || m.state === 'dead') return
      void probe(peerId, controller.signal).catch(() => {})
    },
    probes: counters,
  }
}

function shuffle<T> (items: T[], random: () => number): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1))
    const x = items[i]!
    items[i] = items[j]!
    items[j] = x
  }
  return items
}
