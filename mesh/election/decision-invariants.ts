/**
 * The safety invariants of committed, fenced decisions, checked over the
 * decision logs of every agent of a cluster (decision-log.ts entries, e.g.
 * read from each agent's decisions.jsonl). Pure: the fault tests, the
 * Jepsen-style partition test and the benchmarks call it.
 *
 * 1. One leader per epoch: every decision applied anywhere in epoch e names
 *    the same leader.
 * 2. No stale or uncommitted decision applied: on each agent the applied log
 *    indexes (snapshots included) strictly increase and their epochs never
 *    decrease — nothing older after something newer, nothing twice, and no
 *    repair (a repair replaces decisions that were applied uncommitted).
 * 3. Gap-free: an agent applies index n+1 right after n, unless a snapshot
 *    at or after n+1 replaced the gap, or it restarted ("resumed") at n.
 * 4. Agreement (revisions never fork): log index n holds the same decision
 *    on every agent, and a snapshot at index n the same state.
 */
import type { DecisionLogEntry } from './decision-log.ts'

export interface InvariantViolation {
  invariant: 'one-leader-per-epoch' | 'no-stale-apply' | 'gap-free' | 'agreement'
  agent: string
  detail: string
}

export function checkDecisionInvariants (logs: ReadonlyMap<string, readonly DecisionLogEntry[]>): InvariantViolation[] {
  const violations: InvariantViolation[] = []
  /** Leader per epoch, keyed by voter set too: a move to another voter set ('moved') starts its epochs over. */
  const leaderOf = new Map<string, { leader: string, agent: string }>()
  const digestOf = new Map<string, { digest: string, agent: string }>()
  for (const [agent, entries] of logs) {
    let last: { epoch: number, seq: number } | undefined
    let voterSet = ''
    for (const e of entries) {
      if (e.outcome === 'rejected') continue
      if (e.outcome === 'moved') {
        voterSet = e.reason ?? ''
        last = { epoch: e.epoch, seq: e.seq }
        continue
      }
      if (e.outcome === 'resumed') {
        // A restart continues from the persisted position; lines written behind it may be lost to a kill.
        if (last !== undefined && e.seq < last.seq) violations.push({ invariant: 'no-stale-apply', agent, detail: `resumed at ${e.seq} after applying ${last.seq}` })
        last = { epoch: Math.max(e.epoch, last?.epoch ?? 0), seq: e.seq }
        continue
      }
      const known = leaderOf.get(`${voterSet}|${e.epoch}`)
      if (known === undefined) leaderOf.set(`${voterSet}|${e.epoch}`, { leader: e.leader, agent })
      else if (known.leader !== e.leader) {
        violations.push({ invariant: 'one-leader-per-epoch', agent, detail: `epoch ${e.epoch}: applied a decision of ${e.leader}, ${known.agent} one of ${known.leader}` })
      }
      if (e.reason === 'repair' || (last !== undefined && (e.epoch < last.epoch || e.seq <= last.seq))) {
        violations.push({ invariant: 'no-stale-apply', agent, detail: `applied ${e.epoch}/${e.seq} after ${last === undefined ? 'nothing' : `${last.epoch}/${last.seq}`}${e.reason === 'repair' ? ' (repair of uncommitted decisions)' : ''}` })
      } else if (e.outcome === 'applied' && e.seq !== (last?.seq ?? 0) + 1) {
        // Only a snapshot may skip indexes.
        violations.push({ invariant: 'gap-free', agent, detail: `applied ${e.epoch}/${e.seq} after ${last === undefined ? 'nothing' : `${last.epoch}/${last.seq}`}` })
      }
      last = { epoch: e.epoch, seq: e.seq }
      const key = `${e.outcome === 'applied' ? 'decision' : 'state'} ${e.seq}`
      const d = digestOf.get(key)
      if (d === undefined) digestOf.set(key, { digest: e.digest, agent })
      else if (d.digest !== e.digest) violations.push({ invariant: 'agreement', agent, detail: `${key} has digest ${e.digest}, on ${d.agent} ${d.digest}` })
    }
  }
  return violations
}

/** Parses a decisions.jsonl file's text (a torn last line from a killed agent is skipped). */
export function parseDecisionLog (text: string): DecisionLogEntry[] {
  const entries: DecisionLogEntry[] = []
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue
    try { entries.push(JSON.parse(line) as DecisionLogEntry) } catch { /* torn write of a killed agent */ }
  }
  return entries
}
