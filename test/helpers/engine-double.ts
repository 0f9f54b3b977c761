/**
 * An inference-engine double for rollout tests and demos (RLBoost §4.1–4.2): an
 * HTTP server speaking the OpenAI completions API that vLLM and SGLang serve
 * (`POST /v1/completions`, `stream: true` as server-sent events, `GET
 * /v1/models`, `GET /health`), so whatever talks to it talks to a real engine
 * the same way. No GPU runs here; what it imitates:
 *
 * - Timing of continuous batching. One loop steps every running sequence by
 *   one token per step; a step takes decodeStepMs + decodeMsPerSeq × running
 *   sequences, plus prefillMsPerToken × the prompt tokens of the sequences
 *   admitted at that step (their first token comes out of the step that
 *   prefilled them). So time to first token grows with the prompt, time per
 *   token with the batch.
 * - KV capacity. A request is admitted (first come, first served) while the
 *   running sequences' prompt + max_tokens sum stays within kvCapacityTokens
 *   and fewer than maxRunning run; the others queue.
 * - Deterministic tokens that survive a resume. A token is a word (text
 *   " w<id>", leading space as BPE tokens have); the next one is a hash of the
 *   last four tokens of the whole context (prompt + generated) and of its
 *   length, and a hash decides end-of-sequence (about one in `eosEvery`
 *   steps: long-tailed lengths). A request resumed elsewhere with prompt +
 *   the text generated so far and the remaining max_tokens continues with
 *   exactly the tokens the first instance would have produced.
 * - Departure. A client that disconnects frees its sequence; the process
 *   killed mid-stream ends every stream without a final chunk, as a
 *   preempted node does.
 *
 * Bad requests get OpenAI's error body (`{ error: { message, type, param,
 * code } }`) with 400, an unknown model 404.
 *
 * Run: node test/helpers/engine-double.ts [--port 8000] [--host 127.0.0.1] [--model M]
 *      [--decode-step-ms 20] [--decode-ms-per-seq 0.25] [--prefill-ms-per-token 0.05]
 *      [--kv-capacity-tokens 65536] [--max-running 256] [--eos-every 200]
 */
import { spawn } from 'node:child_process'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'

export interface EngineDoubleOptions {
  model: string
  decodeStepMs: number
  decodeMsPerSeq: number
  prefillMsPerToken: number
  kvCapacityTokens: number
  maxRunning: number
  /** Mean length of an unbounded response, in tokens (end-of-sequence about once per eosEvery steps). */
  eosEvery: number
}

export const defaultEngineDoubleOptions: EngineDoubleOptions = {
  model: 'double', decodeStepMs: 20, decodeMsPerSeq: 0.25, prefillMsPerToken: 0.05, kvCapacityTokens: 65_536, maxRunning: 256, eosEvery: 200,
}

export interface EngineDouble {
  url: string
  server: Server
  /** Sequences running and waiting now. */
  load(): { running: number, queued: number }
  close(): Promise<void>
}

/** The words a text is made of: the double's tokens. */
export const tokenize = (text: string): string[] => text.split(/\s+/).filter(w => w !== '')

/** 32-bit FNV-1a of a string. */
function fnv1a (s: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0
  return h
}

/** The token after `context` (null: end of sequence). A pure function of the context: what makes resumes exact. */
export function nextToken (context: readonly string[], eosEvery: number): string | null {
  const h = fnv1a(`${context.slice(-4).join(' ')}|${context.length}`)
  if (context.length > 0 && Math.floor(h / 65_536) % eosEvery === 0) return null
  return `w${h % 50_000}`
}

/** What an engine generates for `prompt` undisturbed: the reference a resumed response must equal. */
export function uninterrupted (prompt: string, maxTokens: number, eosEvery: number): { text: string, finish: 'stop' | 'length' } {
  const context = tokenize(prompt)
  let text = ''
  for (let n = 0; n < maxTokens; n++) {
    const token = nextToken(context, eosEvery)
    if (token === null) return { text, finish: 'stop' }
    context.push(token)
    text += ` ${token}`
  }
  return { text, finish: 'length' }
}

interface Sequence {
  context: string[]
  promptTokens: number
  maxTokens: number
  generated: number
  emit(text: string): void
  finish(reason: 'stop' | 'length'): void
  gone: boolean
}

class RequestError extends Error {
  readonly status: number
  readonly param: string | null
  readonly code: string
  constructor (status: number, message: string, param: string | null, code: string) {
    super(message)
    this.status = status
    this.param = param
    this.code = code
  }
}

