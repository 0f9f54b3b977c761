/**
 * The journal of rollout steps submitted with a step id: where each request
 * stands, written while the step runs, so that the same step submitted again
 * after this agent died (or after the caller's connection broke) goes on from
 * the collected tokens instead of generating everything again; and the
 * answer once it is complete, so a caller that lost it gets it again.
 *
 * Contract:
 * - One file per step id under `<stateDir>/rollout-steps/` (mode 0600),
 *   replaced atomically and durably (writeFileDurably): a crash leaves the
 *   previous or the new version, never a torn one.
 * - `digest` identifies the step's requests (model, weight version,
 *   requests, in canonical JSON): the same id with other requests is
 *   refused by the caller, never resumed.
 * - A file that does not parse is set aside (`.corrupt`) and read as
 *   absent: the step then starts over, losing only time.
 * - prune() removes answered steps older than keepAnsweredMs and unanswered
 *   ones not written for abandonAfterMs.
 */
import { createHash } from 'node:crypto'
import { mkdir, readdir, readFile, rename, stat, unlink } from 'node:fs/promises'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { Type } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { writeFileDurably } from '../../core/durable-file.ts'
import type { RequestProgress } from '../../mesh/control/rollout/rollout-step.ts'
import type { RolloutStepAnswer } from '../api/wire/rollout.ts'

export interface JournalEntry {
  stepId: string
  digest: string
  progress: Record<string, RequestProgress>
  answer?: RolloutStepAnswer
}

const EntrySchema = TypeCompiler.Compile(Type.Object({
  stepId: Type.String(),
  digest: Type.String(),
  progress: Type.Record(Type.String(), Type.Object({
    text: Type.String(), tokens: Type.Integer({ minimum: 0 }), finish: Type.Optional(Type.String()), route: Type.Optional(Type.Array(Type.String())),
  })),
  answer: Type.Optional(Type.Unknown()),
}))

export interface StepJournal {
  read(stepId: string): Promise<JournalEntry | undefined>
  write(entry: JournalEntry): Promise<void>
  prune(): Promise<void>
}

export interface StepJournalOptions { stateDir: string, keepAnsweredMs: number, abandonAfterMs: number }

/** JSON with object keys sorted, so equal values give equal text whatever the order a client sent. */
export function canonicalJson (value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  if (value !== null && typeof value === 'object') {
    return `{${Object.keys(value).sort().filter(k => (value as Record<string, unknown>)[k] !== undefined).map(k => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`).join(',')}}`
  }
  return JSON.stringify(value)
}

export function stepDigest (step: { model?: string, weightVersion?: number, requests: unknown[] }): string {
  return createHash('sha256').update(canonicalJson({ model: step.model, weightVersion: step.weightVersion, requests: step.requests })).digest('hex')
}

export function createStepJournal (options: StepJournalOptions, components: { logger: Logger }): StepJournal {
  const dir = join(options.stateDir, 'rollout-steps')
  const file = (stepId: string): string => join(dir, `${stepId}.json`)
  let made: Promise<unknown> | undefined
  return {
    async read (stepId) {
      const text = await readFile(file(stepId), 'utf8').catch((err: NodeJS.ErrnoException) => { if (err.code === 'ENOENT') return undefined; throw err })
      if (text === undefined) return undefined
      let parsed: unknown
      try { parsed = JSON.parse(text) } catch { parsed = undefined }
      if (EntrySchema.Check(parsed) && parsed.stepId === stepId) return parsed as JournalEntry
      await rename(file(stepId), `${file(stepId)}.corrupt`).catch(() => {})
      components.logger.error({ stepId, setAside: `${file(stepId)}.corrupt` }, 'rollout step journal does not parse; set aside, the step starts over')
      return undefined
    },
    async write (entry) {
      await (made ??= mkdir(dir, { recursive: true, mode: 0o700 }))
      await writeFileDurably(file(entry.stepId), JSON.stringify(entry), 0o600)
    },
    async prune () {
      const names = await readdir(dir).catch(() => [] as string[])
      const now = Date.now()
      for (const name of names.filter(n => n.endsWith('.json'))) {
        const path = join(dir, name)
        const info = await stat(path).catch(() => undefined)
        if (info === undefined) continue
        const age = now - info.mtimeMs
        if (age < Math.min(options.keepAnsweredMs, options.abandonAfterMs)) continue
        const answered = await readFile(path, 'utf8').then(text => (JSON.parse(text) as { answer?: unknown }).answer !== undefined).catch(() => false)
        if (age >= (answered ? options.keepAnsweredMs : options.abandonAfterMs)) await unlink(path).catch(() => {})
      }
    },
  }
}
