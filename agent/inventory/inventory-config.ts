/** The `inventory` config section: hardware detection and GPU sampling (agent/inventory/). */
import { Type, type Static } from '@sinclair/typebox'

export const GpuOverride = Type.Object({
  model: Type.String({ minLength: 1 }),
  memoryBytes: Type.Integer({ minimum: 0 }),
  uuid: Type.String(),
  pciBus: Type.String(),
}, { additionalProperties: false })

export const InventorySection = Type.Object({
  gpus: Type.Optional(Type.Array(GpuOverride, {
    description: 'When set, replaces GPU detection: a list of { model, memoryBytes, uuid, pciBus }. Default: unset (detect).',
  })),
  gpuSampleIntervalMs: Type.Integer({
    minimum: 0,
    maximum: 3_600_000,
    description: 'How often each GPU\'s free memory, health and holder are sampled with nvidia-smi for the mesh record, in milliseconds; 0 turns sampling off (they are reported unknown). Default: 5000.',
  }),
  nvidiaSmiCommand: Type.String({
    minLength: 1,
    description: 'The nvidia-smi executable GPUs are detected (at start) and sampled with (a bare name is looked up on PATH). Default: "nvidia-smi".',
  }),
}, { additionalProperties: false })

export type GpuOverrideConfig = Static<typeof GpuOverride>
export type InventoryConfig = Static<typeof InventorySection>

export const defaultInventoryConfig: InventoryConfig = { gpuSampleIntervalMs: 5000, nvidiaSmiCommand: 'nvidia-smi' }
