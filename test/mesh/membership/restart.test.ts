// A restarted agent rejoins with a higher incarnation.
import t from 'tap'
import { startTestMesh, type MeshAgent } from '../../helpers/test-mesh.ts'

const stateOf = (target: MeshAgent, state: string) => (peers: Array<{ peerId: string, state: string }>) => peers.some(p => p.peerId === target.peerId && p.state === state)

t.test('a restarted agent rejoins with a higher incarnation and the same peer id', async t => {
  const mesh = await startTestMesh(t, { nodes: 3 })
  const old = mesh.agents[2]!
  const observer = mesh.agents[0]!
  const before = (await mesh.peerOf(observer, old))!.incarnation
  old.proc.kill('SIGTERM')
  t.same(await old.exited, { code: 0, signal: null }, 'a graceful stop: exit 0 within the shutdown grace')
  await mesh.waitFor([observer], stateOf(old, 'dead'), 5000, 'a graceful stop to be seen as dead')
  // Its goodbye may come after the observer noticed the closed port ("refused"); the goodbye then replaces the reason.
  await mesh.waitFor([observer], peers => peers.some(p => p.peerId === old.peerId && p.reason === 'left'), 5000, 'the goodbye to be the reason')
    .catch((err: Error) => { throw new Error(`${err.message}\nthe stopped agent's last lines:\n${old.output().split('\n').slice(-15).join('\n')}`) })
  t.equal((await mesh.peerOf(observer, old))?.reason, 'left', 'a graceful stop says "left"')
  const again = await mesh.addAgent({ name: old.name, stateDir: old.stateDir })
  t.equal(again.peerId, old.peerId, 'identity persisted in the state dir')
  await mesh.waitFor(mesh.agents.filter(a => a !== old), stateOf(again, 'alive'), 10_000, 'the restarted agent to be alive again')
  const after = (await mesh.peerOf(observer, again))!.incarnation
  t.ok(after > before, `incarnation ${after} > ${before}`)
})
