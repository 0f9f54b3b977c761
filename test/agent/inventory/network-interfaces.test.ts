// Network interfaces from /sys/class/net and the kernel's address list, without a process per attribute.
import t from 'tap'
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs'
import { networkInterfaces, type NetworkInterfaceInfo } from 'node:os'
import { join } from 'node:path'
import { probeNetworkInterfaces } from '../../../agent/inventory/network-interfaces.ts'
import { tempDir } from '../../helpers/agent-process.ts'

t.test('this machine: every interface with an address is listed with its addresses; lo is virtual and up', async t => {
  const found = await probeNetworkInterfaces()
  for (const [name, addresses] of Object.entries(networkInterfaces())) {
    const nic = found.find(n => n.name === name)
    t.ok(nic !== undefined, `${name} listed`)
    t.same(nic!.ipv4, addresses!.filter(a => a.family === 'IPv4').map(a => a.address), `${name}: its IPv4 addresses`)
  }
  t.match(found.find(n => n.name === 'lo'), { virtual: true, up: true, mtu: Number })
})

t.test('a sysfs tree: attributes the kernel refuses are null; down, virtual and address-only interfaces', async t => {
  const root = tempDir(t)
  const devices = join(root, 'devices')
  const net = join(root, 'class-net')
  mkdirSync(net)
  const nic = (name: string, where: string, files: Record<string, string>): void => {
    const dir = join(devices, where, name)
    mkdirSync(dir, { recursive: true })
    for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, file), `${text}\n`)
    symlinkSync(dir, join(net, name))
  }
  nic('ens1', 'pci0000:00/0000:00:03.0/net', { address: '02:00:00:00:00:01', mtu: '9000', speed: '100000', operstate: 'up', flags: '0x1003' })
  nic('ens2', 'pci0000:00/0000:00:04.0/net', { address: '02:00:00:00:00:02', mtu: '1500', speed: '-1', operstate: 'down', flags: '0x1002' })
  nic('veth0', 'virtual/net', { address: '02:00:00:00:00:03', mtu: '1500', operstate: 'up', flags: '0x1003' }) // no speed file: EINVAL on a real one
  nic('tun0', 'virtual/net', { mtu: '1500', operstate: 'unknown', flags: '0x1091' })
  nic('tun1', 'virtual/net', { mtu: 'garbage', operstate: 'unknown', flags: '0x1090' })
  const address = (ip: string, family: 'IPv4' | 'IPv6'): NetworkInterfaceInfo =>
    ({ address: ip, family, netmask: '', mac: '02:00:00:00:00:09', internal: false, cidr: null, ...(family === 'IPv6' ? { scopeid: 0 } : {}) }) as NetworkInterfaceInfo
  const found = await probeNetworkInterfaces({
    sysClassNet: net,
    addresses: { ens1: [address('10.0.0.5', 'IPv4'), address('10.0.0.6', 'IPv4'), address('fd00::5', 'IPv6')], ib0: [address('10.1.0.5', 'IPv4')] },
  })
  t.same(found.map(n => n.name), ['ens1', 'ens2', 'ib0', 'tun0', 'tun1', 'veth0'], 'every interface, sorted')
  t.same(found[0], { name: 'ens1', mac: '02:00:00:00:00:01', ipv4: ['10.0.0.5', '10.0.0.6'], ipv6: ['fd00::5'], mtu: 9000, speedMbps: 100000, virtual: false, up: true }, 'every address, not the first only')
  t.match(found[1], { name: 'ens2', speedMbps: null, up: false, virtual: false, ipv4: [] }, 'speed -1 and down')
  t.same(found[2], { name: 'ib0', mac: '02:00:00:00:00:09', ipv4: ['10.1.0.5'], ipv6: [], mtu: null, speedMbps: null, virtual: false, up: false }, 'an interface /sys does not list: what the address list tells')
  t.match(found[3], { name: 'tun0', mac: '', virtual: true, up: true }, 'operstate unknown with IFF_UP: up')
  t.match(found[4], { name: 'tun1', mtu: null, up: false }, 'an unreadable mtu is null; unknown without IFF_UP: down')
  t.match(found[5], { name: 'veth0', virtual: true, speedMbps: null, up: true }, 'a device under devices/virtual is virtual')
})

t.test('no /sys: the address list alone', async t => {
  const found = await probeNetworkInterfaces({ sysClassNet: '/nonexistent/class/net', addresses: { lo: [{ address: '127.0.0.1', family: 'IPv4', netmask: '255.0.0.0', mac: '00:00:00:00:00:00', internal: true, cidr: '127.0.0.1/8' }] } })
  t.same(found, [{ name: 'lo', mac: '00:00:00:00:00:00', ipv4: ['127.0.0.1'], ipv6: [], mtu: null, speedMbps: null, virtual: true, up: true }])
})
