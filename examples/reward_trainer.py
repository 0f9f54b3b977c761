#!/usr/bin/env python3
"""A trainer's side of the reward service, with nothing but the standard library and agentd's client.

For each batch (one RL step's rollouts): send the batch-start hint (the leader
starts the workers it plans for it), submit every request (idempotent by id:
submitting again after an error is safe), then collect every result and print
one line. The requests' payloads are what ``agent/reward/examples/reward-worker.py``
understands (time to spend per stage, the reward to post); a real trainer
sends its rollouts and the real workers compute their rewards.

    python3 examples/reward_trainer.py --socket .agentd-dev/agentd.sock --batches 3 --size 16

``--cancel-last``: the last batch is given up once its first result is in (a
trainer that moves on): its requests not done yet end as ``cancelled``.
"""
import argparse
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "agent", "client", "python"))
from agentd_client import AgentClient, AgentError  # noqa: E402


def run_batch(agent: AgentClient, task: str, batch: int, size: int, stage: str, stage_ms: int, cancel: bool) -> str:
    t0 = time.monotonic()
    agent.reward_batch_start(task, batch, size)
    ids = [f"{task}-{batch}-{i}" for i in range(size)]
    for i, request_id in enumerate(ids):
        payload = {"stageMs": {stage: stage_ms}, "reward": (i % 5) / 4}
        for attempt in range(5):  # an agent restart or a leader change answers ERR_*: the same id again is safe
            try:
                agent.reward_submit(task, batch, request_id, payload)
                break
            except AgentError as err:
                if attempt == 4 or err.code in ("ERR_BAD_REQUEST", "ERR_REWARD_CONFLICT"):
                    raise
                time.sleep(0.2 * (attempt + 1))
    results = {}
    cancelled = False
    while len(results) < size:
        for request_id in ids:
            if request_id in results:
                continue
            answer = agent.reward_result(request_id, wait_ms=1000 if not results else 0)
            if answer["state"] == "done":
                results[request_id] = answer["result"]
        if cancel and results and not cancelled:
            outcome = agent.reward_cancel(task, batch)
            print(f"batch {batch}: cancelled after {len(results)} results: {len(outcome['cancelled'])} requests cancelled,"
                  f" {len(outcome['finished'])} had finished", flush=True)
            cancelled = True
        if len(results) < size:
            time.sleep(0.05)
    statuses = Counter(r["status"] for r in results.values())
    rewards = [r["reward"] for r in results.values() if r["status"] == "ok"]
    mean = f"{sum(rewards) / len(rewards):.2f}" if rewards else "-"
    return (f"batch {batch}: {size} results ({', '.join(f'{s} {n}' for s, n in sorted(statuses.items()))}),"
            f" mean reward of the ok ones {mean}, in {time.monotonic() - t0:.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket", default=os.environ.get("AGENTD_SOCKET", "/run/agentd/agentd.sock"))
    parser.add_argument("--task", default="math")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--first-batch", type=int, default=0, help="index of the first batch (a batch index is used once per task)")
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--stage", default="verify", help="the stage the payloads give time to (reward.stages)")
    parser.add_argument("--stage-ms", type=int, default=50)
    parser.add_argument("--cancel-last", action="store_true")
    args = parser.parse_args()
    agent = AgentClient(args.socket)
    for k in range(args.batches):
        batch = args.first_batch + k
        last = k == args.batches - 1
        print(run_batch(agent, args.task, batch, args.size, args.stage, args.stage_ms, args.cancel_last and last), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
