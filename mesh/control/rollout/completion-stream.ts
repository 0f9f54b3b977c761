/**
 * One streamed completion from an OpenAI-compatible engine (vLLM, SGLang:
 * `POST <url>/v1/completions` with `stream: true`, server-sent events of
 * `data: {choices: [{text, finish_reason}]}` ending in `data: [DONE]`),
 * delivered token by token as it arrives (RLBoost §4.2: collection at token
 * granularity is what lets a request continue elsewhere).
 *
 * Contract:
 * - `onToken(text)` is called once per event with non-empty text, in order;
 *   the promise resolves with the finish reason ('stop' | 'length' | …) once
 *   the final event and [DONE] arrived.
 * - It rejects with a StreamFailure saying why, and the tokens delivered
 *   before stay valid (the caller resumes from them):
 *   - 'broken': the connection failed or closed before the finish (a
 *     preempted or killed engine);
 *   - 'stalled': no first token within firstTokenMs (a request the engine
 *     holds queued has nothing to send, so this bound is the longer one), or
 *     no next token for stallMs (an engine that hangs mid-generation);
 *   - 'garbage': a non-200 answer, an event that is not the API's JSON, or
 *     more tokens than max_tokens (an engine that misbehaves);
 *   - 'aborted': the caller's signal fired (a migration).
 * - An event is counted as one token: engines stream one event per decode
 *   step of a request (vLLM, SGLang; speculative decoding can put several
 *   tokens in one event, which then counts as one, so a resumed request may
 *   be allowed a few more tokens than the first would have produced).
 */

export type StreamFailureKind = 'broken' | 'stalled' | 'garbage' | 'aborted'

export class StreamFailure extends Error {
  readonly kind: StreamFailureKind
  constructor (kind: StreamFailureKind, message: string) {
    super(message)
    this.kind = kind
  }
}

export interface CompletionRequest {
  prompt: string
  maxTokens: number
  /** Passed through to the engine (temperature, top_p, seed, stop, …). */
  sampling?: Record<string, unknown>
}

export interface StreamOptions {
  model?: string
  signal: AbortSignal
  firstTokenMs: number
  stallMs: number
  onToken(text: string): void
}

export async function streamCompletion (baseUrl: string, request: CompletionRequest, o: StreamOptions): Promise<string> {
  const controller = new AbortController()
  const abort = (): void => controller.abort()
  o.signal.addEventListener('abort', abort, { once: true })
  let stall: NodeJS.Timeout | undefined
  let stalled: string | undefined
  const armStall = (ms: number, what: string): void => {
    clearTimeout(stall)
    stall = setTimeout(() => { stalled = `${what} for ${ms} ms`; controller.abort() }, ms)
  }
  const failure = (err: unknown): StreamFailure => {
    if (err instanceof StreamFailure) return err
    if (o.signal.aborted) return new StreamFailure('aborted', 'the collection was moved elsewhere')
    if (stalled !== undefined) return new StreamFailure('stalled', stalled)
    return new StreamFailure('broken', `the stream broke off: ${(err as Error)?.message ?? String(err)}`)
  }
  try {
    armStall(o.firstTokenMs, 'no first token')
    const body = { ...o.model !== undefined ? { model: o.model } : {}, ...request.sampling, prompt: request.prompt, max_tokens: request.maxTokens, stream: true }
    const res = await fetch(`${baseUrl}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: controller.signal })
    if (res.status !== 200 || res.body === null) {
      throw new StreamFailure('garbage', `the engine answered ${res.status}: ${(await res.text().catch(() => '')).slice(0, 300)}`)
    }
    let buffered = ''
    const utf8 = new TextDecoder() // a character may be split across chunks
    let tokens = 0
    let finish: string | null = null
    for await (const chunk of res.body) {
      buffered = (buffered + utf8.decode(chunk, { stream: true })).replace(/\r\n/g, '\n') // events end in a blank line, \n or \r\n
      for (let end = buffered.indexOf('\n\n'); end >= 0; end = buffered.indexOf('\n\n')) {
        const event = buffered.slice(0, end).trim()
        buffered = buffered.slice(end + 2)
        if (event === '' || event.startsWith(':')) continue // SSE comment or keep-alive
        if (!event.startsWith('data:')) throw new StreamFailure('garbage', `not a server-sent data event: ${event.slice(0, 100)}`)
        const data = event.slice(5).trim()
        if (data === '[DONE]') {
          if (finish === null) throw new StreamFailure('garbage', '[DONE] without a finish reason')
          return finish
        }
        const choice = parseChoice(data)
        if (choice.text !== '') {
          if (++tokens > request.maxTokens) throw new StreamFailure('garbage', `more than the ${request.maxTokens} tokens asked for`)
          o.onToken(choice.text)
        }
        if (choice.finish !== null) finish = choice.finish
      }
      if (tokens > 0) armStall(o.stallMs, 'no next token')
    }
    throw new StreamFailure('broken', finish === null ? 'the stream ended without a finish reason' : 'the stream ended without [DONE]')
  } catch (err) {
    throw failure(err)
  } finally {
    clearTimeout(stall)
    o.signal.removeEventListener('abort', abort)
    controller.abort() // frees the engine's sequence when we leave early
  }
}

function parseChoice (data: string): { text: string, finish: string | null } {
  let parsed: unknown
  try {
    parsed = JSON.parse(data)
  } catch {
    throw new StreamFailure('garbage', `an event that is not JSON: ${data.slice(0, 100)}`)
  }
  const choice = (parsed as { choices?: unknown })?.choices
  const first = Array.isArray(choice) ? choice[0] as { text?: unknown, finish_reason?: unknown } | undefined : undefined
  if (first === undefined || typeof first.text !== 'string' || (first.finish_reason !== null && first.finish_reason !== undefined && typeof first.finish_reason !== 'string')) {
    throw new StreamFailure('garbage', `an event without choices[0].text: ${data.slice(0, 100)}`)
  }
  return { text: first.text, finish: (first.finish_reason as string | null | undefined) ?? null }
}
