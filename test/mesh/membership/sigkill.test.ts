// Failure detection with real agents: a SIGKILLed agent.
import t from 'tap'
import { startTestMesh, type MeshAgent } from '../../helpers/test-mesh.ts'

const stateOf = (target: MeshAgent, state: string) => (peers: Array<{ peerId: string, state: string }>) => peers.some(p => p.peerId === target.peerId && p.state === state)

t.test('a SIGKILLed agent is declared dead by every other agent within a second', async t => {
  const mesh = await startTestMesh(t, { nodes: 4 })
  const victim = mesh.agents[2]!
  const others = mesh.agents.filter(a => a !== victim)
  victim.proc.kill('SIGKILL')
  const ms = await mesh.waitFor(others, stateOf(victim, 'dead'), 10_000, 'the killed agent to be dead everywhere')
  t.ok(ms < 3000, `detected by all in ${Math.round(ms)} ms (goal < 1000 ms on an idle machine)`)
  const view = await mesh.peerOf(others[0]!, victim)
  t.equal(view?.reason, 'refused', 'its port refused connections: dead without a suspicion period')
})
