// Type=notify readiness: READY=1 once every subsystem started, STOPPING=1 on shutdown.
// systemd is played by a python3 datagram socket (Node cannot receive unix datagrams).
import t from 'tap'
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { existsSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { spawnAgent, tempDir } from '../helpers/agent-process.ts'

const receiver = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("bound", flush=True)
while True:
    msg = s.recv(4096).decode()
    print(msg.replace("\\n", "|"), flush=True)
`

t.test('the agent notifies systemd when ready and when stopping', async t => {
  const dir = tempDir(t)
  const notifySocket = join(dir, 'notify.sock')
  const py = spawn('python3', ['-c', receiver, notifySocket], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { py.kill() })
  let received = ''
  py.stdout.on('data', (c: Buffer) => { received += c.toString() })
  while (!received.includes('bound')) await sleep(10)

  const agent = await spawnAgent(t, { stateDir: dir, env: { NOTIFY_SOCKET: notifySocket } })
  for (let i = 0; i < 200 && !received.includes('READY=1'); i++) await sleep(10)
  t.match(received, /READY=1\|STATUS=serving on .*agentd\.sock/, 'READY=1 with a status line')
  t.ok(existsSync(agent.socketPath), 'the API was up before READY=1 was sent')

  agent.proc.kill('SIGTERM')
  t.equal((await agent.exited).code, 0)
  t.match(received, /STOPPING=1/)
})

t.test('without NOTIFY_SOCKET nothing is sent and nothing fails', async t => {
  const agent = await spawnAgent(t)
  t.notMatch(agent.output(), /cannot notify systemd/)
  agent.proc.kill('SIGTERM')
  t.equal((await agent.exited).code, 0)
})
