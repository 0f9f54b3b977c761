// The inference-engine double behaves like an engine where the rollout tests rely on it: the OpenAI
// completions API (streamed and not), deterministic tokens that a resume continues exactly, time to
// first token growing with the prompt, time per token with the batch, a KV capacity that queues, and
// OpenAI's error bodies for bad requests. A real HTTP server in a separate process where it is killed.
import t, { type Test } from 'tap'
import { nextToken, spawnEngineDouble, startEngineDouble, tokenize, type EngineDouble } from './engine-double.ts'

interface Streamed { text: string, tokens: number, finish: string | null, firstTokenMs: number, doneMs: number, done: boolean, usage?: { prompt_tokens: number, completion_tokens: number } }

/** POSTs a streamed completion and reads its server-sent events to the end (or until the stream breaks). */
async function stream (url: string, body: Record<string, unknown>): Promise<Streamed> {
  const began = performance.now()
  const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) })
  if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`)
  const out: Streamed = { text: '', tokens: 0, finish: null, firstTokenMs: -1, doneMs: -1, done: false }
  let buffered = ''
  try {
    for await (const chunk of res.body!) {
      buffered += Buffer.from(chunk).toString()
      for (let end = buffered.indexOf('\n\n'); end >= 0; end = buffered.indexOf('\n\n')) {
        const event = buffered.slice(0, end).replace(/^data: /, '')
        buffered = buffered.slice(end + 2)
        if (event === '[DONE]') { out.done = true; continue }
        const c = JSON.parse(event) as { choices: Array<{ text: string, finish_reason: string | null }>, usage?: Streamed['usage'] }
        if (c.choices[0]!.text !== '') {
          if (out.firstTokenMs < 0) out.firstTokenMs = performance.now() - began
          out.text += c.choices[0]!.text
          out.tokens++
        }
        out.finish = c.choices[0]!.finish_reason ?? out.finish
        if (c.usage !== undefined) out.usage = c.usage
      }
    }
  } catch { /* the stream broke off: what arrived is the answer */ }
  out.doneMs = performance.now() - began
  return out
}

const prompt = (words: number, seed = 0): string => Array.from({ length: words }, (_, i) => `p${(i * 7919 + seed) % 1000}`).join(' ')
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

async function engine (t: Test, o: Parameters<typeof startEngineDouble>[0] = {}): Promise<EngineDouble> {
  const e = await startEngineDouble(o)
  t.teardown(() => e.close())
  return e
}

t.test('tokens are a pure function of the context: a resume with prompt + text so far continues exactly', async t => {
  const e = await engine(t, { decodeStepMs: 1, eosEvery: 1_000_000 })
  const whole = await stream(e.url, { prompt: prompt(30), max_tokens: 40 })
  t.equal(whole.tokens, 40)
  t.equal(whole.finish, 'length')
  t.ok(whole.done, 'the stream ends with [DONE]')
  t.same(whole.usage, { prompt_tokens: 30, completion_tokens: 40, total_tokens: 70 })
  t.equal((await stream(e.url, { prompt: prompt(30), max_tokens: 40 })).text, whole.text, 'the same request gives the same tokens')
  for (const k of [1, 17, 39]) {
    const first = tokenize(whole.text).slice(0, k).map(w => ` ${w}`).join('')
    const rest = await stream(e.url, { prompt: prompt(30) + first, max_tokens: 40 - k })
    t.equal(first + rest.text, whole.text, `resumed after ${k} tokens: the remaining ${40 - k} are identical`)
  }
  const ends = Array.from({ length: 200 }, (_, i) => {
    const ctx = tokenize(prompt(5, i))
    let n = 0
    for (let token = nextToken(ctx, 50); token !== null && n < 5000; token = nextToken(ctx, 50)) { ctx.push(token); n++ }
    return n
  })
  const mean = ends.reduce((a, b) => a + b, 0) / ends.length
  t.ok(mean > 25 && mean < 100, `eosEvery 50: mean response length ${mean.toFixed(1)} tokens`)
  t.ok(Math.max(...ends) > 3 * median(ends), `long-tailed: longest ${Math.max(...ends)}, median ${median(ends)}`)
})

t.test('non-streamed completions and the model list speak the same API', async t => {
  const e = await engine(t, { decodeStepMs: 1, eosEvery: 1_000_000, model: 'qwen-double' })
  const streamed = await stream(e.url, { prompt: 'a b c', max_tokens: 5 })
  const res = await fetch(`${e.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ model: 'qwen-double', prompt: 'a b c', max_tokens: 5 }) })
  const body = await res.json() as { object: string, model: string, choices: Array<{ text: string, finish_reason: string }>, usage: object }
  t.match(body, { object: 'text_completion', model: 'qwen-double', choices: [{ text: streamed.text, finish_reason: 'length' }], usage: { prompt_tokens: 3, completion_tokens: 5 } })
  t.match(await (await fetch(`${e.url}/v1/models`)).json(), { object: 'list', data: [{ id: 'qwen-double' }] })
  t.equal((await fetch(`${e.url}/health`)).status, 200)
})

