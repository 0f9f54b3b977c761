/**
 * RLBoost's load balancer (Algorithm 2, §4.2.1) as pure functions over the
 * manager's view of its instances. The manager counts, per instance, the
 * requests it sent there that have not produced a token yet (`pending`: the
 * engine has them queued; a token comes out only after the prefill, which
 * runs when the engine schedules a request) and those streaming tokens
 * (`executing`). Counting on the client rather than reading the engine's
 * metrics works the same for vLLM, SGLang and the tests' engine double.
 *
 * - selectInstance (SELECTINSTANCE, lines 1–12): join the shortest queue
 *   with delayed dispatch. Among instances with fewer than Θ pending, the one
 *   with the fewest pending; none when every instance has Θ or more (the
 *   caller holds the request until a completion). Ties go to the fewest
 *   executing, then to the first in the given order (deterministic).
 * - rebalance (CONTINUOUSLB, lines 13–27), one round: when an instance has
 *   no pending request and another has some, migrate one pending request
 *   from the one with the most pending; otherwise, when an instance
 *   executes nothing, migrate max(executing_j − B, 0) executing requests from
 *   the instance j executing the most, B being the batch size where the
 *   generation throughput plateaus (batchingPlateau). Without a profile (the
 *   first step: the paper captures it online during the previous step) only
 *   pending requests move.
 * - Baselines the paper compares with: round-robin and join-the-shortest-
 *   queue without delayed dispatch (a request goes out at once to the
 *   instance with the fewest outstanding requests), neither rebalancing.
 * - batchingPlateau: the smallest batch size whose measured throughput
 *   (tokens per second, all sequences together) is within `tolerance` of
 *   the best measured. The paper does not give its rule; this is ours.
 */

export interface InstanceLoad {
  id: string
  pending: number
  executing: number
}

/** Throughput (tokens/s) measured at batch sizes: the inference batching profile table 𝒫. */
export type BatchingProfile = ReadonlyArray<{ batch: number, tokensPerS: number }>

export interface Migration {
  from: string
  to: string
  /** Which requests move: not yet producing tokens, or streaming ones. */
  kind: 'pending' | 'executing'
  count: number
}

export function selectInstance (instances: readonly InstanceLoad[], maxPending: number): string | null {
  let best: InstanceLoad | undefined
  for (const i of instances) {
    if (i.pending >= maxPending) continue
    if (best === undefined || i.pending < best.pending || (i.pending === best.pending && i.executing < best.executing)) best = i
  }
  return best?.id ?? null
}

/** Join the shortest queue, dispatching at once: the fewest outstanding (pending + executing); the first on ties. */
export function selectShortestQueue (instances: readonly InstanceLoad[]): string | null {
  let best: InstanceLoad | undefined
  for (const i of instances) if (best === undefined || i.pending + i.executing < best.pending + best.executing) best = i
  return best?.id ?? null
}

/** Round-robin: the `turn`-th instance, cyclically. */
export function selectRoundRobin (instances: readonly InstanceLoad[], turn: number): string | null {
  return instances.length === 0 ? null : instances[turn % instances.length]!.id
}

export function batchingPlateau (profile: BatchingProfile, tolerance = 0.05): number | null {
  if (profile.length === 0) return null
  const best = Math.max(...profile.map(p => p.tokensPerS))
  const sorted = [...profile].sort((a, b) => a.batch - b.batch)
  return sorted.find(p => p.tokensPerS >= (1 - tolerance) * best)!.batch
}

/** The one move of a CONTINUOUSLB round, or null when the load is balanced. */
export function rebalance (instances: readonly InstanceLoad[], plateau: number | null): Migration | null {
  const argmax = (key: (i: InstanceLoad) => number): InstanceLoad =>
    instances.reduce((a, b) => (key(b) > key(a) ? b : a))
  if (instances.length < 2) return null
  const idleQueue = instances.filter(i => i.pending === 0).reduce<InstanceLoad | undefined>((a, b) => (a === undefined || b.executing < a.executing ? b : a), undefined)
  const mostPending = argmax(i => i.pending)
  if (idleQueue !== undefined && mostPending.pending > 0) {
    return { from: mostPending.id, to: idleQueue.id, kind: 'pending', count: 1 }
  }
  if (plateau === null || instances.some(i => i.pending > 0)) return null
  const idle = instances.find(i => i.executing === 0)
  const busiest = argmax(i => i.executing)
  if (idle === undefined || busiest === idle) return null
  const count = Math.max(busiest.executing - plateau, 0)
  return count > 0 ? { from: busiest.id, to: idle.id, kind: 'executing', count } : null
}
