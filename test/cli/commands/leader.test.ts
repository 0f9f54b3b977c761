// agentctl leader: --json prints the API's view whole; the human view says whether the leader acts, its
// lease and commit index, and flags a leader this agent has not heard from for a while (cut off with it).
import t from 'tap'
import { leaderCommand, renderLeader } from '../../../cli/commands/leader.ts'
import type { LeaderViewBody } from '../../../mesh/election/leader-views.ts'
import type { AgentClient } from '../../../agent/client/client.ts'

const view = (over: Partial<LeaderViewBody> = {}): LeaderViewBody => ({
  leaderId: 'L', epoch: 7, backend: 'embedded', voters: ['L', 'F', 'G'], self: 'follower', selfId: 'F', voterSetId: 'vs',
  acting: false, applied: { epoch: 7, seq: 41 }, commitSeq: null, log: { epoch: 7, seq: 41 }, leaseRemainingMs: null, leaderHeardMsAgo: 40, otherVoterSets: [],
  decisions: { applied: 41, rejected: 0, snapshots: 1, violations: 0 }, ...over,
})

t.test('--json is the API answer, every field', async t => {
  const v = view()
  const client = { leader: async () => v } as unknown as AgentClient
  const out = await leaderCommand.run({ client, values: {}, positionals: [], json: true, signal: AbortSignal.timeout(1000) })
  t.same(out.json, v)
})

t.test('the acting leader shows its lease and commit index', async t => {
  const out = renderLeader(view({ self: 'leader', selfId: 'L', acting: true, commitSeq: 41, leaseRemainingMs: 640, leaderHeardMsAgo: 0 }))
  t.match(out, /self\s+leader \(acting; lease 640 ms left; commit index 41\)/)
  t.notMatch(out, /not heard/)
})

t.test('a follower cut off with its leader says so instead of naming it as if all were well', async t => {
  t.match(renderLeader(view()), /leader\s+L \(heard 40 ms ago\)/)
  t.match(renderLeader(view({ leaderHeardMsAgo: 4200 })), /leader\s+L \(not heard for 4\.2 s: cut off or gone/)
  t.match(renderLeader(view()), /log\s+index 41 \(epoch 7\), durable here/)
})

t.test('another voter set on the mesh is shown as degraded', async t => {
  const out = renderLeader(view({ otherVoterSets: [{ voterSetId: 'other', agents: ['X'] }] }))
  t.match(out, /DEGRADED\s+1 agent\(s\) of this mesh follow another voter set other/)
  t.notMatch(renderLeader(view()), /DEGRADED/)
})
