#!/usr/bin/env python3
"""A deterministic tiny trainer: a worker for the multi-agent tests and benchmarks, or the same run alone.

    tiny_trainer.py serve --socket PATH --job J --rank R [--gpu N] [--seed S] [--hidden H] [--device cpu|cuda]
    tiny_trainer.py alone --job J --rank R --steps N [--seed S] [--hidden H] [--device cpu|cuda]

``serve`` registers with the agent at ``--socket`` (``agentd_client.worker``),
prints one JSON line ``{"registered": <the agent's answer>}`` and serves the
operations below until the agent stops it (``{"stopped": <reason>}``) or
SIGTERM/SIGINT (a clean exit: it deregisters). ``alone`` runs ``train_step``
for steps ``0 .. N-1`` without any agent, printing each result as one JSON
line, then ``{"final": <state hash>}``. The same seed, rank, hidden size and
device give bit-identical results in both modes, however the agent moves the
state in between.

Model: ``torch.manual_seed(seed * 1000 + rank)``, an MLP 32 -> hidden -> hidden
-> 8 with ReLU, AdamW(lr=1e-3) with its state created up front, one CPU thread.
State: the parameters, the optimizer state and ``step`` (a 1-element int64
counter of completed steps, registered as buffer ``step``).

Operations (args -> result):
  train_step {"step": k} -> {"step": k, "loss": float.hex, "stateHash": sha256 hex}
      k must equal the counter (ValueError "expected step X" otherwise); batch k
      is 64 inputs and targets from torch.Generator().manual_seed(seed * 1_000_003 + rank * 7919 + k).
  status     -> {"step": counter}
  state_hash -> {"hash": sha256 over every state tensor's bytes, by state name}
  sleep {"ms": n} -> {} after sleeping n ms
  noop       -> {}
"""
import argparse
import hashlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "agent" / "client" / "python"))

import torch  # noqa: E402

from agentd_client.worker import init_optimizer_state  # noqa: E402

INPUTS, OUTPUTS, BATCH = 32, 8, 64


class TinyTrainer:
    """The model, its optimizer, the step counter and the operations on them."""

    def __init__(self, *, rank: int, seed: int = 0, hidden: int = 256, device: str = "cpu") -> None:
        torch.set_num_threads(1)
        self.rank, self.seed = rank, seed
        self.device = torch.device(device)
        torch.manual_seed(seed * 1000 + rank)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(INPUTS, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, OUTPUTS),
        ).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        init_optimizer_state(self.optimizer)
        self.step = torch.zeros(1, dtype=torch.int64)

    def ops(self) -> Dict[str, Callable[[Any], Any]]:
        return {"train_step": self.train_step, "status": self.status, "state_hash": self.hash_op,
                "sleep": self.sleep, "noop": self.noop}

    def state_tensors(self) -> Dict[str, torch.Tensor]:
        """Every state tensor under the name the worker registers it as."""
        names = {id(p): name for name, p in self.model.named_parameters()}
        state: Dict[str, torch.Tensor] = {f"param:{n}": p for n, p in self.model.named_parameters()}
        state.update({f"buffer:{n}": b for n, b in self.model.named_buffers()})
        for p, entries in self.optimizer.state.items():
            state.update({f"optim.{k}:{names[id(p)]}": v for k, v in entries.items() if isinstance(v, torch.Tensor)})
        state["buffer:step"] = self.step
        return state

    def state_hash(self) -> str:
        digest = hashlib.sha256()
        for _, t in sorted(self.state_tensors().items()):
            digest.update(t.detach().cpu().contiguous().numpy().tobytes())
        return digest.hexdigest()

    def train_step(self, args: Any) -> Dict[str, Any]:
        k = args.get("step") if isinstance(args, dict) else None
        expected = int(self.step.item())
        if isinstance(k, bool) or not isinstance(k, int) or k != expected:
            raise ValueError(f"expected step {expected}, got {k!r}")
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.rank * 7919 + k)
        inputs = torch.randn(BATCH, INPUTS, generator=gen).to(self.device)
        targets = torch.randn(BATCH, OUTPUTS, generator=gen).to(self.device)
        loss = torch.nn.functional.mse_loss(self.model(inputs), targets)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)  # gradients are not state: hold no memory between steps
        with torch.no_grad():
            self.step += 1
        return {"step": k, "loss": loss.item().hex(), "stateHash": self.state_hash()}

    def status(self, args: Any) -> Dict[str, Any]:
        return {"step": int(self.step.item())}

    def hash_op(self, args: Any) -> Dict[str, Any]:
        return {"hash": self.state_hash()}

    def sleep(self, args: Any) -> Dict[str, Any]:
        time.sleep(float(args.get("ms", 0)) / 1000 if isinstance(args, dict) else 0)
        return {}

    def noop(self, args: Any) -> Dict[str, Any]:
        return {}


def serve(opts: argparse.Namespace, trainer: TinyTrainer) -> int:
    from agentd_client import AgentClient
    from agentd_client.worker import Worker

    worker = Worker(opts.job, opts.rank, opts.gpu, AgentClient(opts.socket))
    worker.register_module(trainer.model, trainer.optimizer)
    worker.register_tensors({"step": trainer.step}, role="buffer")
    for name, handler in trainer.ops().items():
        worker.op(name)(handler)

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        reason = worker.serve(on_registered=lambda answer: print(json.dumps({"registered": answer}), flush=True))
    except KeyboardInterrupt:
        print(json.dumps({"stopped": "interrupted"}), flush=True)
        return 0
    print(json.dumps({"stopped": reason}), flush=True)
    return 0


def alone(opts: argparse.Namespace, trainer: TinyTrainer) -> int:
    for k in range(opts.steps):
        print(json.dumps(trainer.train_step({"step": k})), flush=True)
    print(json.dumps({"final": trainer.state_hash()}), flush=True)
    return 0


def device_for(opts: argparse.Namespace) -> str:
    """``cuda`` is this process's first visible GPU when CUDA_VISIBLE_DEVICES narrows it, else ``cuda:<gpu>``."""
    if opts.device != "cuda":
        return opts.device
    import os
    if os.environ.get("CUDA_VISIBLE_DEVICES", "").strip():
        return "cuda:0"
    return f"cuda:{opts.gpu if opts.gpu is not None else 0}"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    for mode in ("serve", "alone"):
        sub = modes.add_parser(mode)
        sub.add_argument("--job", required=True)
        sub.add_argument("--rank", type=int, required=True)
        sub.add_argument("--seed", type=int, default=0)
        sub.add_argument("--hidden", type=int, default=256)
        sub.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
        sub.add_argument("--gpu", type=int, default=None, help="the agent's index of this rank's GPU")
        if mode == "serve":
            sub.add_argument("--socket", required=True)
        else:
            sub.add_argument("--steps", type=int, required=True)
    opts = parser.parse_args(argv)
    trainer = TinyTrainer(rank=opts.rank, seed=opts.seed, hidden=opts.hidden, device=device_for(opts))
    return serve(opts, trainer) if opts.mode == "serve" else alone(opts, trainer)


if __name__ == "__main__":
    sys.exit(main())
