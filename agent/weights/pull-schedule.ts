/**
 * The schedule of one pull (puller.ts): which slice enters the window next,
 * which source fetches it, and the queue of its pieces.
 *
 * - A slice is admitted when a lane of some source finds no piece to fetch:
 *   it is chosen for that source, given to it (its owner), and its pieces
 *   queued; only lanes of the owner take them. Into keys, admitted slices
 *   hold window bytes until stored (`release`): a slice is admitted while it
 *   fits (one at least). `allocate` runs at admission (the slice's scratch).
 * - The primary source (a full holder: the pull's `from`, with its
 *   fallbacks) can fetch every slice. Without peers it takes them in order.
 * - Peers (the swarm, PROTOCOL.md "Swarm") fetch only the tensors their
 *   HAVE says they hold, chosen at random among those (pullers spread over
 *   different tensors). The primary takes what no live peer holds or
 *   fetches, walking the slices in order from a random start (pullers that
 *   start together begin far apart and meet late: fewer take the same
 *   tensor from the publisher in the moment before their HAVEs tell); a tensor a peer has been fetching for `peerWaitMs`
 *   without holding it becomes the primary's too (a stuck peer does not hold
 *   a pull up). Once the pull has peers, the primary fetches at most
 *   `primarySlices` slices at a time: the publisher's uplink is shared by
 *   every puller, and a tensor fetched by many at once reaches none soon.
 *   So it does until `swarmProbeUntil` too (pullers that start together
 *   have not heard of each other yet; a pull alone then goes on at full
 *   depth).
 * - A dropped peer (failed, timed out, served a bad chunk) gives its slices
 *   to the primary; pieces it had in flight come back through `retry`.
 * Pure bookkeeping: no I/O besides `allocate`.
 */
import { hasBit, type Have } from './protocol.ts'

export interface PullSource {
  readonly address: string
  /** The pull's full holder: it fetches any slice. */
  readonly primary: boolean
  /** A peer's HAVE: undefined until first answered. */
  have?: Have
  /** Why it is no longer used; undefined while it is. */
  dropped?: string
  /** Payload bytes that landed from it, verified. */
  bytes: number
}

export interface Piece {
  slice: number
  offset: number
  length: number
  attempts: number
}

export interface PullScheduleOptions {
  /** The pull's slices: the tensor each is of, and its bytes. */
  slices: ReadonlyArray<{ index: number, bytes: number }>
  /** The pieces still to fetch, per slice (none: nothing to fetch for it). */
  pieces: ReadonlyArray<ReadonlyArray<{ offset: number, length: number }>>
  /** Window bytes for admitted slices; undefined: slices take none (into a file). */
  windowBytes?: number
  primary: PullSource
  /** How long the primary leaves a tensor to a peer fetching it. */
  peerWaitMs: number
  /** Slices the primary fetches at once while the pull has peers. Default 2. */
  primarySlices?: number
  /** Until this time (Date.now()), the primary is held to `primarySlices` even without peers: pullers starting together find each other first. */
  swarmProbeUntil?: number
  /** Runs when a slice is admitted, before its pieces are queued (its scratch). */
  allocate(slice: number): Promise<void>
  /** Tells that a slice was admitted (its tensor is being fetched). */
  admitted?(slice: number): void
  random?: () => number
}

export interface PullSchedule {
  /** The next piece for a lane of `source`; undefined once nothing is left for it (the pull over, failed, or the source dropped). */
  take(source: PullSource): Promise<Piece | undefined>
  /** A piece goes back to the queue (a refetch, or its source failed). */
  retry(piece: Piece): void
  /** A piece verified: true when it was its slice's last. */
  landed(piece: Piece): boolean
  /** A stored slice leaves the window. */
  release(slice: number): void
  addPeer(peer: PullSource): void
  /** Stops using `source`: its slices go to the primary. */
  drop(source: PullSource, reason: string): void
  /** Something changed outside (a HAVE arrived): waiting lanes look again. */
  wake(): void
  fail(err: Error): void
  readonly failure: Error | undefined
  /** Pieces not landed yet. */
  readonly remaining: number
  /** Resolves when every piece landed; rejects with the failure. */
  readonly finished: Promise<void>
  readonly peers: readonly PullSource[]
}

