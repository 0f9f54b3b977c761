// A member that flaps (SIGSTOP / SIGCONT every two seconds) on the bounded view: it may be suspected or
// declared dead itself, but nobody else is — not its neighbors, whose probes and gossip ran through it —
// and once it stays up every agent sees it alive again, at a higher incarnation.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { startTestMesh, type MeshAgent } from '../../helpers/test-mesh.ts'

t.setTimeout(180_000)

interface LogLine { msg?: string, peer?: string, to?: string }
const deathsLogged = (a: MeshAgent): LogLine[] => a.output().split('\n').filter(l => l.startsWith('{'))
  .map(l => JSON.parse(l) as LogLine).filter(l => l.msg === 'member state' && l.to === 'dead')

t.test('a flapping member causes no false death of others', async t => {
  // Five agents with at most three neighbors each (maxPeers 3: 1 chosen, up to 2 choosing): a partial view.
  const mesh = await startTestMesh(t, { nodes: 5, built: true, args: ['--set', 'mesh.maxPeers=3'] })
  const flapper = mesh.agents[3]!
  const others = mesh.agents.filter(a => a !== flapper)
  const before = (await mesh.peerOf(others[0]!, flapper))!.incarnation
  const deathsBefore = others.map(a => deathsLogged(a).length)
  t.teardown(() => { flapper.proc.kill('SIGCONT') })
  for (let cycle = 0; cycle < 4; cycle++) {
    flapper.proc.kill('SIGSTOP')
    await sleep(2000)
    flapper.proc.kill('SIGCONT')
    await sleep(2000)
  }
  await mesh.waitFor(others, peers => peers.some(p => p.peerId === flapper.peerId && p.state === 'alive'), 30_000, 'the flapper to be alive again everywhere')
  const after = (await mesh.peerOf(others[0]!, flapper))!.incarnation
  t.ok(after > before, `it refuted what was said about it: incarnation ${after} > ${before}`)
  const wrongful = others.flatMap((a, i) => deathsLogged(a).slice(deathsBefore[i]).filter(l => l.peer !== flapper.peerId).map(l => `${a.name} declared ${l.peer} dead`))
  t.same(wrongful, [], 'no agent but the flapper was declared dead by anyone')
  const flapperSaw = deathsLogged(flapper).filter(l => l.peer !== undefined)
  t.same(flapperSaw.map(l => l.peer), [], 'and the flapper, stalled, accused nobody')
  await mesh.waitConverged(mesh.agents, 30_000)
  t.pass('all five agents hold each other alive again')
})
