// Leader election with real agents on loopback: 3 servers + 1 client, then SIGKILL of the leader;
// on the embedded backend and on etcd (a real etcd on loopback).
import t from 'tap'
import { backendSkip, decisionViolations, startBackendCluster, testBackends, waitForLeader } from '../../helpers/test-election.ts'
import { runNode, agentctlMain } from '../../helpers/agent-process.ts'

for (const backend of testBackends) t.test(`${backend}: 3 servers and a client agree on one leader; SIGKILL of the leader → a new leader with a higher epoch`, { skip: backendSkip(backend) }, async t => {
  const cluster = await startBackendCluster(t, backend, { servers: 3, clients: 1 })
  const first = await waitForLeader(cluster.agents, cluster.agents, 20_000)
  t.ok(first.leader !== undefined && cluster.servers.includes(first.leader), `a server leads (epoch ${first.epoch}, agreed in ${Math.round(first.ms)} ms)`)
  const leader = first.leader!

  // A leader can be agreed before the agents have seen the last server's campaign (etcd: the next poll): wait for the voter set.
  let views = await Promise.all(cluster.agents.map(a => a.client.leader()))
  const settled = (): boolean => new Set(views.map(v => [...v.voters].sort().join(','))).size === 1 && views[0]!.voters.length === 3
  for (const deadline = Date.now() + 10_000; Date.now() < deadline && !settled();) {
    await new Promise(resolve => setTimeout(resolve, 100))
    views = await Promise.all(cluster.agents.map(a => a.client.leader()))
  }
  t.same(views.map(v => v.self).sort(), ['client', 'follower', 'follower', 'leader'], 'roles: one leader, two followers, one client')
  t.same(new Set(views.map(v => [...v.voters].sort().join(','))).size, 1, 'everyone knows the same voter set (within 10 s)')
  t.equal(views[0]!.voters.length, 3, 'three voters (the client is not one)')
  t.ok(!views[0]!.voters.includes(cluster.clients[0]!.peerId), 'the client does not vote')

  const status = await cluster.clients[0]!.client.status()
  t.match(status.leader, { leaderId: first.leaderId, epoch: first.epoch, backend, self: 'client' }, 'GET /v1/status has a leader section')

  const cli = await runNode(agentctlMain, ['--socket', cluster.clients[0]!.socketPath, 'leader', '--json'])
  t.equal(cli.code, 0, 'agentctl leader --json exits 0')
  const json = JSON.parse(cli.stdout)
  t.match(json, { leaderId: first.leaderId, epoch: first.epoch, backend, voters: views[0]!.voters, self: 'client', selfId: cluster.clients[0]!.peerId, acting: false, commitSeq: null, log: null }, 'agentctl leader --json')
  t.same(Object.keys(json).sort(), Object.keys(views[0]!).sort(), 'prints the API\'s answer whole')

  // Decisions: only the leader may make them; everyone applies them in order.
  const follower = cluster.servers.find(a => a !== leader)!
  await t.rejects(follower.client.decide('test', { x: 1 }), { code: 'ERR_NOT_LEADER' }, 'a follower refuses to decide (ERR_NOT_LEADER)')
  const made = await leader.client.decide('test', { x: 1 })
  t.equal(made.epoch, first.epoch, 'the decision carries the leader\'s epoch')
  await waitApplied(cluster.agents, made.epoch, made.seq)
  t.pass('every agent applied it')

  leader.proc.kill('SIGKILL')
  await leader.exited
  const survivors = cluster.agents.filter(a => a !== leader)
  const second = await waitForLeader(cluster.agents, survivors, 20_000, first.epoch)
  t.ok(second.epoch > first.epoch, `new leader ${second.leader?.name} with epoch ${second.epoch} > ${first.epoch} (${Math.round(second.ms)} ms after the kill)`)
  t.not(second.leaderId, first.leaderId, 'the killed agent does not lead')
  t.same(decisionViolations(cluster.agents), [], 'no invariant violation in any decision log')
})

async function waitApplied (agents: Array<{ client: { leader(): Promise<{ applied: { epoch: number, seq: number } }> } }>, epoch: number, seq: number): Promise<void> {
  const deadline = Date.now() + 10_000
  for (;;) {
    const views = await Promise.all(agents.map(a => a.client.leader()))
    if (views.every(v => v.applied.epoch > epoch || (v.applied.epoch === epoch && v.applied.seq >= seq))) return
    if (Date.now() > deadline) throw new Error(`decision ${epoch}/${seq} not applied everywhere: ${JSON.stringify(views.map(v => v.applied))}`)
    await new Promise(resolve => setTimeout(resolve, 25))
  }
}
