// Twenty agents (separate processes) on loopback converge. Kept short for CI: start, converge, done.
import t from 'tap'
import { availableParallelism } from 'node:os'
import { startTestMesh } from '../helpers/test-mesh.ts'

// Twenty agents (each a libp2p node, a pinned pool and an HTTP server) starve one another on
// fewer than 4 cores and the run says nothing about the mesh; MESH_TEST_20_AGENTS=1 forces it.
const cores = availableParallelism()
const skip = process.env.MESH_TEST_20_AGENTS === '1' || cores >= 4
  ? false
  : `20 agent processes need >= 4 cores, this machine has ${cores} (set MESH_TEST_20_AGENTS=1 to run anyway; test/bench/mesh.bench.ts measures 20 agents)`

t.test('a 20-agent cluster converges', { timeout: 180_000, skip }, async t => {
  const began = performance.now()
  const mesh = await startTestMesh(t, { nodes: 20, convergeTimeoutMs: 90_000 })
  t.equal(mesh.agents.length, 20)
  const { peers } = await mesh.agents[7]!.client.meshPeers()
  t.equal(peers.filter(p => p.state !== 'dead' && p.record !== null).length, 19, 'every agent has the 19 others\' records, none dead')
  t.comment(`started and converged in ${Math.round(performance.now() - began)} ms`)
})
