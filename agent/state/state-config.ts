/** Config section `state` of the StateManager (units in the names; see agent/config/schema.ts). */
import { Type, type Static } from '@sinclair/typebox'

export const StateSection = Type.Object({
  enabled: Type.Boolean({ description: 'Run the StateManager. Default: true.' }),
  hostPoolBytes: Type.Integer({ minimum: 1 << 20, description: 'Bytes of the pinned host pool, reserved at start. Default: 4 GiB (dev: 64 MiB).' }),
  lockHostPool: Type.Boolean({ description: 'mlock the host pool (needs LimitMEMLOCK=infinity under systemd). Default: true (dev: false).' }),
  nvmeDir: Type.String({ minLength: 1, description: 'Directory of the NVMe tier (object files + journal). Default: /var/lib/agentd/nvme (dev: DIR/nvme).' }),
  nvmeCapacityBytes: Type.Integer({ minimum: 1 << 20, description: 'Bytes the NVMe tier may hold. Default: 256 GiB (dev: 4 GiB).' }),
  directIo: Type.Boolean({ description: 'Use O_DIRECT on the NVMe tier where the filesystem supports it. Default: true.' }),
  spillHighWatermark: Type.Number({ minimum: 0.05, maximum: 1, description: 'Pool fraction above which keys spill to NVMe in the background. Default: 0.9.' }),
  spillLowWatermark: Type.Number({ minimum: 0, maximum: 1, description: 'Pool fraction background spilling brings usage down to. Default: 0.75.' }),
  namespaceQuotaBytes: Type.Record(Type.String(), Type.Integer({ minimum: 0 }), { description: 'Byte quota per namespace, e.g. { "job42/actor" = 68719476736 }. Default: none.' }),
  prefetchHorizonMs: Type.Integer({ minimum: 0, description: 'Keys the scheduler hints are needed within this many ms are prefetched to host. Default: 5000.' }),
}, { additionalProperties: false })

export type StateConfig = Static<typeof StateSection>

export function defaultStateConfig (stateDir: string): StateConfig {
  return {
    enabled: true,
    hostPoolBytes: 4 * 2 ** 30,
    lockHostPool: true,
    nvmeDir: `${stateDir}/nvme`,
    nvmeCapacityBytes: 256 * 2 ** 30,
    directIo: true,
    spillHighWatermark: 0.9,
    spillLowWatermark: 0.75,
    namespaceQuotaBytes: {},
    prefetchHorizonMs: 5000,
  }
}

export function devStateConfig (stateDir: string): StateConfig {
  return { ...defaultStateConfig(stateDir), hostPoolBytes: 64 * 2 ** 20, lockHostPool: false, nvmeCapacityBytes: 4 * 2 ** 30 }
}
