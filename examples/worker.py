#!/usr/bin/env python3
"""A live-job worker: one rank of a job whose operations the agent runs (agent/workers/PROTOCOL.md).

    python3 examples/worker.py --socket .agentd-dev/agentd.sock --job demo --rank 0

It trains a small linear regression with a fixed seed. Its state (the model's parameters and the
optimizer's moments) is registered with the agent, which moves it out of and back into this
process's memory whenever another job needs the node; the operations never notice. Operations:

    train_step {"step": k} -> {"step": k, "loss": float}   (k must be the next step)
    evaluate                -> {"loss": float}               (on a fixed held-out batch)

Run them from any shell on any node of the cluster:

    npx agentctl --socket .agentd-dev/agentd.sock jobs op demo train_step --args '{"step": 0}'

Needs PyTorch (CPU is enough). The job must be placed on this node first (`agentctl jobs submit
examples/live-job.json`); a job with "gpusPerNode": 0 has one rank per node, `--gpu` omitted.
"""
import argparse
import sys
from pathlib import Path
from typing import Any, Dict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent" / "client" / "python"))

import torch  # noqa: E402

from agentd_client import AgentClient  # noqa: E402
from agentd_client.worker import Worker, init_optimizer_state  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="the agent's unix socket on this node")
    parser.add_argument("--job", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--gpu", type=int, default=None, help="the agent's index of this rank's GPU (omit for a CPU-only job)")
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()

    torch.manual_seed(opts.seed * 1000 + opts.rank)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    init_optimizer_state(optimizer)  # the moments exist from the start, so they are registered too
    true_weights = torch.randn(16, 1, generator=torch.Generator().manual_seed(opts.seed))
    step = torch.zeros(1, dtype=torch.int64)

    def batch(seed: int) -> Any:
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(64, 16, generator=gen)
        return x, x @ true_weights

    worker = Worker(opts.job, opts.rank, opts.gpu, AgentClient(opts.socket))
    worker.register_module(model, optimizer)
    worker.register_tensors({"step": step}, role="buffer")

    @worker.op("train_step")
    def train_step(args: Dict[str, Any]) -> Dict[str, Any]:
        k = args.get("step") if isinstance(args, dict) else None
        if k != int(step.item()):
            raise ValueError(f"expected step {int(step.item())}, got {k!r}")
        x, y = batch(opts.seed * 1_000_003 + opts.rank * 7919 + k)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)  # gradients are not state: hold no memory between steps
        step.add_(1)  # in place: the registered tensor is the one the agent moves
        return {"step": k, "loss": loss.item()}

    @worker.op("evaluate")
    def evaluate(args: Any) -> Dict[str, Any]:
        x, y = batch(10_000 + opts.rank)
        with torch.no_grad():
            return {"loss": torch.nn.functional.mse_loss(model(x), y).item()}

    reason = worker.serve(on_registered=lambda answer: print(
        f"rank {opts.rank} of job {opts.job} registered with node {answer['node']}"
        f"{' (loaded from stored version ' + str(answer['stored']['version']) + ')' if answer['stored'] else ''}", flush=True))
    print(f"stopped: {reason}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
