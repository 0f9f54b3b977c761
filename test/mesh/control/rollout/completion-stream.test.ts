// The streaming completion client against raw HTTP servers that send what engines send, byte by byte:
// CRLF event endings, a character split across TCP writes, and the ways a stream goes wrong.
import t, { type Test } from 'tap'
import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { streamCompletion, type StreamFailure } from '../../../../mesh/control/rollout/completion-stream.ts'

/** A server that answers every completion with `script(res)`. */
async function server (t: Test, script: (res: ServerResponse) => Promise<void>): Promise<string> {
  const s = createServer((req, res) => { req.resume(); res.writeHead(200, { 'content-type': 'text/event-stream' }); void script(res).catch(() => {}) })
  s.listen(0, '127.0.0.1')
  await new Promise(resolve => s.once('listening', resolve))
  t.teardown(() => { s.closeAllConnections(); s.close() })
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`
}
const event = (text: string, finish: string | null = null): string => `data: ${JSON.stringify({ choices: [{ index: 0, text, finish_reason: finish }] })}`

async function collect (url: string, o: { maxTokens?: number, firstTokenMs?: number, stallMs?: number } = {}): Promise<{ tokens: string[], finish?: string, failure?: StreamFailure }> {
  const tokens: string[] = []
  try {
    const finish = await streamCompletion(url, { prompt: 'p', maxTokens: o.maxTokens ?? 10 }, { signal: new AbortController().signal, firstTokenMs: o.firstTokenMs ?? 5000, stallMs: o.stallMs ?? 5000, onToken: x => tokens.push(x) })
    return { tokens, finish }
  } catch (err) {
    return { tokens, failure: err as StreamFailure }
  }
}

t.test('CRLF endings, keep-alive comments and a character split across writes arrive intact', async t => {
  const url = await server(t, async res => {
    const bytes = Buffer.from(`${event(' héllo')}\r\n\r\n: keep-alive\r\n\r\n${event(' 世界')}\r\n\r\n${event('', 'stop')}\r\n\r\ndata: [DONE]\r\n\r\n`)
    const cut = bytes.indexOf(Buffer.from('é')) + 1 // inside the two bytes of é
    res.write(bytes.subarray(0, cut))
    await sleep(20)
    res.end(bytes.subarray(cut))
  })
  t.same(await collect(url), { tokens: [' héllo', ' 世界'], finish: 'stop' })
})

t.test('each way a stream goes wrong, named; the tokens before it are kept', async t => {
  const cases: Array<[string, (res: ServerResponse) => Promise<void>, { maxTokens?: number, firstTokenMs?: number, stallMs?: number }, string, RegExp]> = [
    ['ends without a finish', async res => { res.end(`${event(' a')}\n\n`) }, {}, 'broken', /without a finish reason/],
    ['[DONE] without a finish', async res => { res.end(`${event(' a')}\n\ndata: [DONE]\n\n`) }, {}, 'garbage', /\[DONE\] without a finish reason/],
    ['a line that is not an event', async res => { res.end(`${event(' a')}\n\nhello\n\n`) }, {}, 'garbage', /not a server-sent data event/],
    ['choices missing', async res => { res.end(`${event(' a')}\n\ndata: {"id":1}\n\n`) }, {}, 'garbage', /without choices\[0\]\.text/],
    ['more tokens than asked', async res => { res.end(`${event(' a')}\n\n${event(' b')}\n\n${event(' c')}\n\n`) }, { maxTokens: 2 }, 'garbage', /more than the 2 tokens/],
    ['stalls after a token', async res => { res.write(`${event(' a')}\n\n`); await sleep(5000, undefined, { ref: false }) }, { stallMs: 200 }, 'stalled', /no next token for 200 ms/],
  ]
  for (const [name, script, o, kind, message] of cases) {
    const r = await collect(await server(t, script), o)
    t.equal(r.failure?.kind, kind, `${name}: ${kind}`)
    t.match(r.failure?.message, message, `${name}: ${r.failure?.message}`)
    t.same(r.tokens.slice(0, 1), [' a'], `${name}: the token before it was delivered`)
  }
  const silent = await collect(await server(t, async () => { await sleep(5000, undefined, { ref: false }) }), { firstTokenMs: 200 })
  t.match(silent.failure, { kind: 'stalled', message: /no first token for 200 ms/ }, 'nothing at all: stalled waiting for the first token')
  const refused = await collect('http://127.0.0.1:1')
  t.equal(refused.failure?.kind, 'broken', `a refused connection: broken (${refused.failure?.message})`)
})
