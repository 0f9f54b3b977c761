/** agentctl leader: who leads, in which epoch, with which backend and voters, and this agent's role. */
import type { LeaderViewBody } from '../../mesh/election/leader-views.ts'
import type { Command } from '../command.ts'

export const leaderCommand: Command = {
  summary: 'who leads: leader id, epoch, backend, voters, and this agent\'s role (leader, follower, candidate, client)',
  async run ({ client, signal }) {
    const view = await client.leader({ signal })
    const { leaderId, epoch, backend, voters, self } = view
    return { json: { leaderId, epoch, backend, voters, self }, human: renderLeader(view) }
  },
}

export function renderLeader (v: LeaderViewBody): string {
  const mark = (id: string): string => `${id}${id === v.leaderId ? '  (leader)' : ''}${id === v.selfId ? '  (this agent)' : ''}`
  return [
    `leader    ${v.leaderId ?? 'unknown'}`,
    `epoch     ${v.epoch}`,
    `backend   ${v.backend}`,
    `self      ${v.self}${v.acting ? ' (acting)' : ''}`,
    `applied   epoch ${v.applied.epoch} seq ${v.applied.seq}; ${v.decisions.applied} applied, ${v.decisions.rejected} rejected, ${v.decisions.snapshots} snapshots`,
    `voters    ${v.voters.length === 0 ? 'none yet (not bootstrapped)' : `${v.voters.length} (voter set ${v.voterSetId})`}`,
    ...v.voters.map(id => `  ${mark(id)}`),
  ].join('\n')
}
