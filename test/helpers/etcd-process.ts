/**
 * startEtcd(t): a real single-member etcd (Debian's etcd-server, /usr/bin/etcd)
 * on loopback free ports with a temp data dir, killed and removed at teardown;
 * startEtcd(t, { host }) runs it in a network namespace of netns-lab.ts on
 * ports 2379/2380 of the host's address, where only the lab reaches it.
 * Tests that need it call etcdSkipReason() first and skip with its reason when
 * the binary is missing.
 *
 * Timing: heartbeat 50 ms, election timeout 500 ms, so etcd's minimum lease
 * TTL is 1 s (etcd raises shorter TTLs to 1.5 × election timeout, rounded up
 * to seconds) and the election tests can use etcdLeaseTtlS = 1.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { tempDir } from './agent-process.ts'
import type { NetnsHost } from './netns-lab.ts'

interface Teardown { teardown(fn: () => unknown): void }

export const etcdBinary = process.env.ETCD_BINARY ?? '/usr/bin/etcd'

/** Why etcd tests cannot run here, or undefined when they can. */
export function etcdSkipReason (): string | undefined {
  return existsSync(etcdBinary) ? undefined : `${etcdBinary} is missing (install Debian's etcd-server)`
}

export interface EtcdProcess {
  proc: ChildProcess
  /** The client URL, e.g. http://127.0.0.1:40123. */
  endpoint: string
  dataDir: string
  output(): string
  /** SIGKILLs etcd and waits for it to exit. */
  kill(): Promise<void>
  /** Starts it again on the same ports and data dir (after kill()). */
  restart(): Promise<void>
}

async function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port
      server.close(() => resolve(port))
    })
  })
}

export async function startEtcd (t: Teardown, options: { host?: NetnsHost } = {}): Promise<EtcdProcess> {
  const { host } = options
  const dir = tempDir(t, 'agentd-etcd-')
  const dataDir = join(dir, 'data')
  const endpoint = host !== undefined ? `http://${host.address}:2379` : `http://127.0.0.1:${await freePort()}`
  const peer = host !== undefined ? `http://${host.address}:2380` : `http://127.0.0.1:${await freePort()}`
  let output = ''
  let proc: ChildProcess
  let exited: Promise<void> = Promise.resolve()

  const launch = async (): Promise<void> => {
    const args = [
      '--name', 'test', '--data-dir', dataDir,
      '--listen-client-urls', endpoint, '--advertise-client-urls', endpoint,
      '--listen-peer-urls', peer, '--initial-advertise-peer-urls', peer, '--initial-cluster', `test=${peer}`,
      '--heartbeat-interval', '50', '--election-timeout', '500', '--log-level', host !== undefined ? 'info' : 'warn',
    ]
    // `ip netns exec` execs etcd itself: the pid, signals and exit are etcd's.
    proc = host !== undefined ? spawn('ip', ['netns', 'exec', host.ns, etcdBinary, ...args], { stdio: ['ignore', 'pipe', 'pipe'] }) : spawn(etcdBinary, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    const from = output.length
    proc.stdout!.on('data', (c: Buffer) => { output += c.toString() })
    proc.stderr!.on('data', (c: Buffer) => { output += c.toString() })
    exited = new Promise(resolve => proc.once('exit', () => resolve()))
    // The test process cannot reach a namespace's address: there etcd's own log says when it serves.
    const ready = host !== undefined
      ? async (): Promise<boolean> => output.indexOf('ready to serve client requests', from) >= 0
      : async (): Promise<boolean> => {
        try {
          return (await fetch(`${endpoint}/v3/maintenance/status`, { method: 'POST', body: '{}', signal: AbortSignal.timeout(500) })).ok
        } catch { return false } // not listening yet
      }
    const began = Date.now()
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`etcd exited before it was ready:\n${output}`)
      if (await ready()) return
      if (Date.now() - began > 20_000) throw new Error(`etcd not ready after 20 s:\n${output}`)
      await sleep(50)
    }
  }

  const kill = async (): Promise<void> => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL')
    await exited
  }
  t.teardown(kill)
  // A test file killed on timeout runs no teardown: etcd must not outlive it.
  process.once('exit', () => { if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL') })
  await launch()
  return { get proc () { return proc }, endpoint, dataDir, output: () => output, kill, restart: launch }
}
