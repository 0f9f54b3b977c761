/**
 * The rollout instances registered with this agent: OpenAI-compatible
 * streaming completion servers (vLLM, SGLang, or the tests' engine double)
 * running on this node.
 *
 * Contract:
 * - register() probes `GET <url>/v1/models` first: an engine that does not
 *   answer, or does not serve `model`, is refused with ERR_BAD_REQUEST saying
 *   so, and nothing is stored. Registering an id again replaces the entry
 *   (a new weight version; a restarted engine on a new port).
 * - Every probeIntervalMs each instance is probed again; downAfterFailures
 *   failures in a row take it `down` (not advertised, so no new step sends
 *   it anything; running steps see its streams break), one success brings it
 *   back `up`.
 * - terminate() is the node's termination notice: the instances named (all
 *   by default) become `terminating`, advertised with the flag, so every step
 *   moves their requests now; they stay so until deregistered.
 * - At most maxInstances per node (what its availability record carries).
 * - The URL is what every agent that runs a step connects to: an engine
 *   listening on loopback serves only steps run through this node's agent.
 * - Registrations survive an agent restart (a durable file in the state
 *   directory, written before the call answers); after a restart each is
 *   `down` until its first probe answers. A file that does not parse is set
 *   aside (`.corrupt`) with an error logged, and the registry starts empty.
 * - `changed()` is called whenever the advertised list changes.
 */
import { readFile, rename } from 'node:fs/promises'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { Type } from '@sinclair/typebox'
import { AgentError } from '../../core/errors.ts'
import { writeFileDurably } from '../../core/durable-file.ts'
import type { RolloutInstanceAdvert } from '../../mesh/membership/mesh-messages.ts'
import { RegisterInstanceBodySchema, type LocalInstance, type RegisterInstanceBody, type TerminateBody } from '../api/wire/rollout.ts'

export interface InstanceRegistryOptions {
  stateDir: string
  probeIntervalMs: number
  probeTimeoutMs: number
  downAfterFailures: number
}

export const defaultInstanceProbe = { probeIntervalMs: 2000, probeTimeoutMs: 2000, downAfterFailures: 2 }

export interface InstanceRegistry {
  start(options: { signal: AbortSignal }): Promise<void>
  stop(): void
  register(body: RegisterInstanceBody): Promise<LocalInstance>
  /** ERR_NOT_FOUND for an id that is not registered. */
  deregister(id: string): Promise<LocalInstance>
  terminate(body: TerminateBody): Promise<LocalInstance[]>
  list(): LocalInstance[]
  /** What the availability record carries: the instances up or terminating. */
  advert(): RolloutInstanceAdvert[]
}

interface Entry extends LocalInstance { failures: number }

const fileName = 'rollout-instances.json'
/** The most instances one node registers (the record section's bound). */
export const maxInstances = 64
const StoredSchema = TypeCompiler.Compile(Type.Array(RegisterInstanceBodySchema))

/** The registered fields of an entry (what is stored and advertised). */
function registration (e: RegisterInstanceBody): RegisterInstanceBody {
  return {
    id: e.id, url: e.url, model: e.model,
    ...(e.weightVersion !== undefined ? { weightVersion: e.weightVersion } : {}),
    ...(e.gpus !== undefined ? { gpus: e.gpus } : {}),
    ...(e.reserved === true ? { reserved: true as const } : {}),
  }
}

/** What a `/v1/models` probe found: undefined when the engine serves `model`, else why not. */
export async function probeEngine (url: string, model: string, timeoutMs: number): Promise<string | undefined> {
  try {
    const res = await fetch(`${url}/v1/models`, { signal: AbortSignal.timeout(timeoutMs) })
    if (res.status !== 200) return `GET ${url}/v1/models answered ${res.status}`
    const body = await res.json() as { data?: Array<{ id?: unknown }> }
    const served = Array.isArray(body?.data) ? body.data.map(m => m?.id).filter(id => typeof id === 'string') : []
    return served.includes(model) ? undefined : `the engine at ${url} serves ${served.length === 0 ? 'no model' : served.map(m => JSON.stringify(m)).join(', ')}, not ${JSON.stringify(model)}`
  } catch (err) {
    return `GET ${url}/v1/models failed: ${(err as Error).name === 'TimeoutError' ? `no answer in ${timeoutMs} ms` : ((err as Error).cause as Error | undefined)?.message ?? (err as Error).message}`
  }
}

