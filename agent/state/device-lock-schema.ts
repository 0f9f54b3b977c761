/**
 * The device lock's wire shapes, declared once: the TypeScript types of the
 * service (device-lock.ts), the validation and OpenAPI entries of its routes
 * (agent/api/routes/locks.ts) and the client's return types all come from here.
 */
import { Type, type Static } from '@sinclair/typebox'

/**
 * An explicit holder name: 1–128 characters from [A-Za-z0-9._:/@-], starting
 * with a letter or digit, not starting with "pid:" (reserved for the default
 * per-process holder names `pid:<pid>`).
 */
export const holderNamePattern = '^(?!pid:)[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$'

/** Longest acquire timeout, ms (the largest delay a timer accepts, about 24.8 days). */
export const maxLockTimeoutMs = 2_147_483_647

export const HolderNameSchema = Type.String({
  pattern: holderNamePattern,
  description: 'Explicit holder name shared by several processes (e.g. the ranks of one worker group); 1-128 characters [A-Za-z0-9._:/@-], not starting with "pid:". Default: "pid:<calling pid>".',
})

export const AcquireGpuBodySchema = Type.Object({
  holder: Type.Optional(HolderNameSchema),
  timeoutMs: Type.Optional(Type.Integer({
    minimum: 0,
    maximum: maxLockTimeoutMs,
    description: 'Give up after this many ms with ERR_LOCK_TIMEOUT (423); 0 = only if the GPU can be granted at once. Default: wait until granted.',
  })),
}, { additionalProperties: false })

export const ReleaseGpuBodySchema = Type.Object({
  holder: Type.Optional(HolderNameSchema),
}, { additionalProperties: false })

export const AcquireGpuResultSchema = Type.Object({
  gpu: Type.Integer(),
  holder: Type.String(),
  depth: Type.Integer({ description: 're-entrancy depth after this acquire (1 on a fresh grant)' }),
  waiting: Type.Integer({ description: 'requests of other holders still queued for this GPU' }),
})

export const ReleaseGpuResultSchema = Type.Object({
  gpu: Type.Integer(),
  holder: Type.String(),
  depth: Type.Integer({ description: 'depth left; 0 = released (the next waiter, if any, has been granted)' }),
})

export const GpuLockWaiterSchema = Type.Object({
  holder: Type.String(),
  pid: Type.Integer({ description: 'the process that sent the queued request' }),
  sinceMs: Type.Integer({ description: 'when the request was queued, ms since the epoch' }),
})

export const GpuLockStateSchema = Type.Object({
  gpu: Type.Integer(),
  holder: Type.Union([Type.String(), Type.Null()], { description: 'null when free' }),
  pids: Type.Array(Type.Integer(), { description: 'running processes tied to the holder' }),
  depth: Type.Integer(),
  heldSinceMs: Type.Union([Type.Integer(), Type.Null()], { description: 'when the current hold was granted, ms since the epoch' }),
  waiters: Type.Array(GpuLockWaiterSchema, { description: 'in grant order' }),
})

export const LocksBodySchema = Type.Object({
  gpus: Type.Array(GpuLockStateSchema, { description: 'every GPU of the node, by index' }),
})

export const ReleaseReasonSchema = Type.Union([Type.Literal('released'), Type.Literal('holder-exited'), Type.Literal('stopped')])

export const DeviceLockEventSchema = Type.Union([
  Type.Object({ type: Type.Literal('granted'), gpu: Type.Integer(), holder: Type.String(), depth: Type.Integer(), waiting: Type.Integer() }),
  Type.Object({
    type: Type.Literal('waiter'),
    gpu: Type.Integer(),
    holder: Type.String({ description: 'the current holder, who should offload and release' }),
    waiter: Type.String({ description: 'the holder of the request that queued (or heads the queue)' }),
    waiting: Type.Integer({ description: 'requests of others queued in all' }),
  }),
  Type.Object({ type: Type.Literal('released'), gpu: Type.Integer(), holder: Type.String(), reason: ReleaseReasonSchema }),
])

export type AcquireGpuResult = Static<typeof AcquireGpuResultSchema>
export type ReleaseGpuResult = Static<typeof ReleaseGpuResultSchema>
export type GpuLockWaiter = Static<typeof GpuLockWaiterSchema>
export type GpuLockState = Static<typeof GpuLockStateSchema>
export type LocksBody = Static<typeof LocksBodySchema>
export type ReleaseReason = Static<typeof ReleaseReasonSchema>
export type DeviceLockEvent = Static<typeof DeviceLockEventSchema>
