// The local API listening on a real unix socket in a temp dir, built the way
// the daemon builds it (createApiServer), with its log lines captured.
import { join } from 'node:path'
import { connect } from 'node:net'
import { pino } from 'pino'
import { createApiServer, type ApiServer, type ApiServerComponents, type ApiServerOptions } from '../../../agent/api/server.ts'
import { createAgentClient, type AgentClient } from '../../../agent/client/client.ts'
import type { StatusBody } from '../../../agent/api/wire/status.ts'
import { tempDir } from '../../helpers/agent-process.ts'

interface Teardown { teardown(fn: () => unknown): void }

export interface LogLine { level: number, msg: string, [field: string]: unknown }

export interface ListeningApi {
  server: ApiServer
  socketPath: string
  client: AgentClient
  /** Every line the API logged (debug and up), parsed. */
  logs: LogLine[]
}

export async function listenApi (
  t: Teardown,
  options: Partial<Pick<ApiServerOptions, 'maxConnections' | 'requestTimeoutMs' | 'bodyLimitBytes'>>,
  components: Partial<Omit<ApiServerComponents, 'logger'>> = {},
): Promise<ListeningApi> {
  const logs: LogLine[] = []
  const logger = pino({ level: 'debug' }, { write: (line: string) => { logs.push(JSON.parse(line) as LogLine) } })
  const socketPath = join(tempDir(t), 'api.sock')
  const server = await createApiServer({ socketPath, socketMode: '0600', socketGroup: '', bodyLimitBytes: 1 << 20, version: '0.0.0', ...options }, {
    logger,
    status: { status: () => ({}) as StatusBody },
    inventory: { inventory: () => undefined },
    ...components,
  })
  await server.start()
  t.teardown(() => server.stop())
  return { server, socketPath, client: createAgentClient({ socketPath, timeoutMs: 10_000 }), logs }
}

export interface RawExchange {
  /** Everything the agent sent back. */
  text: string
  /** Whether the agent closed the connection within maxWaitMs. */
  closed: boolean
  /** From the first byte written to the close (or to maxWaitMs), ms. */
  elapsedMs: number
}

/**
 * Writes `pieces` to a fresh connection, `gapMs` apart, and reads until the
 * agent closes it or `maxWaitMs` passes (then the test closes it).
 */
export async function rawExchange (socketPath: string, pieces: string[], { gapMs = 0, maxWaitMs = 5000 } = {}): Promise<RawExchange> {
  const socket = connect(socketPath)
  await new Promise<void>((resolve, reject) => { socket.once('connect', resolve); socket.once('error', reject) })
  socket.on('error', () => {}) // a reset after the answer is the same as a close here
  let text = ''
  socket.setEncoding('utf8')
  socket.on('data', (chunk: string) => { text += chunk })
  const began = performance.now()
  const closed = new Promise<boolean>(resolve => {
    const timer = setTimeout(() => resolve(false), maxWaitMs)
    socket.once('close', () => { clearTimeout(timer); resolve(true) })
  })
  for (const [i, piece] of pieces.entries()) {
    if (i > 0 && gapMs > 0) await new Promise(resolve => setTimeout(resolve, gapMs))
    if (!socket.destroyed) socket.write(piece)
  }
  const wasClosed = await closed
  const elapsedMs = performance.now() - began
  socket.destroy()
  return { text, closed: wasClosed, elapsedMs }
}

/** The JSON body of a raw HTTP/1.1 answer (one with Content-Length). */
export function bodyOf (answer: string): unknown {
  const at = answer.indexOf('\r\n\r\n')
  return at < 0 ? undefined : JSON.parse(answer.slice(at + 4))
}

export async function until (predicate: () => boolean | Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const began = Date.now()
  while (!(await predicate())) {
    if (Date.now() - began > timeoutMs) throw new Error('condition not met in time')
    await new Promise(resolve => setTimeout(resolve, 10))
  }
}