function parseCompletion (body: unknown, model: string): { prompt: string, maxTokens: number, stream: boolean } {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new RequestError(400, 'the body must be a JSON object', null, 'invalid_body')
  const b = body as Record<string, unknown>
  if (b.model !== undefined && b.model !== model) throw new RequestError(404, `the model ${JSON.stringify(b.model)} does not exist (this server serves ${JSON.stringify(model)})`, 'model', 'model_not_found')
  if (typeof b.prompt !== 'string') throw new RequestError(400, 'prompt must be a string', 'prompt', 'invalid_prompt')
  const maxTokens = b.max_tokens ?? 16
  if (typeof maxTokens !== 'number' || !Number.isInteger(maxTokens) || maxTokens < 1 || maxTokens > 1_000_000) {
    throw new RequestError(400, `max_tokens must be an integer from 1 to 1000000, got ${JSON.stringify(b.max_tokens)}`, 'max_tokens', 'invalid_max_tokens')
  }
  if (b.stream !== undefined && typeof b.stream !== 'boolean') throw new RequestError(400, 'stream must be true or false', 'stream', 'invalid_stream')
  return { prompt: b.prompt, maxTokens, stream: b.stream === true }
}

async function readJson (req: IncomingMessage): Promise<unknown> {
  let text = ''
  for await (const chunk of req) {
    text += String(chunk)
    if (text.length > 16 * 2 ** 20) throw new RequestError(400, 'the body exceeds 16 MiB', null, 'body_too_large')
  }
  try {
    return JSON.parse(text)
  } catch {
    throw new RequestError(400, 'the body is not JSON', null, 'invalid_json')
  }
}

export async function startEngineDouble (overrides: Partial<EngineDoubleOptions> = {}, listen: { port?: number, host?: string } = {}): Promise<EngineDouble> {
  const o = { ...defaultEngineDoubleOptions, ...overrides }
  const running: Sequence[] = []
  const queued: Sequence[] = []
  let stepping = false
  let ids = 0

  const reserved = (s: Sequence): number => s.promptTokens + s.maxTokens
  /** One decode step over every running sequence, admitting what fits first; loops while there is work. */
  const step = async (): Promise<void> => {
    if (stepping) return
    stepping = true
    try {
      while (running.length + queued.length > 0) {
        for (let i = running.length - 1; i >= 0; i--) if (running[i]!.gone) running.splice(i, 1)
        let prefill = 0
        let used = running.reduce((n, s) => n + reserved(s), 0)
        while (queued.length > 0 && running.length < o.maxRunning) {
          const next = queued[0]!
          if (next.gone) { queued.shift(); continue }
          // One request larger than the whole capacity runs alone rather than waiting for ever.
          if (used + reserved(next) > o.kvCapacityTokens && running.length > 0) break
          queued.shift()
          running.push(next)
          used += reserved(next)
          prefill += next.promptTokens
        }
        if (running.length === 0) continue
        await new Promise(resolve => setTimeout(resolve, o.decodeStepMs + o.decodeMsPerSeq * running.length + o.prefillMsPerToken * prefill))
        for (let i = running.length - 1; i >= 0; i--) {
          const s = running[i]!
          if (s.gone) { running.splice(i, 1); continue }
          const token = nextToken(s.context, o.eosEvery)
          if (token === null) { s.finish('stop'); running.splice(i, 1); continue }
          s.context.push(token)
          s.generated++
          s.emit(` ${token}`)
          if (s.generated >= s.maxTokens) { s.finish('length'); running.splice(i, 1) }
        }
      }
    } finally {
      stepping = false
    }
  }

  const complete = (req: IncomingMessage, res: ServerResponse, r: { prompt: string, maxTokens: number, stream: boolean }): void => {
    const id = `cmpl-${process.pid}-${++ids}`
    const created = Math.floor(Date.now() / 1000)
    const context = tokenize(r.prompt)
    const chunk = (text: string, finish: string | null, usage?: object): string =>
      JSON.stringify({ id, object: 'text_completion', created, model: o.model, choices: [{ index: 0, text, logprobs: null, finish_reason: finish }], ...(usage !== undefined ? { usage } : {}) })
    let text = ''
    const seq: Sequence = {
      context, promptTokens: context.length, maxTokens: r.maxTokens, generated: 0, gone: false,
      emit: t => { if (r.stream) res.write(`data: ${chunk(t, null)}\n\n`); else text += t },
      finish: reason => {
        const usage = { prompt_tokens: seq.promptTokens, completion_tokens: seq.generated, total_tokens: seq.promptTokens + seq.generated }
        if (r.stream) {
          res.end(`data: ${chunk('', reason, usage)}\n\ndata: [DONE]\n\n`)
        } else {
          res.writeHead(200, { 'content-type': 'application/json' }).end(chunk(text, reason, usage))
        }
      },
    }
    if (r.stream) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    res.once('close', () => { seq.gone = true })
    req.socket.setNoDelay(true)
    queued.push(seq)
    void step()
  }

  const server = createServer((req, res) => {
    const fail = (err: unknown): void => {
      const e = err instanceof RequestError ? err : new RequestError(500, String((err as Error)?.message ?? err), null, 'internal_error')
      if (!res.headersSent) res.writeHead(e.status, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: { message: e.message, type: e.status === 404 ? 'not_found_error' : 'invalid_request_error', param: e.param, code: e.code } }))
    }
    const path = (req.url ?? '/').split('?')[0]
    if (req.method === 'GET' && path === '/health') { res.writeHead(200).end(); return }
    if (req.method === 'GET' && path === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ object: 'list', data: [{ id: o.model, object: 'model', owned_by: 'agentd-engine-double' }] }))
      return
    }
    if (path !== '/v1/completions') { fail(new RequestError(404, `no route ${req.method} ${path}`, null, 'not_found')); return }
    if (req.method !== 'POST') { fail(new RequestError(405, `${path} takes POST`, null, 'method_not_allowed')); return }
    readJson(req).then(body => complete(req, res, parseCompletion(body, o.model))).catch(fail)
  })
  server.listen(listen.port ?? 0, listen.host ?? '127.0.0.1')
  await new Promise<void>((resolve, reject) => { server.once('listening', resolve); server.once('error', reject) })
  const { address, port } = server.address() as AddressInfo
  return {
    url: `http://${address}:${port}`,
    server,
    load: () => ({ running: running.filter(s => !s.gone).length, queued: queued.filter(s => !s.gone).length }),
    close: async () => { server.closeAllConnections(); await new Promise<void>(resolve => server.close(() => resolve())) },
  }
}

