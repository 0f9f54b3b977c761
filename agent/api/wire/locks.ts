/**
 * Wire schemas of /v1/locks: the device lock's schemas declared once in
 * agent/state/device-lock-schema.ts, plus the event stream's element type.
 */
import type { DeviceLockEvent, GpuLockState } from '../../state/device-lock-schema.ts'

export {
  AcquireGpuBodySchema, AcquireGpuResultSchema, DeviceLockEventSchema, GpuLockStateSchema, GpuLockWaiterSchema, HolderNameSchema,
  LocksBodySchema, ReleaseGpuBodySchema, ReleaseGpuResultSchema, ReleaseReasonSchema, holderNamePattern, maxLockTimeoutMs,
  type AcquireGpuResult, type DeviceLockEvent, type GpuLockState, type GpuLockWaiter, type LocksBody, type ReleaseGpuResult, type ReleaseReason,
} from '../../state/device-lock-schema.ts'

/** What GET /v1/locks/gpu/:n/events delivers: first the GPU's `state`, then the holder's events. */
export type GpuLockStreamEvent = ({ type: 'state' } & GpuLockState) | DeviceLockEvent
