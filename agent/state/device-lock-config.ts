/** The `locks` config section: settings of the device lock (agent/state/device-lock.ts). */
import { Type, type Static } from '@sinclair/typebox'

export const LocksSection = Type.Object({
  holderCheckIntervalMs: Type.Integer({
    minimum: 10,
    maximum: 60_000,
    description: 'How often the processes holding or waiting for a GPU lock are checked (pid and start time in /proc), in milliseconds; the lock of a holder that exited passes to the next waiter within about this time. Default: 250.',
  }),
}, { additionalProperties: false })

export type LocksConfig = Static<typeof LocksSection>

export const defaultLocksConfig: LocksConfig = { holderCheckIntervalMs: 250 }
