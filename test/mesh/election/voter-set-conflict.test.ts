// Two dev agents joined by seeds: each bootstraps a voter set of its own and leads it. That is two
// clusters on one mesh, and both say so (degraded) instead of silently leading apart. The README's
// recipe — the second agent as a client — gives one leader that both follow.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { startTestMesh } from '../../helpers/test-mesh.ts'
import { runNode, agentctlMain } from '../../helpers/agent-process.ts'

async function eventually<T> (read: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 20_000): Promise<T> {
  const until = performance.now() + timeoutMs
  for (;;) {
    const v = await read()
    if (ok(v) || performance.now() > until) return v
    await sleep(100)
  }
}

t.test('two dev agents that each lead: both report the other voter set', async t => {
  // Each bootstraps alone (b on a mesh of its own), then b restarts joined to a: two voter sets, one mesh.
  // (Started joined, the second may see the first's record before it bootstraps and adopt its set.)
  const mesh = await startTestMesh(t, { nodes: 1 })
  const elsewhere = await startTestMesh(t, { nodes: 1 })
  const alone = elsewhere.agents[0]!
  await eventually(() => alone.client.leader(), v => v.acting)
  alone.proc.kill('SIGTERM')
  await alone.exited
  const a = mesh.agents[0]!
  const b = await mesh.addAgent({ name: 'b', stateDir: alone.stateDir })
  const va = await eventually(() => a.client.leader(), v => v.otherVoterSets.length > 0 && v.leaderId === a.peerId)
  const vb = await eventually(() => b.client.leader(), v => v.otherVoterSets.length > 0 && v.leaderId === b.peerId)
  t.equal(va.leaderId, a.peerId, 'a leads its own set')
  t.equal(vb.leaderId, b.peerId, 'b leads its own set')
  t.same(va.otherVoterSets, [{ voterSetId: vb.voterSetId, agents: [b.peerId] }], 'a names b\'s voter set')
  t.same(vb.otherVoterSets, [{ voterSetId: va.voterSetId, agents: [a.peerId] }], 'and b names a\'s')
  const cli = await runNode(agentctlMain, ['--socket', a.socketPath, 'status'])
  t.match(cli.stdout, /DEGRADED another voter set on this mesh/, 'agentctl status says degraded')
})

t.test('the README recipe: the second dev agent as a client follows the first one\'s leader', async t => {
  const mesh = await startTestMesh(t, { nodes: 2, nodeArgs: i => i === 0 ? [] : ['--set', 'election.server=false'] })
  const [a, b] = [mesh.agents[0]!, mesh.agents[1]!]
  const vb = await eventually(() => b.client.leader(), v => v.leaderId === a.peerId && v.applied.seq >= 1)
  t.equal(vb.leaderId, a.peerId, 'the client follows the first agent')
  t.equal(vb.self, 'client')
  t.same((await a.client.leader()).otherVoterSets, [], 'one voter set: not degraded')
})