export function createInstanceRegistry (options: InstanceRegistryOptions, components: { logger: Logger, changed(): void }): InstanceRegistry {
  const log = components.logger
  const entries = new Map<string, Entry>()
  const file = join(options.stateDir, fileName)
  let timer: NodeJS.Timeout | undefined
  let probing = false

  const view = (e: Entry): LocalInstance => {
    const { failures: _failures, ...rest } = e
    return { ...rest }
  }
  /** Writes the registrations as they are when its turn comes; one write at a time (they share a temporary file). */
  let saving: Promise<void> = Promise.resolve()
  const save = (): Promise<void> => {
    const write = async (): Promise<void> => {
      const stored: RegisterInstanceBody[] = [...entries.values()].map(registration)
      await writeFileDurably(file, JSON.stringify(stored, null, 1), 0o600)
    }
    saving = saving.then(write, write)
    return saving
  }
  const setState = (e: Entry, state: Entry['state'], reason?: string): void => {
    if (e.state === state) return
    if (e.state === 'terminating') return // until deregistered
    log[state === 'down' ? 'warn' : 'info']({ instance: e.id, url: e.url, from: e.state, to: state, reason }, 'rollout instance state changed')
    e.state = state
    if (reason !== undefined) e.reason = reason
    else delete e.reason
    components.changed()
  }

  const probeAll = async (): Promise<void> => {
    if (probing) return
    probing = true
    try {
      await Promise.all([...entries.values()].map(async e => {
        const why = await probeEngine(e.url, e.model, options.probeTimeoutMs)
        if (entries.get(e.id) !== e) return // replaced or deregistered meanwhile
        e.lastProbeMs = Date.now()
        if (why === undefined) { e.failures = 0; setState(e, 'up'); return }
        if (++e.failures >= options.downAfterFailures) setState(e, 'down', why)
      }))
    } finally {
      probing = false
    }
  }

  return {
    async start ({ signal }) {
      const text = await readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => { if (err.code === 'ENOENT') return undefined; throw err })
      if (text !== undefined) {
        let stored: unknown
        try { stored = JSON.parse(text) } catch { stored = undefined }
        if (StoredSchema.Check(stored)) {
          for (const s of stored) entries.set(s.id, { ...s, state: 'down', reason: 'not probed since the agent started', registeredAtMs: Date.now(), lastProbeMs: 0, failures: 0 })
          log.info({ instances: stored.length }, 'rollout instances loaded; each is advertised once it answers its probe')
        } else {
          await rename(file, `${file}.corrupt`)
          log.error({ file, setAside: `${file}.corrupt` }, 'rollout instance registrations do not parse; set aside, starting with none (register the instances again)')
        }
      }
      const tick = (): void => {
        void probeAll().finally(() => {
          if (signal.aborted || timer === undefined) return
          timer = setTimeout(tick, options.probeIntervalMs)
          timer.unref()
        })
      }
      timer = setTimeout(tick, 0)
      timer.unref()
      signal.addEventListener('abort', () => this.stop(), { once: true })
    },
    stop () {
      clearTimeout(timer)
      timer = undefined
    },
    async register (body) {
      const why = await probeEngine(body.url, body.model, options.probeTimeoutMs)
      if (why !== undefined) throw new AgentError('ERR_BAD_REQUEST', `rollout instance ${body.id} not registered: ${why}`)
      const previous = entries.get(body.id)
      if (previous === undefined && entries.size >= maxInstances) throw new AgentError('ERR_BAD_REQUEST', `rollout instance ${body.id} not registered: this node has ${entries.size} already, the most one node advertises`)
      const entry: Entry = { ...body, state: 'up', registeredAtMs: Date.now(), lastProbeMs: Date.now(), failures: 0 }
      entries.set(body.id, entry)
      try {
        await save()
      } catch (err) {
        if (previous !== undefined) entries.set(body.id, previous)
        else entries.delete(body.id)
        throw err
      }
      log.info({ instance: body.id, url: body.url, model: body.model, replaced: previous !== undefined }, 'rollout instance registered')
      components.changed()
      return view(entry)
    },
    async deregister (id) {
      const entry = entries.get(id)
      if (entry === undefined) throw new AgentError('ERR_NOT_FOUND', `no rollout instance ${JSON.stringify(id)} is registered here`)
      entries.delete(id)
      try {
        await save()
      } catch (err) {
        entries.set(id, entry)
        throw err
      }
      log.info({ instance: id }, 'rollout instance deregistered')
      components.changed()
      return view(entry)
    },
    async terminate (body) {
      const ids = body.instances ?? [...entries.keys()]
      const unknown = ids.filter(id => !entries.has(id))
      if (unknown.length > 0) throw new AgentError('ERR_NOT_FOUND', `no rollout instance ${unknown.map(id => JSON.stringify(id)).join(', ')} is registered here; nothing was marked`)
      const marked = ids.map(id => entries.get(id)!)
      for (const e of marked) {
        if (e.state === 'terminating') continue
        log.warn({ instance: e.id, reason: body.reason ?? 'termination notice' }, 'rollout instance terminating: its requests move elsewhere')
        e.state = 'terminating'
        e.reason = body.reason ?? 'termination notice'
      }
      components.changed()
      return marked.map(view)
    },
    list: () => [...entries.values()].map(view),
    advert: () => [...entries.values()].filter(e => e.state !== 'down').map(e => ({ ...registration(e), ...(e.state === 'terminating' ? { terminating: true as const } : {}) })),
  }
}
