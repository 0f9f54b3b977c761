// The wire form: signatures, size limit, schema, and the cluster key format.
import t from 'tap'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { decodeEnvelope, encodeEnvelope } from '../../../mesh/membership/signed-envelope.ts'
import { generateClusterKey, parseClusterKey } from '../../../mesh/membership/cluster-key.ts'
import { chooseAnnounceAddress, isVirtualInterfaceName } from '../../../mesh/membership/announce-address.ts'
import type { MembershipClaim } from '../../../mesh/membership/mesh-messages.ts'

t.test('a signed message round-trips; tampering, another signer, size and schema are rejected with a reason', async t => {
  const key = await generateKeyPair('Ed25519')
  const from = peerIdFromPrivateKey(key).toString()
  const claim: MembershipClaim = { kind: 'suspect', from, subject: from, incarnation: 3, reason: 'probe-failed', sentAtMs: 1 }
  const data = await encodeEnvelope(claim, key)
  t.same(await decodeEnvelope(data, 4096), { ok: true, message: claim })
  const tampered = data.slice()
  tampered[tampered.length - 3] = tampered[tampered.length - 3]! ^ 1
  t.match(await decodeEnvelope(tampered, 4096), { ok: false })
  t.match(await decodeEnvelope(await encodeEnvelope(claim, await generateKeyPair('Ed25519')), 4096), { ok: false, reason: 'signature' })
  t.match(await decodeEnvelope(data, 100), { ok: false, reason: 'oversized' })
  t.match(await decodeEnvelope(new Uint8Array([1, 2, 3]), 4096), { ok: false, reason: 'malformed' })
  t.match(await decodeEnvelope(await encodeEnvelope({ ...claim, incarnation: -1 }, key), 4096), { ok: false, reason: 'schema' })
})

t.test('cluster keys: generated keys parse, anything else is refused with the expected format', async t => {
  const text = generateClusterKey()
  t.equal(new TextDecoder().decode(parseClusterKey(text, 'k')), text.trimEnd())
  t.throws(() => parseClusterKey('hello', 'some.key'), { code: 'ERR_CLUSTER_KEY_INVALID', message: /some\.key is not a cluster key/ })
})

t.test('the announced address: config wins, never docker/bridge/loopback, dev announces loopback', async t => {
  const iface = (address: string, family: 'IPv4' | 'IPv6', internal = false) => ({ address, family, internal, netmask: '', mac: '', cidr: null, scopeid: 0 })
  const interfaces = { lo: [iface('127.0.0.1', 'IPv4', true)], docker0: [iface('172.17.0.1', 'IPv4')], 'br-1a2b': [iface('172.18.0.1', 'IPv4')], eth0: [iface('fe80::1', 'IPv6'), iface('10.1.2.3', 'IPv4')] }
  t.match(chooseAnnounceAddress({ configured: '', dev: false, interfaces }), { ip: '10.1.2.3', source: 'interface eth0' })
  t.match(chooseAnnounceAddress({ configured: '10.9.9.9', dev: false, interfaces }), { ip: '10.9.9.9', source: 'config' })
  t.match(chooseAnnounceAddress({ configured: '', dev: true, interfaces }), { ip: '127.0.0.1' })
  t.throws(() => chooseAnnounceAddress({ configured: '', dev: false, interfaces: { lo: interfaces.lo, docker0: interfaces.docker0 } }), { code: 'ERR_MESH_ADDRESS' })
  for (const name of ['lo', 'docker0', 'br-1a2b', 'veth12', 'virbr0', 'cni0']) t.ok(isVirtualInterfaceName(name), name)
  for (const name of ['eth0', 'ens5', 'enp23s0f1', 'ib0', 'bond0']) t.notOk(isVirtualInterfaceName(name), name)
})
