// An agent with another cluster key cannot join the mesh (pnet handshake fails before any protocol runs).
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { generateClusterKey } from '../../../mesh/membership/cluster-key.ts'
import { startTestMesh } from '../../helpers/test-mesh.ts'

t.test('an agent with another cluster key cannot join', async t => {
  const mesh = await startTestMesh(t, { nodes: 2 })
  const otherKey = join(mesh.dir, 'other.key')
  writeFileSync(otherKey, generateClusterKey(), { mode: 0o600 })
  const outsider = await mesh.addAgent({ name: 'outsider', clusterKeyFile: otherKey })
  await sleep(3000)
  for (const member of mesh.agents) {
    t.equal(await mesh.peerOf(member, outsider), undefined, `${member.name} never heard of the outsider`)
  }
  const seen = (await outsider.client.meshPeers()).peers
  t.same(seen, [], 'the outsider knows no member')
  t.equal((await outsider.client.mesh()).seeds[0]?.connected, false, 'its seed dials keep failing')
})
