/**
 * The node's network interfaces, read from /sys/class/net and the kernel's
 * address list (os.networkInterfaces()) without starting a process: a probe
 * that ran `cat` per attribute started ~28 processes per interface, hundreds
 * at every agent start on a GPU node with many NICs and container veths.
 *
 * Every interface /sys lists is reported, with or without an address, up or
 * down; one with addresses that /sys does not list (no sysfs in a container)
 * too, with what the address list tells. An attribute the kernel does not
 * give (speed of a virtual or down link: EINVAL, or -1) is null, never an error.
 */
import { networkInterfaces, type NetworkInterfaceInfo } from 'node:os'
import { readdir, readFile, readlink } from 'node:fs/promises'
import { join } from 'node:path'
import type { NetworkInterfaceInventory } from './schema.ts'
import { isVirtualInterfaceName } from '../../mesh/membership/announce-address.ts'

/** IFF_UP in /sys/class/net/<if>/flags: the administrator brought it up. */
const IFF_UP = 0x1

export interface NetworkProbeSources {
  /** Default /sys/class/net. */
  sysClassNet?: string
  /** Default os.networkInterfaces(). */
  addresses?: NodeJS.Dict<NetworkInterfaceInfo[]>
}

export async function probeNetworkInterfaces (sources: NetworkProbeSources = {}): Promise<NetworkInterfaceInventory[]> {
  const root = sources.sysClassNet ?? '/sys/class/net'
  const addresses = sources.addresses ?? networkInterfaces()
  const listed = await readdir(root).catch(() => [] as string[])
  const names = [...new Set([...listed, ...Object.keys(addresses)])].sort()
  return Promise.all(names.map(name => describe(join(root, name), name, addresses[name] ?? [])))
}

async function describe (dir: string, name: string, addresses: NetworkInterfaceInfo[]): Promise<NetworkInterfaceInventory> {
  const attribute = (file: string): Promise<string | undefined> => readFile(join(dir, file), 'utf8').then(s => s.trim(), () => undefined)
  const [mac, mtu, speed, operstate, flags, target] = await Promise.all([
    attribute('address'), attribute('mtu'), attribute('speed'), attribute('operstate'), attribute('flags'),
    readlink(dir).catch(() => undefined),
  ])
  const internal = addresses.some(a => a.internal)
  const administrativelyUp = flags !== undefined && (Number.parseInt(flags, 16) & IFF_UP) !== 0
  return {
    name,
    mac: mac ?? addresses[0]?.mac ?? '',
    ipv4: addresses.filter(a => a.family === 'IPv4').map(a => a.address),
    ipv6: addresses.filter(a => a.family === 'IPv6').map(a => a.address),
    mtu: positiveInteger(mtu),
    speedMbps: positiveInteger(speed),
    // A device without hardware behind it lives under /sys/devices/virtual (lo, veth, bridges, tunnels).
    virtual: internal || (target?.includes('/devices/virtual/') ?? false) || isVirtualInterfaceName(name),
    // "unknown" is what lo and many tunnels report while they pass traffic: their IFF_UP flag decides.
    up: operstate === 'up' || (operstate === 'unknown' && administrativelyUp) || (operstate === undefined && internal),
  }
}

function positiveInteger (text: string | undefined): number | null {
  if (text === undefined || !/^\d+$/.test(text)) return null
  const n = Number(text)
  return n > 0 ? n : null
}