export function createPullSchedule (o: PullScheduleOptions): PullSchedule {
  const random = o.random ?? Math.random
  const peers: PullSource[] = []
  /** Where the primary of a pull that may have peers starts walking the slices. */
  const ringStart = Math.floor(random() * o.slices.length)
  const owner: Array<PullSource | undefined> = o.slices.map(() => undefined)
  const piecesLeft = o.pieces.map(p => p.length)
  /** Slices with pieces to fetch, not admitted yet, in order. */
  const unadmitted = new Set(o.slices.flatMap((_, i) => piecesLeft[i]! > 0 ? [i] : []))
  const queue: Piece[] = []
  const again: Piece[] = []
  /** When a live peer was first seen fetching each tensor (not holding it). */
  const fetchingSince = new Map<number, number>()
  let remaining = piecesLeft.reduce((a, b) => a + b, 0)
  let inWindow = 0
  let admitting = false
  let failure: Error | undefined
  const finished = Promise.withResolvers<void>()
  finished.promise.catch(() => {})
  if (remaining === 0) finished.resolve()
  let waiting: Array<() => void> = []
  let timer: NodeJS.Timeout | undefined
  const wake = (): void => { const w = waiting; waiting = []; for (const f of w) f() }
  const live = (): PullSource[] => peers.filter(p => p.dropped === undefined && p.have !== undefined)

  function primaryMay (slice: number, now: number): { now: boolean, at?: number } {
    const index = o.slices[slice]!.index
    const others = live()
    if (others.some(p => hasBit(p.have!.held, index))) return { now: false }
    if (!others.some(p => hasBit(p.have!.fetching, index))) { fetchingSince.delete(index); return { now: true } }
    const since = fetchingSince.get(index) ?? now
    fetchingSince.set(index, since)
    return since + o.peerWaitMs <= now ? { now: true } : { now: false, at: since + o.peerWaitMs }
  }

  /** A slice `source` may be given now; else when to look again (the primary waiting on a peer). */
  function choose (source: PullSource): { slice?: number, retryAt?: number } {
    // A pull that cannot have peers walks its slices in order (sequential reads at the source).
    if (source.primary && peers.length === 0 && o.swarmProbeUntil === undefined) return { slice: unadmitted.values().next().value }
    const now = Date.now()
    const candidates: number[] = []
    let retryAt: number | undefined
    for (const i of unadmitted) {
      if (!source.primary) {
        if (source.have !== undefined && hasBit(source.have.held, o.slices[i]!.index)) candidates.push(i)
        continue
      }
      const may = primaryMay(i, now)
      if (may.now) candidates.push(i)
      else if (may.at !== undefined) retryAt = Math.min(retryAt ?? Infinity, may.at)
    }
    if (candidates.length === 0) return retryAt !== undefined ? { retryAt } : {}
    if (source.primary) return { slice: candidates.find(i => i >= ringStart) ?? candidates[0]! }
    return { slice: candidates[Math.floor(random() * candidates.length)]! }
  }

  /** Admits one slice for `source` if it fits; true when one was. */
  async function admitFor (source: PullSource): Promise<{ admitted: boolean, retryAt?: number }> {
    if (admitting) return { admitted: false }
    const { slice, retryAt } = choose(source)
    if (slice === undefined) return { admitted: false, ...(retryAt !== undefined ? { retryAt } : {}) }
    if (source.primary && (peers.length > 0 || Date.now() < (o.swarmProbeUntil ?? 0)) && owner.filter((w, i) => w === source && piecesLeft[i]! > 0).length >= (o.primarySlices ?? 2)) {
      return { admitted: false, ...(peers.length === 0 ? { retryAt: o.swarmProbeUntil! } : {}) }
    }
    const bytes = o.slices[slice]!.bytes
    if (o.windowBytes !== undefined && inWindow > 0 && inWindow + bytes > o.windowBytes) return { admitted: false }
    admitting = true
    unadmitted.delete(slice)
    if (o.windowBytes !== undefined) inWindow += bytes
    owner[slice] = source
    try {
      await o.allocate(slice)
      o.admitted?.(slice)
      for (const p of o.pieces[slice]!) queue.push({ slice, offset: p.offset, length: p.length, attempts: 0 })
      return { admitted: true }
    } catch (err) {
      schedule.fail(err as Error)
      return { admitted: false }
    } finally {
      admitting = false
      wake()
    }
  }

  const takeFrom = (list: Piece[], source: PullSource): Piece | undefined => {
    const at = list.findIndex(p => owner[p.slice] === source)
    return at < 0 ? undefined : list.splice(at, 1)[0]
  }

  const schedule: PullSchedule = {
    async take (source) {
      for (;;) {
        if (failure !== undefined || remaining === 0 || source.dropped !== undefined) return undefined
        const piece = takeFrom(again, source) ?? takeFrom(queue, source)
        if (piece !== undefined) return piece
        const { admitted, retryAt } = await admitFor(source)
        if (admitted) continue
        if (retryAt !== undefined && timer === undefined) {
          timer = setTimeout(() => { timer = undefined; wake() }, Math.max(1, retryAt - Date.now()))
          timer.unref()
        }
        await new Promise<void>(resolve => waiting.push(resolve))
      }
    },
    retry (piece) { again.push(piece); wake() },
    landed (piece) {
      remaining--
      piecesLeft[piece.slice] = piecesLeft[piece.slice]! - 1
      const last = piecesLeft[piece.slice] === 0
      if (remaining === 0) { finished.resolve(); wake() }
      return last
    },
    release (slice) {
      if (o.windowBytes !== undefined) inWindow -= o.slices[slice]!.bytes
      wake()
    },
    addPeer (peer) { peers.push(peer); wake() },
    drop (source, reason) {
      if (source.primary || source.dropped !== undefined) return
      source.dropped = reason
      for (let i = 0; i < owner.length; i++) if (owner[i] === source) owner[i] = o.primary
      wake()
    },
    wake,
    fail (err) {
      if (failure !== undefined) return
      failure = err
      finished.reject(err)
      if (timer !== undefined) clearTimeout(timer)
      wake()
    },
    get failure () { return failure },
    get remaining () { return remaining },
    finished: finished.promise,
    peers,
  }
  return schedule
}
