// Failure detection with real agents: SIGSTOP (suspect, then dead) and SIGCONT (refutation).
import t from 'tap'
import { startTestMesh, type MeshAgent } from '../../helpers/test-mesh.ts'

const stateOf = (target: MeshAgent, state: string) => (peers: Array<{ peerId: string, state: string }>) => peers.some(p => p.peerId === target.peerId && p.state === state)

t.test('a SIGSTOPped agent is suspected, then dead; after SIGCONT it refutes with a higher incarnation', async t => {
  const mesh = await startTestMesh(t, { nodes: 4 })
  const frozen = mesh.agents[1]!
  const others = mesh.agents.filter(a => a !== frozen)
  const before = (await mesh.peerOf(others[0]!, frozen))!.incarnation
  const suspects: string[] = []
  frozen.proc.kill('SIGSTOP')
  t.teardown(() => { frozen.proc.kill('SIGCONT') })
  await mesh.waitFor(others, (peers, o) => {
    const p = peers.find(x => x.peerId === frozen.peerId)
    if (p?.state === 'suspect' && !suspects.includes(o.name)) suspects.push(o.name)
    return p?.state === 'suspect' || p?.state === 'dead'
  }, 10_000, 'the frozen agent to be suspected')
  const ms = await mesh.waitFor(others, stateOf(frozen, 'dead'), 15_000, 'the frozen agent to be dead everywhere')
  t.ok(suspects.length > 0, `suspected first (seen suspect by ${suspects.join(', ')})`)
  t.match(await mesh.peerOf(others[0]!, frozen), { state: 'dead', reason: 'suspicion-timeout' })
  t.ok(ms < 15_000, `dead everywhere ${Math.round(ms)} ms after the first suspicion was seen`)

  frozen.proc.kill('SIGCONT')
  await mesh.waitFor(others, stateOf(frozen, 'alive'), 15_000, 'the resumed agent to be alive again')
  const after = (await mesh.peerOf(others[0]!, frozen))!.incarnation
  t.ok(after > before, `refuted with incarnation ${after} > ${before}`)
  await mesh.waitFor([frozen], peers => others.every(o => stateOf(o, 'alive')(peers)), 10_000, 'the resumed agent to see the others alive')
})
