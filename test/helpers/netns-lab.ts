/**
 * Test hosts in network namespaces (root only), for real partitions: one
 * namespace per host with one veth (`eth0`, 10.231.<lab>.<i+1>/24) whose
 * other end is a port in a "switch" namespace holding one bridge per side of
 * a partition. `partition(groups)` moves each host's port onto its group's
 * bridge: hosts on different bridges cannot reach each other — packets are
 * dropped, connections are not reset, as when a switch or link fails — and
 * `heal()` puts every port back on bridge 0. Nothing is added to the root
 * namespace; the addresses exist only inside the lab's namespaces, and
 * `destroy()` (registered as a teardown) deletes them all.
 */
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { existsSync } from 'node:fs'

const run = promisify(execFile)

export interface NetnsHost {
  /** The host's namespace: run a process in it with `ip netns exec <ns> …`. */
  ns: string
  /** Its IPv4 address on the lab's network. */
  address: string
}

export interface NetnsLab {
  hosts: NetnsHost[]
  /**
   * Cuts the network into `groups` (host indexes; a host in no group is
   * isolated alone): each group can reach only itself.
   */
  partition(groups: readonly (readonly number[])[]): Promise<void>
  /** Every host on one network again. */
  heal(): Promise<void>
  /**
   * Shapes every host's uplink (what it sends out of eth0) to `mbit` Mbit/s
   * with a token bucket (tc tbf), as a node's NIC or top-of-rack port would.
   */
  shapeUplinks(mbit: number): Promise<void>
  destroy(): Promise<void>
}

interface Teardown { teardown(fn: () => unknown): void }

let skipReason: string | false | undefined

/** Why a lab cannot be built here (not root, no iproute2, namespaces refused), or false. */
export async function netnsSkipReason (): Promise<string | false> {
  if (skipReason !== undefined) return skipReason
  if (process.getuid?.() !== 0) return (skipReason = 'network namespaces need root')
  if (!existsSync('/usr/sbin/ip') && !existsSync('/sbin/ip') && !existsSync('/usr/bin/ip')) return (skipReason = 'iproute2 (ip) is not installed')
  const probe = `agentd-probe-${process.pid}`
  try {
    await ip('netns', 'add', probe)
    await ip('netns', 'del', probe)
    skipReason = false
  } catch (err) {
    skipReason = `cannot create a network namespace: ${(err as Error).message.split('\n')[0]}`
  }
  return skipReason
}

async function ip (...args: string[]): Promise<void> {
  await run('ip', args, { timeout: 10_000 })
}

/** Builds `size` hosts (at most 250) on one bridge; deleted at teardown. */
export async function createNetnsLab (t: Teardown, size: number): Promise<NetnsLab> {
  if (size < 1 || size > 250) throw new Error(`a lab has 1..250 hosts, not ${size}`)
  const id = (process.pid % 200) + 20
  const prefix = `ad${id}x${Math.floor(Math.random() * 1e4)}`
  const switchNs = `${prefix}-sw`
  const hosts: NetnsHost[] = Array.from({ length: size }, (_, i) => ({ ns: `${prefix}-h${i}`, address: `10.231.${id}.${i + 1}` }))
  let destroyed: Promise<void> | undefined
  const destroy = (): Promise<void> => {
    destroyed ??= (async () => {
      // Deleting a namespace deletes its veth ends, and with them their peers.
      for (const ns of [switchNs, ...hosts.map(h => h.ns)]) await ip('netns', 'del', ns).catch(() => {})
    })()
    return destroyed
  }
  t.teardown(destroy)
  await ip('netns', 'add', switchNs)
  await ip('-n', switchNs, 'link', 'set', 'lo', 'up')
  // One bridge per possible side; bridge i is where group i's ports go.
  for (let b = 0; b < size; b++) {
    await ip('-n', switchNs, 'link', 'add', `br${b}`, 'type', 'bridge')
    await ip('-n', switchNs, 'link', 'set', `br${b}`, 'up')
  }
  for (const [i, h] of hosts.entries()) {
    await ip('netns', 'add', h.ns)
    await ip('-n', h.ns, 'link', 'set', 'lo', 'up')
    await ip('-n', switchNs, 'link', 'add', `p${i}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', h.ns)
    await ip('-n', switchNs, 'link', 'set', `p${i}`, 'master', 'br0', 'up')
    await ip('-n', h.ns, 'addr', 'add', `${h.address}/24`, 'dev', 'eth0')
    await ip('-n', h.ns, 'link', 'set', 'eth0', 'up')
  }
  const place = async (bridgeOf: (host: number) => number): Promise<void> => {
    await Promise.all(hosts.map((_, i) => ip('-n', switchNs, 'link', 'set', `p${i}`, 'master', `br${bridgeOf(i)}`)))
  }
  return {
    hosts,
    async partition (groups) {
      const groupOf = new Map<number, number>()
      groups.forEach((g, gi) => { for (const h of g) groupOf.set(h, gi) })
      // Hosts in no group each get a bridge of their own, after the groups'.
      let spare = groups.length
      const alone = new Map<number, number>()
      await place(h => {
        let bridge = groupOf.get(h) ?? alone.get(h)
        if (bridge === undefined) alone.set(h, bridge = spare++)
        return bridge
      })
    },
    heal: () => place(() => 0),
    async shapeUplinks (mbit) {
      // A burst of ~10 ms at the rate (at least 32 KiB), a queue of 50 ms.
      const burst = Math.max(32 * 1024, Math.round(mbit * 1e6 / 8 / 100))
      await Promise.all(hosts.map(h => run('ip', ['netns', 'exec', h.ns, 'tc', 'qdisc', 'replace', 'dev', 'eth0', 'root', 'tbf', 'rate', `${mbit}mbit`, 'burst', String(burst), 'latency', '50ms'], { timeout: 10_000 })))
    },
    destroy,
  }
}
