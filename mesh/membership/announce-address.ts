/**
 * The one management address an agent announces to the mesh. A configured
 * address wins; otherwise the first IPv4 address of an up, non-virtual
 * interface (then IPv6), never loopback, docker, bridge or veth addresses —
 * except in --dev, where the agent announces 127.0.0.1.
 */
import type { NetworkInterfaceInfo } from 'node:os'
import { isIP } from 'node:net'
import { AgentError } from '../../core/errors.ts'

export interface AnnounceAddressOptions {
  /** mesh.announceAddress; "" = detect. */
  configured: string
  dev: boolean
  /** `os.networkInterfaces()`. */
  interfaces: NodeJS.Dict<NetworkInterfaceInfo[]>
}

export interface AnnounceAddress {
  ip: string
  family: 4 | 6
  /** Where it came from: "config", "interface eth0", "dev loopback". */
  source: string
}

/** Interface names that are never a node's management address. */
export function isVirtualInterfaceName (name: string): boolean {
  return /^(lo|docker\d*|br-|virbr|veth|cni|flannel|cali|vxlan|tun|tap|kube)/.test(name)
}

export function chooseAnnounceAddress (options: AnnounceAddressOptions): AnnounceAddress {
  if (options.configured !== '') {
    const family = isIP(options.configured)
    if (family === 0) throw new AgentError('ERR_MESH_ADDRESS', `mesh.announceAddress ${JSON.stringify(options.configured)} is not an IP address`)
    return { ip: options.configured, family: family as 4 | 6, source: 'config' }
  }
  if (options.dev) return { ip: '127.0.0.1', family: 4, source: 'dev loopback' }
  const candidates: Array<AnnounceAddress & { rank: number }> = []
  for (const [name, addresses] of Object.entries(options.interfaces)) {
    if (addresses === undefined || isVirtualInterfaceName(name)) continue
    for (const a of addresses) {
      if (a.internal || isLinkLocal(a.address)) continue
      candidates.push({ ip: a.address, family: a.family === 'IPv4' ? 4 : 6, source: `interface ${name}`, rank: a.family === 'IPv4' ? 0 : 1 })
    }
  }
  candidates.sort((a, b) => a.rank - b.rank)
  const best = candidates[0]
  if (best === undefined) {
    throw new AgentError('ERR_MESH_ADDRESS',
      'no management address found: every interface is down, loopback or virtual (docker, bridge, veth). Set mesh.announceAddress to the IP other nodes reach this one at')
  }
  return { ip: best.ip, family: best.family, source: best.source }
}

function isLinkLocal (ip: string): boolean {
  return ip.startsWith('169.254.') || /^fe[89ab][0-9a-f]:/i.test(ip)
}
