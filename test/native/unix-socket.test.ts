import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { createConnection, createServer, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { notifySystemd, peerCredentials } from '../../native/index.ts'

function tempDir (t: { teardown: (fn: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-sock-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

t.test('SO_PEERCRED of both ends of a real unix socket', async (t) => {
  const path = join(tempDir(t), 'api.sock')
  const accepted = new Promise<Socket>((resolve) => {
    const server = createServer(resolve)
    server.listen(path)
    t.teardown(() => server.close())
  })
  await new Promise((resolve) => setTimeout(resolve, 10))
  const client = createConnection(path)
  await once(client, 'connect')
  const serverSide = await accepted
  t.teardown(() => { client.destroy(); serverSide.destroy() })
  const expected = { pid: process.pid, uid: process.getuid!(), gid: process.getgid!() }
  t.same(peerCredentials(serverSide), expected, 'server side sees the client (this process)')
  t.same(peerCredentials(client), expected, 'and the other way round')
  t.throws(() => peerCredentials(-1), { code: 'ERR_ARG_INVALID' })
  t.throws(() => peerCredentials(0x7fff), { code: 'ERR_SYSTEM', message: /EBADF/ })
})

/** A python3 process that receives one datagram on `address` and prints it. */
async function datagramReceiver (address: string): Promise<{ message: Promise<string> }> {
  const script = [
    'import socket, sys',
    's = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)',
    'addr = sys.argv[1]',
    "s.bind('\\0' + addr[1:] if addr.startswith('@') else addr)",
    "print('ready', flush=True)",
    "print(s.recv(4096).decode(), end='', flush=True)",
  ].join('\n')
  const child = spawn('python3', ['-c', script, address], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.setEncoding('utf8')
  const ready = new Promise<void>((resolve) => child.stdout.on('data', (chunk: string) => {
    out += chunk
    if (out.startsWith('ready\n')) resolve()
  }))
  await ready
  const message = once(child, 'exit').then(() => out.slice('ready\n'.length))
  return { message }
}

t.test('notifySystemd sends one datagram to a socket path', async (t) => {
  const path = join(tempDir(t), 'notify.sock')
  const receiver = await datagramReceiver(path)
  t.equal(notifySystemd('READY=1\nSTATUS=serving', { NOTIFY_SOCKET: path }), true)
  t.equal(await receiver.message, 'READY=1\nSTATUS=serving')
})

t.test('notifySystemd to the abstract namespace', async (t) => {
  const address = `@agentd-test-${process.pid}-${Date.now()}`
  const receiver = await datagramReceiver(address)
  t.equal(notifySystemd('WATCHDOG=1', { NOTIFY_SOCKET: address }), true)
  t.equal(await receiver.message, 'WATCHDOG=1')
})

t.test('notifySystemd without NOTIFY_SOCKET, and failures', (t) => {
  t.equal(notifySystemd('READY=1', {}), false, 'not run by systemd')
  t.equal(notifySystemd('READY=1', { NOTIFY_SOCKET: '' }), false)
  t.throws(() => notifySystemd('READY=1', { NOTIFY_SOCKET: join(tmpdir(), `agentd-none-${process.pid}.sock`) }),
    { code: 'ERR_SYSTEM', message: /ENOENT/ }, 'the errno name is in the message')
  t.throws(() => notifySystemd('READY=1', { NOTIFY_SOCKET: 'relative.sock' }), { code: 'ERR_ARG_INVALID' })
  t.throws(() => notifySystemd('', { NOTIFY_SOCKET: '/x' }), { code: 'ERR_ARG_INVALID' })
  t.end()
})
