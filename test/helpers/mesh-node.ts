/**
 * startMeshNode(t, clusterKey): a real, started libp2p node in the test
 * process with the agents' stack and settings (mesh/membership/libp2p-node.ts), on a free
 * loopback port, stopped at teardown. For tests that speak the mesh protocols
 * directly: an intruder, two ends of a protocol, a node the agents dial.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { createMeshNode, type MeshLibp2p } from '../../mesh/membership/libp2p-node.ts'

interface Teardown { teardown(fn: () => unknown): void }

/** `privateKey`: the node's identity when the test signs with it too; default a fresh one. */
export async function startMeshNode (t: Teardown, clusterKey: Uint8Array, privateKey?: PrivateKey): Promise<MeshLibp2p> {
  const node = await createMeshNode({
    privateKey: privateKey ?? await generateKeyPair('Ed25519'),
    clusterKey,
    listen: ['/ip4/127.0.0.1/tcp/0'],
    announce: { ip: '127.0.0.1', family: 4, source: 'test' },
    trustedCidrs: ['127.0.0.0/8'],
    connectionPingIntervalMs: 1000,
    maxConnections: 16,
    maxMessageDataBytes: 1 << 20,
    userAgent: 'agentd-test/0',
  })
  await node.start()
  t.teardown(() => node.stop())
  return node
}