/**
 * The double as a process of its own (`args`: its command-line flags), on a free port: killing it is
 * an engine's node preempted. Killed when `t` tears down.
 */
export async function spawnEngineDouble (t: { teardown(fn: () => unknown): void }, id: string, args: string[] = []): Promise<{ id: string, url: string, kill(): void }> {
  const proc = spawn(process.execPath, [fileURLToPath(import.meta.url), '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { proc.kill('SIGKILL') })
  const line = (await createInterface({ input: proc.stdout! })[Symbol.asyncIterator]().next()).value as string | undefined
  const url = line === undefined ? undefined : /at (http:\/\/\S+)/.exec(line)?.[1]
  if (url === undefined) throw new Error(`engine double ${id} did not start (said ${JSON.stringify(line)})`)
  return { id, url, kill: () => proc.kill('SIGKILL') }
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      port: { type: 'string', default: '8000' }, host: { type: 'string', default: '127.0.0.1' }, model: { type: 'string', default: defaultEngineDoubleOptions.model },
      'decode-step-ms': { type: 'string' }, 'decode-ms-per-seq': { type: 'string' }, 'prefill-ms-per-token': { type: 'string' },
      'kv-capacity-tokens': { type: 'string' }, 'max-running': { type: 'string' }, 'eos-every': { type: 'string' },
    },
  })
  const num = (flag: string, v: string | undefined, fallback: number): number => {
    if (v === undefined) return fallback
    const n = Number(v)
    if (!Number.isFinite(n) || n < 0) throw new Error(`--${flag} must be a number >= 0, got ${JSON.stringify(v)}`)
    return n
  }
  const d = defaultEngineDoubleOptions
  const engine = await startEngineDouble({
    model: values.model,
    decodeStepMs: num('decode-step-ms', values['decode-step-ms'], d.decodeStepMs),
    decodeMsPerSeq: num('decode-ms-per-seq', values['decode-ms-per-seq'], d.decodeMsPerSeq),
    prefillMsPerToken: num('prefill-ms-per-token', values['prefill-ms-per-token'], d.prefillMsPerToken),
    kvCapacityTokens: Math.max(1, num('kv-capacity-tokens', values['kv-capacity-tokens'], d.kvCapacityTokens)),
    maxRunning: Math.max(1, num('max-running', values['max-running'], d.maxRunning)),
    eosEvery: Math.max(1, num('eos-every', values['eos-every'], d.eosEvery)),
  }, { port: num('port', values.port, 8000), host: values.host })
  console.log(`engine double serving ${values.model} at ${engine.url}`)
}