t.test('timing: first token later for longer prompts, each token slower in a bigger batch, a full KV capacity queues', async t => {
  const e = await engine(t, { decodeStepMs: 4, decodeMsPerSeq: 0.5, prefillMsPerToken: 0.05, eosEvery: 1_000_000, kvCapacityTokens: 1_000_000 })
  const short = await stream(e.url, { prompt: prompt(10), max_tokens: 1 })
  const long = await stream(e.url, { prompt: prompt(4000), max_tokens: 1 })
  t.ok(long.firstTokenMs > short.firstTokenMs + 100, `TTFT ${short.firstTokenMs.toFixed(1)} ms for 10 prompt tokens, ${long.firstTokenMs.toFixed(1)} ms for 4,000 (prefill 0.05 ms/token)`)
  const alone = await stream(e.url, { prompt: prompt(10), max_tokens: 30 })
  const batch = await Promise.all(Array.from({ length: 64 }, (_, i) => stream(e.url, { prompt: prompt(10, i), max_tokens: 30 })))
  const perToken = (s: Streamed): number => (s.doneMs - s.firstTokenMs) / (s.tokens - 1)
  t.ok(median(batch.map(perToken)) > 2 * perToken(alone), `per token: ${perToken(alone).toFixed(1)} ms alone, ${median(batch.map(perToken)).toFixed(1)} ms in a batch of 64 (4 + 0.5/seq ms per step)`)

  const small = await engine(t, { decodeStepMs: 2, eosEvery: 1_000_000, kvCapacityTokens: 4 * 110 })
  const pending = Array.from({ length: 8 }, (_, i) => stream(small.url, { prompt: prompt(10, i), max_tokens: 100 }))
  // Requests arrive one by one and are admitted at step boundaries: wait for the steady state.
  for (const deadline = Date.now() + 5000; (small.load().running < 4 || small.load().queued < 4) && Date.now() < deadline;) await new Promise(resolve => setTimeout(resolve, 2))
  t.same(small.load(), { running: 4, queued: 4 }, 'room for 4 requests of 10 + 100 tokens: 4 run, 4 wait')
  const done = await Promise.all(pending)
  const firsts = done.map(s => s.firstTokenMs).sort((a, b) => a - b)
  t.ok(firsts[4]! > firsts[3]! + 100, `the queued four start once the first four finished (TTFT ${firsts.map(x => x.toFixed(0)).join(', ')} ms)`)
  t.ok(done.every(s => s.tokens === 100 && s.finish === 'length'), 'all eight complete')
})

t.test('bad requests get OpenAI error bodies and change nothing', async t => {
  const e = await engine(t, { model: 'm' })
  const post = async (body: string): Promise<{ status: number, body: { error: { code: string, param: string | null, message: string } } }> => {
    const res = await fetch(`${e.url}/v1/completions`, { method: 'POST', body })
    return { status: res.status, body: await res.json() as never }
  }
  for (const [body, status, code] of [
    ['{', 400, 'invalid_json'], ['[]', 400, 'invalid_body'], ['{"max_tokens": 3}', 400, 'invalid_prompt'],
    ['{"prompt": "a", "max_tokens": 0}', 400, 'invalid_max_tokens'], ['{"prompt": "a", "max_tokens": 1.5}', 400, 'invalid_max_tokens'],
    ['{"prompt": "a", "stream": "yes"}', 400, 'invalid_stream'], ['{"prompt": "a", "model": "other"}', 404, 'model_not_found'],
  ] as const) {
    const a = await post(body)
    t.equal(a.status, status, `${body}: ${status}`)
    t.equal(a.body.error.code, code, `${body}: ${a.body.error.message}`)
  }
  t.equal((await fetch(`${e.url}/v1/chat`)).status, 404)
  t.equal((await fetch(`${e.url}/v1/completions`)).status, 405)
  t.same(e.load(), { running: 0, queued: 0 }, 'nothing was admitted')
})

t.test('the engine killed mid-stream ends the stream without a final chunk, as a preempted node does', async t => {
  const engine = await spawnEngineDouble(t, 'killed', ['--decode-step-ms', '5'])
  const url = engine.url
  const pending = stream(url, { prompt: 'x y', max_tokens: 10_000 })
  await new Promise(resolve => setTimeout(resolve, 300))
  engine.kill()
  const cut = await pending
  t.ok(cut.tokens > 10 && cut.tokens < 10_000, `${cut.tokens} tokens arrived before the kill`)
  t.equal(cut.finish, null, 'no finish reason')
  t.notOk(cut.done, 'no [DONE]')
})
