/**
 * Workflows shaped after RLinf's evaluation (§2.2, §5.2–5.3), used by the
 * planner tests and the planner benchmark:
 * - mathRolloutDominates: GRPO reasoning where rollout dominates, scales
 *   with GPUs and everything co-resides in memory → collocated.
 * - mathLongTail: long-context GRPO (7B, 64 GPUs) whose whole-batch
 *   generation is tail-bound (40 of 64 GPUs make it only ~12 % slower; RLinf
 *   Fig. 12: 14 %) and whose streamed chunks of 64 barely speed up with more
 *   GPUs (the tail again) → disaggregated, pipelined at a smaller granularity.
 * - embodiedManiSkill: env simulator ↔ generation cycle whose memory grows
 *   with the number of environments, plus training at a third of
 *   generation's time (Fig. 3) → hybrid: the cycle split spatially, training
 *   collocated with it by context switching.
 */
import type { Workflow } from '../../../../mesh/policies/workflow/workflow-input.ts'

export const mathRolloutDominates: Workflow = {
  gpus: 64,
  gpuMemoryGiB: 80,
  batchSize: 512,
  gpuStep: 8,
  components: [
    { name: 'rollout', memoryGiB: 640, offloadS: 3, onloadS: 3, profile: [{ gpus: 64, granularity: 512, seconds: 200 }, { gpus: 64, granularity: 64, seconds: 26 }] },
    { name: 'inference', memoryGiB: 320, offloadS: 1, onloadS: 1, profile: [{ gpus: 64, granularity: 512, seconds: 20 }, { gpus: 64, granularity: 64, seconds: 2.6 }] },
    { name: 'actor', memoryGiB: 1280, minGpus: 8, offloadS: 6, onloadS: 6, profile: [{ gpus: 64, granularity: 512, seconds: 40 }, { gpus: 64, granularity: 64, seconds: 5.2 }] },
  ],
  edges: [{ from: 'rollout', to: 'inference' }, { from: 'inference', to: 'actor' }],
}

export const mathLongTail: Workflow = {
  gpus: 64,
  gpuMemoryGiB: 80,
  batchSize: 512,
  gpuStep: 8,
  components: [
    {
      name: 'rollout',
      memoryGiB: 2560,
      offloadS: 5,
      onloadS: 5,
      profile: [
        { gpus: 16, granularity: 512, seconds: 700 }, { gpus: 32, granularity: 512, seconds: 400 }, { gpus: 40, granularity: 512, seconds: 370 }, { gpus: 64, granularity: 512, seconds: 330 },
        { gpus: 16, granularity: 64, seconds: 87.5 }, { gpus: 32, granularity: 64, seconds: 48 }, { gpus: 40, granularity: 64, seconds: 43 }, { gpus: 64, granularity: 64, seconds: 42 },
      ],
    },
    { name: 'inference', memoryGiB: 320, offloadS: 1, onloadS: 1, profile: [{ gpus: 64, granularity: 512, seconds: 30 }, { gpus: 24, granularity: 64, seconds: 10 }] },
    { name: 'actor', memoryGiB: 1280, minGpus: 8, offloadS: 10, onloadS: 10, profile: [{ gpus: 64, granularity: 512, seconds: 90 }, { gpus: 24, granularity: 64, seconds: 30 }] },
  ],
  edges: [{ from: 'rollout', to: 'inference' }, { from: 'inference', to: 'actor' }],
}

export const embodiedManiSkill: Workflow = {
  gpus: 64,
  gpuMemoryGiB: 80,
  batchSize: 256,
  gpuStep: 8,
  components: [
    { name: 'env', memoryGiB: 2000, offloadS: 4, onloadS: 4, profile: [{ gpus: 64, granularity: 256, seconds: 100 }] },
    { name: 'generation', memoryGiB: 1500, offloadS: 4, onloadS: 4, profile: [{ gpus: 64, granularity: 256, seconds: 100 }] },
    { name: 'actor', memoryGiB: 2500, minGpus: 8, offloadS: 8, onloadS: 8, profile: [{ gpus: 64, granularity: 256, seconds: 66 }] },
  ],
  edges: [{ from: 'env', to: 'generation' }, { from: 'generation', to: 'env' }, { from: 'generation', to: 'actor' }],
}
