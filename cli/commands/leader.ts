/** agentctl leader: who leads, in which epoch, with which backend and voters, and this agent's role. */
import type { LeaderViewBody } from '../../mesh/election/leader-views.ts'
import type { Command } from './command.ts'

export const leaderCommand: Command = {
  summary: 'who leads: leader id, epoch, backend, voters, and this agent\'s role (leader, follower, candidate, client)',
  examples: [
    { what: 'who leads and this agent\'s role', run: 'agentctl leader' },
    { what: 'the whole leader view as JSON', run: 'agentctl leader --json' },
  ],
  async run ({ client, signal }) {
    const view = await client.leader({ signal })
    return { json: view, human: renderLeader(view) }
  },
}

/** A leader not heard for this long is shown as possibly gone (the election timeout's order of magnitude). */
const staleLeaderMs = 1500

export function renderLeader (v: LeaderViewBody): string {
  const mark = (id: string): string => `${id}${id === v.leaderId ? '  (leader)' : ''}${id === v.selfId ? '  (this agent)' : ''}`
  const heard = v.leaderHeardMsAgo === null || v.leaderId === v.selfId
    ? ''
    : v.leaderHeardMsAgo > staleLeaderMs
      ? ` (not heard for ${(v.leaderHeardMsAgo / 1000).toFixed(1)} s: cut off or gone; a new leader may lead elsewhere)`
      : ` (heard ${v.leaderHeardMsAgo} ms ago)`
  const acting = v.acting ? ` (acting; lease ${v.leaseRemainingMs ?? 0} ms left; commit index ${v.commitSeq ?? 0})` : v.self === 'leader' ? ' (not acting yet)' : ''
  return [
    `leader    ${v.leaderId ?? 'unknown'}${heard}`,
    `epoch     ${v.epoch}`,
    `backend   ${v.backend}`,
    `self      ${v.self}${acting}`,
    `applied   index ${v.applied.seq} (epoch ${v.applied.epoch}); ${v.decisions.applied} applied, ${v.decisions.rejected} rejected, ${v.decisions.snapshots} snapshots`,
    ...(v.log !== null ? [`log       index ${v.log.seq} (epoch ${v.log.epoch}), durable here`] : []),
    ...v.otherVoterSets.map(o => `DEGRADED  ${o.agents.length} agent(s) of this mesh follow another voter set ${o.voterSetId} with a leader of its own (${o.agents.join(', ')}): two clusters share the mesh; start the extra agents as clients (election.server=false) or wipe their election state`),
    `voters    ${v.voters.length === 0 ? 'none yet (not bootstrapped)' : `${v.voters.length} (voter set ${v.voterSetId})`}`,
    ...v.voters.map(id => `  ${mark(id)}`),
  ].join('\n')
}
