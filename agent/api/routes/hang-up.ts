/**
 * A signal that fires when the caller hangs up before its answer was sent:
 * long-polls stop waiting, a rollout step ends.
 */
export function hangUpSignal (reply: { raw: NodeJS.EventEmitter & { writableFinished: boolean } }): AbortSignal {
  const abort = new AbortController()
  reply.raw.once('close', () => { if (!reply.raw.writableFinished) abort.abort() })
  return abort.signal
}
