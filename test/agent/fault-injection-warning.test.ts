// An agent with fault injection on (election.faultInjection, also reachable through
// AGENTD_ELECTION_FAULT_INJECTION) says so at start, at warn level; one without it says nothing of it.
import t from 'tap'
import { spawnAgent, tempDir } from '../helpers/agent-process.ts'

t.test('fault injection is announced at start as a warning', async t => {
  const on = tempDir(t)
  const withFaults = await spawnAgent(t, { stateDir: on, args: ['--dev', '--state-dir', on], env: { AGENTD_ELECTION_FAULT_INJECTION: 'true' } })
  const line = withFaults.output().split('\n').find(l => l.includes('FAULT INJECTION IS ON'))
  t.ok(line !== undefined, 'the warning is logged')
  t.equal(JSON.parse(line ?? '{}').level, 40, 'at warn level')
  const off = tempDir(t)
  const without = await spawnAgent(t, { stateDir: off, args: ['--dev', '--state-dir', off] })
  t.notOk(without.output().includes('FAULT INJECTION'), 'no warning without it')
})
