// Twenty agents (separate processes) on loopback converge. Kept short for CI: start, converge, done.
import t from 'tap'
import { startTestMesh } from '../helpers/test-mesh.ts'

t.test('a 20-agent cluster converges', { timeout: 180_000 }, async t => {
  const began = performance.now()
  const mesh = await startTestMesh(t, { nodes: 20, convergeTimeoutMs: 90_000 })
  t.equal(mesh.agents.length, 20)
  const { peers } = await mesh.agents[7]!.client.meshPeers()
  t.equal(peers.filter(p => p.state !== 'dead' && p.record !== null).length, 19, 'every agent has the 19 others\' records, none dead')
  t.comment(`started and converged in ${Math.round(performance.now() - began)} ms`)
})
