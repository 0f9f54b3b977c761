// `agentctl mesh` shows the port a --dev agent bound, not the wildcard `/tcp/0` it was configured with.
import t from 'tap'
import { boundListen } from '../../../mesh/membership/mesh-service.ts'

t.test('a wildcard port is shown as the bound one; explicit ports and no announced address leave it as configured', async t => {
  const announced = ['/ip4/127.0.0.1/tcp/41523/p2p/12D3KooWabc']
  t.same(boundListen(['/ip4/127.0.0.1/tcp/0'], announced), ['/ip4/127.0.0.1/tcp/41523'])
  t.same(boundListen(['/ip4/0.0.0.0/tcp/7460'], ['/ip4/10.0.0.5/tcp/7460/p2p/x']), ['/ip4/0.0.0.0/tcp/7460'])
  t.same(boundListen(['/ip4/127.0.0.1/tcp/0'], []), ['/ip4/127.0.0.1/tcp/0'], 'not started yet: as configured')
})
