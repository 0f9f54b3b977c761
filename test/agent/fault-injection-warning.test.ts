// Fault injection (election.faultInjection, also reachable through AGENTD_ELECTION_FAULT_INJECTION) is loud and
// narrow: an agent with it says so at start, at warn level; one without it says nothing of it; and it is refused
// (exit 78, naming why) unless the agent is a --dev agent whose socket no other uid reaches. The rule's other
// cases: test/agent/config/load.test.ts.
import t from 'tap'
import { agentMain, runNode, spawnAgent, tempDir } from '../helpers/agent-process.ts'

t.test('fault injection is announced at start as a warning', async t => {
  const on = tempDir(t)
  const withFaults = await spawnAgent(t, { stateDir: on, args: ['--dev', '--state-dir', on, '--set', 'api.socketMode=0600'], env: { AGENTD_ELECTION_FAULT_INJECTION: 'true' } })
  const line = withFaults.output().split('\n').find(l => l.includes('FAULT INJECTION IS ON'))
  t.ok(line !== undefined, 'the warning is logged')
  t.equal(JSON.parse(line ?? '{}').level, 40, 'at warn level')
  const off = tempDir(t)
  const without = await spawnAgent(t, { stateDir: off, args: ['--dev', '--state-dir', off] })
  t.notOk(without.output().includes('FAULT INJECTION'), 'no warning without it')
})

t.test('fault injection through the environment on a dev agent whose socket its group reaches is refused at start', async t => {
  const dir = tempDir(t)
  const refused = await runNode(agentMain, ['--dev', '--state-dir', dir], { AGENTD_ELECTION_FAULT_INJECTION: 'true' })
  t.equal(refused.code, 78, 'EX_CONFIG: the unit does not restart it')
  t.match(refused.stderr, /election\.faultInjection \(env AGENTD_ELECTION_FAULT_INJECTION\): fault injection .* is for test clusters only: it needs a --dev agent whose API socket only its own uid reaches \(api\.socketMode 0600\); here api\.socketMode 0660 \(defaults\) lets the socket's group call the agent/)
})
