/**
 * A workflow job laid out by the planner (placement auto) and run by a
 * controller the way an RLinf-style trainer drives its worker groups: what
 * test/agent/workers/live-workflow.test.ts checks and
 * test/bench/workflow-live.bench.ts measures.
 *
 * The workers are the tiny trainer's `sleep` operation: an inference engine
 * or a Megatron step cannot run here, so each operation lasts what RLinf's
 * cost model gives its component on its group's GPU count (the profile the
 * planner was given is then the truth about the workers), and what the
 * measured iteration adds to the prediction is the runtime's own cost:
 * dispatch, queueing, device switches between collocated groups.
 */
import { parseRlinfConfig } from '../../mesh/policies/workflow/rlinf-config.ts'
import { rlinfCostModel } from '../../mesh/policies/workflow/rlinf-cost-models.ts'
import type { AgentClient } from '../../agent/client/client.ts'
import type { OpAnswer } from '../../agent/api/wire/workers.ts'

/**
 * A reasoning config (rollout → actor, 4 group batches per iteration) on
 * 1 node × `gpus`: with max_running_requests 8 all of a batch's requests fit
 * one rollout instance, so 3 GPUs plan disaggregated (rollout 1, actor 2);
 * with 1 they do not, and the plan is collocated.
 */
export function reasoningConfig (gpus: number, maxRunningRequests: number, costs = { rollout: 1.2, actor: 0.4 }): Record<string, unknown> {
  return {
    cluster: { num_nodes: 1, num_gpus_per_node: gpus },
    runner: { task_type: 'reasoning' },
    algorithm: { group_size: 2, n_minibatches: 1, recompute_logprobs: false },
    data: { rollout_batch_size: 4 },
    rollout: { tensor_parallel_size: 1, max_running_requests: maxRunningRequests },
    actor: { model: { tensor_model_parallel_size: 1 } },
    profile_data: { rollout_cost: costs.rollout, actor_cost: costs.actor },
  }
}

export interface LayoutGroup { component: string, gpus: [number, number] }
export interface Layout { mode: string, iterationS: number, groups: LayoutGroup[] }

/** Milliseconds of one group batch of `component` on `gpus` GPUs, by the config's cost model. */
export function groupBatchMs (config: Record<string, unknown>, component: string, gpus: number): number {
  const c = rlinfCostModel(parseRlinfConfig(config)).components.find(x => x.role === component)
  if (c === undefined) throw new Error(`no component ${component}`)
  return c.groupBatchS[gpus]! * 1000
}

/**
 * Runs `iterations` iterations of rollout → actor over 4 group batches.
 * Disaggregated: each batch goes to the actor as soon as its rollout ended
 * (the groups' queues run side by side). Collocated: the whole rollout, then
 * the whole actor (interleaving would switch the GPUs at every batch).
 */
export async function runWorkflow (client: AgentClient, job: string, layout: Layout, config: Record<string, unknown>, iterations: number, tag = 'w'): Promise<OpAnswer[]> {
  const batches = 4
  const ms = Object.fromEntries(layout.groups.map(g => [g.component, groupBatchMs(config, g.component, g.gpus[1] - g.gpus[0])]))
  const answers: OpAnswer[] = []
  const op = async (component: string, iteration: number, b: number): Promise<void> => {
    answers.push(await client.runOp(job, { name: 'sleep', args: { ms: ms[component] }, component, iteration, opId: `${tag}-${component}-${iteration}-${b}` }))
  }
  for (let i = 0; i < iterations; i++) {
    const each = Array.from({ length: batches }, (_, b) => b)
    if (layout.mode === 'disaggregated') {
      await Promise.all(each.map(async b => { await op('rollout', i, b); await op('actor', i, b) }))
    } else {
      for (const b of each) await op('rollout', i, b)
      for (const b of each) await op('actor', i, b)
    }
  }
  return answers
}
