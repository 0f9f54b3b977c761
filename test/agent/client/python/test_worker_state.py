"""The worker library (agentd_client.worker) and the tiny trainer, without a real agent.

State moves go to an in-process agent double (AgentCopies) or to a fake agent that
speaks just enough of the worker protocol over a unix socket (FakeAgent), so
these tests check the Python side of agent/workers/PROTOCOL.md on their own:
state in shared memory, release and reallocation, bit-identical training
across switches and rollbacks, the replies, and a clean SIGTERM exit.
Skipped, with the reason printed, where torch is not importable.
"""
import json
import logging
import os
import queue
import signal
import socketserver
import subprocess
import sys
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

REPO_ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO_ROOT / "agent" / "client" / "python"))
TRAINER = REPO_ROOT / "test" / "helpers" / "workers" / "tiny_trainer.py"
sys.path.insert(0, str(TRAINER.parent))

from agentd_client import AgentClient, AgentError, parse_key  # noqa: E402

try:
    import torch

    from agentd_client.worker import Worker, init_optimizer_state
    from tiny_trainer import TinyTrainer
    TORCH_MISSING = ""
except ImportError as err:
    TORCH_MISSING = f"torch is not importable ({err}); the worker library is untested here"

HIDDEN = 48  # small and quick; the trainer's default is 256


def setUpModule() -> None:
    if TORCH_MISSING:
        raise unittest.SkipTest(TORCH_MISSING)
    # The worker logs every failed operation with its traceback; these tests fail operations on purpose.
    logging.getLogger("agentd_client.worker").setLevel(logging.CRITICAL)


class AgentCopies:
    """Plays the agent's part of a context switch for a worker served by no agent.

    The agent copies state out of the memory the worker named (registration,
    ``allocate`` replies) and into it; this double does the same: shared
    memory through ``/dev/shm``, CUDA memory through the registered tensor
    itself (a process cannot open its own CUDA IPC handle).
    """

    def __init__(self, worker: "Worker") -> None:
        self.worker = worker
        self.store: Dict[str, bytes] = {}
        self.memory: Dict[str, Dict[str, Any]] = {}

    def registered(self) -> None:
        """The worker registers: the agent learns where its state lives."""
        self.memory = {t["name"]: t["memory"] for t in self.worker._share_memory()}

    def offload(self, version: int, release: bool = True) -> None:
        for e in self.worker.state.entries:
            self.store[e.key.with_version(version).text] = self._read(e)
        if release:
            ok(self.worker.handle_event("release", {"requestId": f"release-{version}"}))

    def onload(self, version: int) -> Dict[str, Any]:
        """Allocate, then copy the stored version in; the allocate reply."""
        reply = ok(self.worker.handle_event("allocate", {"requestId": f"allocate-{version}"}))
        self.memory = {t["name"]: t["memory"] for t in reply["result"]["tensors"]}
        for e in self.worker.state.entries:
            self._write(e, self.store[e.key.with_version(version).text])
        return reply

    def _read(self, e: Any) -> bytes:
        spec = self.memory[e.name]
        if spec["kind"] == "shm":
            return _shm_read(spec, e.key.nbytes)
        return e.tensor.detach().reshape(-1).view(torch.uint8).cpu().numpy().tobytes()

    def _write(self, e: Any, data: bytes) -> None:
        spec = self.memory[e.name]
        if spec["kind"] == "shm":
            _shm_write(spec, data)
            return
        with torch.no_grad():
            e.tensor.reshape(-1).view(torch.uint8).copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))


def worker_for(trainer: "TinyTrainer", job: str = "job-a", rank: int = 0) -> Tuple["Worker", AgentCopies]:
    """A worker of ``trainer`` with its state shared and its memory known to the returned agent double."""
    worker = Worker(job, rank, None, AgentClient("/nonexistent/agentd.sock"))
    worker.register_module(trainer.model, trainer.optimizer)
    worker.register_tensors({"step": trainer.step}, role="buffer")
    for name, handler in trainer.ops().items():
        worker.op(name)(handler)
    worker.state.share()
    agent = AgentCopies(worker)
    agent.registered()
    return worker, agent


def ok(reply: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    assert reply is not None and reply.get("ok") is True, reply
    return reply


class WorkerStateTest(unittest.TestCase):
    def setUp(self) -> None:
        self.trainer = TinyTrainer(rank=0, seed=7, hidden=HIDDEN)
        self.worker, self.agent = worker_for(self.trainer)
        self.addCleanup(self.worker.state.release)

    def test_registration_names_keys_and_shared_memory(self) -> None:
        state = self.worker.state
        names = [e.name for e in state.entries]
        self.assertEqual(names, list(dict.fromkeys(names)))
        self.assertEqual(set(names), set(self.trainer.state_tensors()))
        self.assertIn("param:0.weight", names)
        self.assertIn("optim.exp_avg:0.weight", names)
        self.assertIn("optim.step:2.bias", names)
        self.assertIn("buffer:step", names)
        keys = {e.name: e.key for e in state.entries}
        self.assertEqual(keys["param:0.weight"].text, f"job-a/r0/0.weight:param@[0,0]/[{HIDDEN},32]:f32#v0")
        self.assertEqual(keys["optim.exp_avg_sq:0.bias"].text, f"job-a/r0/0.bias.exp_avg_sq:optim.exp_avg_sq@[0]/[{HIDDEN}]:f32#v0")
        self.assertEqual(keys["optim.step:0.bias"].text, "job-a/r0/0.bias.step:optim.step@[]/[]:f32#v0")
        self.assertEqual(keys["buffer:step"].text, "job-a/r0/step:buffer@[0]/[1]:i64#v0")
        arena = state.arena
        assert arena is not None
        for name, t in self.trainer.state_tensors().items():
            self.assertIsNotNone(arena.locate(t), f"{name} is not in the arena")
        # The objects the model and the optimizer use are the registered ones.
        self.assertIs(self.trainer.model[0].weight, next(e.tensor for e in state.entries if e.name == "param:0.weight"))

    def test_offload_release_onload_keeps_every_byte_and_trains_like_an_untouched_copy(self) -> None:
        twin = TinyTrainer(rank=0, seed=7, hidden=HIDDEN)
        for k in range(2):
            self.assertEqual(ok(self.worker.handle_event("run", {"requestId": f"r{k}", "opId": f"o{k}", "name": "train_step",
                                                                   "args": {"step": k}}))["result"], twin.train_step({"step": k}))
        before = {n: t.detach().clone() for n, t in self.trainer.state_tensors().items()}
        first_arena = self.worker.state.arena.name  # type: ignore[union-attr]
        self.agent.offload(3)
        self.assertTrue(self.worker.state.released)
        self.assertIsNone(self.worker.state.arena)
        self.assertFalse(os.path.exists(f"/dev/shm/{first_arena}"), "the released arena is unlinked")
        self.assertTrue(all(t.numel() == 0 for t in self.trainer.state_tensors().values()))
        self.assertEqual(len(self.agent.store), len(before))

        reply = self.agent.onload(3)
        self.assertFalse(self.worker.state.released)
        self.assertEqual([t["name"] for t in reply["result"]["tensors"]], [e.name for e in self.worker.state.entries],
                         "the allocate reply names every state tensor, in order")
        self.assertEqual({t["memory"]["name"] for t in reply["result"]["tensors"]}, {self.worker.state.arena.name},  # type: ignore[union-attr]
                         "all of it in the new arena")
        for name, t in self.trainer.state_tensors().items():
            self.assertTrue(torch.equal(t, before[name]), name)
            self.assertIsNotNone(self.worker.state.arena.locate(t), name)  # type: ignore[union-attr]
        for k in range(2, 7):  # 5 more steps: bit-identical losses and state
            result = ok(self.worker.handle_event("run", {"requestId": f"r{k}", "name": "train_step", "args": {"step": k}}))
            self.assertEqual(result["result"], twin.train_step({"step": k}))

    def test_release_and_onload_of_an_older_version_rolls_back(self) -> None:
        self.trainer.train_step({"step": 0})
        self.agent.offload(1, release=False)
        self.assertFalse(self.worker.state.released)
        first = self.trainer.train_step({"step": 1})
        ok(self.worker.handle_event("release", {"requestId": "2"}))
        self.assertTrue(all(t.numel() == 0 for t in self.trainer.state_tensors().values()))
        ok(self.worker.handle_event("release", {"requestId": "3"}))  # idempotent
        self.agent.onload(1)
        self.assertEqual(self.trainer.status(None), {"step": 1})
        self.assertEqual(self.trainer.train_step({"step": 1}), first)
        # Allocate while holding memory names the same memory: the agent copies into it in place.
        held = {t["name"]: t["memory"] for t in self.worker._share_memory()}
        self.assertEqual({t["name"]: t["memory"] for t in self.agent.onload(1)["result"]["tensors"]}, held)
        self.assertEqual(self.trainer.train_step({"step": 1}), first)

    def test_event_failures_are_replies(self) -> None:
        self.assertEqual(self.worker.handle_event("teleport", {"requestId": "z"})["error"]["code"], "ERR_BAD_REQUEST")  # type: ignore[index]
        for old in ("offload", "onload"):  # the agent copies; these events are gone from the protocol
            self.assertEqual(self.worker.handle_event(old, {"requestId": old, "version": 1})["error"]["code"], "ERR_BAD_REQUEST")  # type: ignore[index]
        self.assertIsNone(self.worker.handle_event("allocate", {}))
        ok(self.worker.handle_event("release", {"requestId": "r"}))
        run = self.worker.handle_event("run", {"requestId": "n", "name": "noop", "args": None})
        self.assertEqual(run["error"]["code"], "ERR_OPERATION_FAILED")  # type: ignore[index]
        self.assertIn("released", run["error"]["message"])  # type: ignore[index]

    def test_a_replaced_state_tensor_fails_the_operation_that_replaced_it(self) -> None:
        w = self.worker
        p = self.trainer.model[0].weight

        @w.op("replace")
        def replace(args: Any) -> Any:
            self.trainer.optimizer.state[p]["exp_avg"] = torch.zeros_like(p)
            return {}

        reply = w.handle_event("run", {"requestId": "1", "name": "replace"})
        self.assertEqual(reply["error"]["code"], "ERR_OPERATION_FAILED")  # type: ignore[index]
        self.assertIn("optim.exp_avg:0.weight", reply["error"]["message"])  # type: ignore[index]
        self.assertIn("ERR_STATE_MISMATCH", reply["error"]["message"])  # type: ignore[index]

    def test_run_replies(self) -> None:
        w = self.worker

        @w.op("boom")
        def boom(args: Any) -> Any:
            raise KeyError(args["missing"])

        @w.op("tensor")
        def tensor(args: Any) -> Any:
            return {"t": torch.zeros(1)}

        @w.op("nan")
        def nan(args: Any) -> Any:
            return {"x": float("nan")}

        @w.op("big")
        def big(args: Any) -> Any:
            return "x" * (64 * 1024)

        @w.op("long")
        def long(args: Any) -> Any:
            raise RuntimeError("y" * 10_000)

        @w.op("nothing")
        def nothing(args: Any) -> Any:
            return None

        reply = ok(w.handle_event("run", {"requestId": "a", "opId": "o", "name": "status", "args": {}}))
        self.assertEqual(set(reply), {"requestId", "ok", "result", "startedAtMs", "durationMs"})
        self.assertEqual(reply["result"], {"step": 0})
        self.assertGreaterEqual(reply["durationMs"], 0)
        self.assertAlmostEqual(reply["startedAtMs"] / 1000, __import__("time").time(), delta=60)
        self.assertEqual(ok(w.handle_event("run", {"requestId": "b", "name": "nothing"}))["result"], None)
        expect = {
            "boom": "KeyError: 'missing'",
            "tensor": "ValueError: the result of tensor is not JSON: Object of type Tensor is not JSON serializable",
            "nan": "ValueError: the result of nan is not JSON: Out of range float values are not JSON compliant",  # (: nan on 3.12)
            "big": "ValueError: the result of big is 65538 bytes of JSON, at most 65536",
            "train_step": "ValueError: expected step 0, got 5",
        }
        for name, message in expect.items():
            reply = w.handle_event("run", {"requestId": name, "name": name, "args": {"step": 5}})
            assert reply is not None
            self.assertTrue(reply["error"]["message"].startswith(message), reply)
            self.assertEqual(reply, {"requestId": name, "ok": False,
                                     "error": {"code": "ERR_OPERATION_FAILED", "message": reply["error"]["message"]}})
        reply = w.handle_event("run", {"requestId": "l", "name": "long"})
        self.assertEqual(len(reply["error"]["message"]), 8192)  # type: ignore[index]  (the agent's limit)
        self.assertTrue(reply["error"]["message"].startswith("RuntimeError: yyy"))  # type: ignore[index]
        reply = w.handle_event("run", {"requestId": "u", "name": "unknown"})
        self.assertEqual(reply["error"]["code"], "ERR_UNKNOWN_OPERATION")  # type: ignore[index]
        ok(w.handle_event("run", {"requestId": "c", "name": "train_step", "args": {"step": 0}}))  # still serving


class RegistrationTest(unittest.TestCase):
    def worker(self) -> "Worker":
        return Worker("job-a", 0, None, AgentClient("/nonexistent/agentd.sock"))

    def test_refusals(self) -> None:
        w = self.worker()
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            w.register_tensors({"t": torch.zeros(4, 3).t()})
        w.register_tensors({"a": torch.zeros(2)})
        with self.assertRaisesRegex(ValueError, "already registered"):
            w.register_tensors({"a": torch.zeros(2)})
        shared = torch.zeros(3)
        with self.assertRaisesRegex(ValueError, "same tensor"):
            w.register_tensors({"b": shared, "c": shared})
        self.assertEqual([e.name for e in w.state.entries], ["param:a"], "a failed registration adds nothing")
        with self.assertRaisesRegex(ValueError, "no elements"):
            w.register_tensors({"empty": torch.zeros(0)})
        with self.assertRaisesRegex(ValueError, "no key dtype"):
            w.register_tensors({"c64": torch.zeros(2, dtype=torch.complex64)})
        with self.assertRaisesRegex(ValueError, "fqn"):
            w.register_tensors({"a/b": torch.zeros(2)})
        with self.assertRaisesRegex(ValueError, "must match"):
            w.op("not valid!")
        w.op("x")(lambda a: a)
        with self.assertRaisesRegex(ValueError, "already registered"):
            w.op("x")

    def test_optimizer_state_must_exist(self) -> None:
        model = torch.nn.Linear(3, 2)
        adam = torch.optim.Adam(model.parameters())
        with self.assertRaisesRegex(ValueError, "init_optimizer_state"):
            self.worker().register_module(model, adam)
        init_optimizer_state(adam)
        w = self.worker()
        w.register_module(model, adam)
        self.assertEqual(len(w.state), 2 + 2 * 3)
        sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        with self.assertRaisesRegex(ValueError, "momentum_buffer"):
            self.worker().register_module(model, sgd)
        other = torch.optim.SGD(torch.nn.Linear(3, 2).parameters(), lr=0.1)
        with self.assertRaisesRegex(ValueError, "not in the module"):
            self.worker().register_module(model, other)

    def test_buffers_are_state(self) -> None:
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
        w = self.worker()
        w.register_module(model)
        names = [e.name for e in w.state.entries]
        self.assertIn("buffer:1.running_mean", names)
        self.assertIn("buffer:1.num_batches_tracked", names)
        w.state.share()
        self.addCleanup(w.state.release)
        model(torch.randn(8, 4))  # updates the running stats in place, in the arena
        self.assertIsNotNone(w.state.arena.locate(model[1].running_mean))  # type: ignore[union-attr]
        self.assertEqual(int(model[1].num_batches_tracked), 1)
        w.state.check_bound()
        model[1].running_var = torch.ones(4)
        with self.assertRaises(AgentError) as caught:
            w.state.check_bound()
        self.assertEqual(caught.exception.code, "ERR_STATE_MISMATCH")


class InitOptimizerStateTest(unittest.TestCase):
    def run_pair(self, make: Any, steps: int = 5, device: str = "cpu") -> None:
        """Trains two copies, one with init_optimizer_state, one with lazy state: bit-identical losses, parameters, state."""
        torch.manual_seed(3)
        eager_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).to(device)
        lazy_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).to(device)
        lazy_model.load_state_dict(eager_model.state_dict())
        eager, lazy = make(eager_model.parameters()), make(lazy_model.parameters())
        init_optimizer_state(eager)
        self.assertEqual(len(eager.state), 4)
        gen = torch.Generator().manual_seed(5)
        for _ in range(steps):
            x, y = torch.randn(16, 8, generator=gen).to(device), torch.randn(16, 2, generator=gen).to(device)
            losses = []
            for model, opt in ((eager_model, eager), (lazy_model, lazy)):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item().hex())
            self.assertEqual(losses[0], losses[1])
        for a, b in zip(eager_model.parameters(), lazy_model.parameters()):
            self.assertTrue(torch.equal(a, b))
        for p, q in zip(eager_model.parameters(), lazy_model.parameters()):
            self.assertEqual(set(eager.state[p]), set(lazy.state[q]))
            for k, v in eager.state[p].items():
                w = lazy.state[q][k]
                self.assertEqual((v.shape, v.dtype, v.device, v.requires_grad), (w.shape, w.dtype, w.device, w.requires_grad), k)
                self.assertTrue(torch.equal(v, w), k)

    def test_adam(self) -> None:
        self.run_pair(lambda ps: torch.optim.Adam(ps, lr=1e-2))

    def test_adam_amsgrad_weight_decay(self) -> None:
        self.run_pair(lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True, weight_decay=0.1))

    def test_adamw(self) -> None:
        self.run_pair(lambda ps: torch.optim.AdamW(ps, lr=1e-2))

    def test_adamw_amsgrad_foreach(self) -> None:
        self.run_pair(lambda ps: torch.optim.AdamW(ps, lr=1e-2, amsgrad=True, foreach=True))

    def test_existing_state_is_kept_and_frozen_parameters_get_none(self) -> None:
        model = torch.nn.Linear(3, 2)
        model.bias.requires_grad_(False)
        opt = torch.optim.Adam(model.parameters())
        model(torch.randn(2, 3)).sum().backward()
        opt.step()
        step = opt.state[model.weight]["step"]
        init_optimizer_state(opt)
        self.assertIs(opt.state[model.weight]["step"], step)
        self.assertEqual(float(step), 1.0)
        self.assertNotIn(model.bias, opt.state)

    def test_sgd(self) -> None:
        model = torch.nn.Linear(3, 2)
        init_optimizer_state(torch.optim.SGD(model.parameters(), lr=0.1))  # no state to create
        with self.assertRaisesRegex(ValueError, "register the state after one optimizer step"):
            init_optimizer_state(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
        with self.assertRaisesRegex(ValueError, "RMSprop"):
            init_optimizer_state(torch.optim.RMSprop(model.parameters()))


@unittest.skipUnless(not TORCH_MISSING and torch.cuda.is_available(), "torch sees no CUDA device")
class CudaWorkerStateTest(unittest.TestCase):
    def cuda_worker(self) -> Tuple["TinyTrainer", "TinyTrainer", "Worker", AgentCopies]:
        """A CUDA trainer served by a worker (state shared, released at cleanup) and an untouched twin."""
        trainer = TinyTrainer(rank=0, seed=9, hidden=512, device="cuda")
        twin = TinyTrainer(rank=0, seed=9, hidden=512, device="cuda")
        worker, agent = worker_for(trainer)
        self.addCleanup(worker.state.release)
        return trainer, twin, worker, agent

    def test_release_gives_device_memory_back_and_onload_trains_on_identically(self) -> None:
        trainer, twin, worker, agent = self.cuda_worker()
        cuda_bytes = sum(e.key.nbytes for e in worker.state.entries if e.device.type == "cuda")
        cpu_names = {e.name for e in worker.state.entries if e.device.type == "cpu"}
        self.assertEqual({n for n in cpu_names if not n.startswith("optim.step:")}, {"buffer:step"},
                         "only the counter and Adam's steps are CPU state")
        for k in range(2):
            self.assertEqual(ok(worker.handle_event("run", {"requestId": str(k), "name": "train_step", "args": {"step": k}}))["result"],
                             twin.train_step({"step": k}))
        before = torch.cuda.memory_allocated()
        agent.offload(1)
        self.assertLessEqual(torch.cuda.memory_allocated(), before - cuda_bytes)
        self.assertTrue(all(t.numel() == 0 and t.device == trainer.state_tensors()[n].device
                            for n, t in trainer.state_tensors().items()))
        reply = agent.onload(1)
        kinds = {t["name"]: t["memory"]["kind"] for t in reply["result"]["tensors"]}
        self.assertEqual({n for n, k in kinds.items() if k == "shm"}, cpu_names, "CPU state in shared memory")
        self.assertEqual(len({t["memory"]["handle"] for t in reply["result"]["tensors"] if t["memory"]["kind"] == "cuda-ipc"}), 1,
                         "the CUDA state is one allocation: one IPC handle")
        self.assertTrue(all(t.is_cuda for n, t in trainer.state_tensors().items() if n not in cpu_names))
        for k in range(2, 7):
            self.assertEqual(ok(worker.handle_event("run", {"requestId": str(k), "name": "train_step", "args": {"step": k}}))["result"],
                             twin.train_step({"step": k}))

    def test_an_allocate_without_room_on_the_device_is_device_full_and_allocates_nothing(self) -> None:
        _, twin, worker, agent = self.cuda_worker()
        agent.offload(1)
        hogs = []  # another job's memory: the device is full
        for size in (1 << 30, 1 << 24, 1 << 20):
            while True:
                try:
                    hogs.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
                except torch.cuda.OutOfMemoryError:
                    break
        allocated = torch.cuda.memory_allocated()
        reply = worker.handle_event("allocate", {"requestId": "i"})
        self.assertEqual(reply["error"]["code"], "ERR_DEVICE_FULL")  # type: ignore[index]
        self.assertTrue(worker.state.released, "still released: the allocate comes again once there is room")
        self.assertEqual(torch.cuda.memory_allocated(), allocated, "nothing of the state was allocated")
        hogs.clear()
        torch.cuda.empty_cache()
        agent.onload(1)
        self.assertEqual(ok(worker.handle_event("run", {"requestId": "r", "name": "train_step", "args": {"step": 0}}))["result"],
                         twin.train_step({"step": 0}))

    def test_init_optimizer_state_on_cuda(self) -> None:
        pair = InitOptimizerStateTest()
        pair.run_pair(lambda ps: torch.optim.Adam(ps, lr=1e-2), device="cuda")
        pair.run_pair(lambda ps: torch.optim.Adam(ps, lr=1e-2, capturable=True), device="cuda")
        pair.run_pair(lambda ps: torch.optim.AdamW(ps, lr=1e-2, capturable=True, amsgrad=True), device="cuda")
        pair.run_pair(lambda ps: torch.optim.Adam(ps, lr=1e-2, fused=True), device="cuda")


class TinyTrainerAloneTest(unittest.TestCase):
    def alone(self, *extra: str) -> List[Dict[str, Any]]:
        out = subprocess.run([sys.executable, str(TRAINER), "alone", "--job", "j", "--rank", "1", "--steps", "4",
                              "--hidden", str(HIDDEN), *extra], capture_output=True, text=True, timeout=120, check=True)
        return [json.loads(line) for line in out.stdout.splitlines()]

    def test_alone_is_deterministic(self) -> None:
        first, second = self.alone(), self.alone()
        self.assertEqual(len(first), 5)
        self.assertEqual(first, second)
        self.assertEqual([r["step"] for r in first[:4]], [0, 1, 2, 3])
        self.assertEqual(first[4], {"final": first[3]["stateHash"]})
        self.assertNotEqual(self.alone("--seed", "1")[0], first[0])
        # The in-process trainer computes the same.
        trainer = TinyTrainer(rank=1, hidden=HIDDEN)
        self.assertEqual([trainer.train_step({"step": k}) for k in range(4)], first[:4])


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False


class FakeAgent:
    """Just enough of agentd's worker and state routes, on a unix socket, for the worker of one rank.

    ``send(event, data)`` puts an event on the worker's stream and returns the
    worker's reply. State bytes are read from and written to ``/dev/shm``.
    """

    WORKER_ID = "w-1"

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "agent.sock")
        self.store: Dict[str, bytes] = {}
        self.registrations: List[Dict[str, Any]] = []
        #: Each state tensor's key and where it lives (registration, then each allocate reply).
        self.keys: Dict[str, Any] = {}
        self.memory: Dict[str, Dict[str, Any]] = {}
        self.requests: List[str] = []
        self.events: "queue.Queue[Optional[Tuple[str, Dict[str, Any]]]]" = queue.Queue()
        self.replies: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        self.stream_open = threading.Event()
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                agent._route(self, "GET")

            def do_POST(self) -> None:
                agent._route(self, "POST")

            def do_DELETE(self) -> None:
                agent._route(self, "DELETE")

        self.server = _UnixHTTPServer(self.path, Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.events.put(None)
        self.server.shutdown()
        self.server.server_close()

    def send(self, event: str, data: Dict[str, Any], timeout: float = 60) -> Dict[str, Any]:
        self.events.put((event, data))
        reply = self.replies.get(timeout=timeout)
        assert reply["requestId"] == data["requestId"], (reply, data)
        return reply

    def offload(self, version: int, request_id: str) -> Dict[str, Any]:
        """As the agent switches a worker out: copy its state out of the memory it named, then ``release``."""
        for name, spec in self.memory.items():
            key = self.keys[name]
            self.store[key.with_version(version).text] = _shm_read(spec, key.nbytes)
        return self.send("release", {"requestId": request_id})

    def onload(self, version: int, request_id: str) -> Dict[str, Any]:
        """As the agent switches a worker in: ``allocate``, then copy the stored version into the memory named."""
        reply = self.send("allocate", {"requestId": request_id})
        if reply["ok"]:
            self.memory = {t["name"]: t["memory"] for t in reply["result"]["tensors"]}
            for name, spec in self.memory.items():
                _shm_write(spec, self.store[self.keys[name].with_version(version).text])
        return reply

    def _route(self, h: BaseHTTPRequestHandler, method: str) -> None:
        self.requests.append(f"{method} {h.path}")
        length = int(h.headers.get("content-length") or 0)
        body = json.loads(h.rfile.read(length)) if length else None
        w = f"/v1/workers/{self.WORKER_ID}"
        if (method, h.path) == ("POST", "/v1/workers"):
            for t in body["tensors"]:
                key = parse_key(t["key"])
                assert key.version == 0 and t["memory"]["kind"] == "shm", t
                self.store[key.text] = _shm_read(t["memory"], key.nbytes)
                self.keys[t["name"]] = key
                self.memory[t["name"]] = t["memory"]
            self.registrations.append(body)
            self._answer(h, 200, {"workerId": self.WORKER_ID, "job": body["job"], "rank": body["rank"], "gpu": body["gpu"],
                                  "node": "fake-node", "stored": None})
        elif (method, h.path) == ("GET", f"{w}/events"):
            h.send_response(200)
            h.send_header("content-type", "text/event-stream")
            h.end_headers()
            h.wfile.write(b": keepalive\n\n")
            h.wfile.flush()
            self.stream_open.set()
            n = 0
            while (item := self.events.get()) is not None:
                n += 1
                h.wfile.write(f"id: {n}\nevent: {item[0]}\ndata: {json.dumps(item[1])}\n\n".encode())
                h.wfile.flush()
        elif (method, h.path) == ("POST", f"{w}/replies"):
            self._answer(h, 200, {})
            self.replies.put(body)  # after the answer: the test may signal the worker as soon as it has the reply
        elif (method, h.path) == ("DELETE", w):
            self.events.put(None)  # the agent closes the stream of a deregistered worker
            self._answer(h, 200, {})
        else:
            self._answer(h, 404, {"error": {"code": "ERR_NOT_FOUND", "message": f"{method} {h.path}"}})

    @staticmethod
    def _answer(h: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)


def _shm_read(memory: Mapping[str, Any], nbytes: int) -> bytes:
    with open(f"/dev/shm/{memory['name'].lstrip('/')}", "rb") as f:
        f.seek(memory["offset"])
        data = f.read(nbytes)
    assert len(data) == nbytes
    return data


def _shm_write(memory: Mapping[str, Any], data: bytes) -> None:
    with open(f"/dev/shm/{memory['name'].lstrip('/')}", "r+b") as f:
        f.seek(memory["offset"])
        f.write(data)


class ServeTest(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="agentd-worker-")
        self.addCleanup(tmp.cleanup)
        self.agent = FakeAgent(tmp.name)
        self.addCleanup(self.agent.close)

    def test_serve_registers_switches_rolls_back_and_stops(self) -> None:
        trainer = TinyTrainer(rank=2, seed=4, hidden=HIDDEN)
        worker = Worker("job-b", 2, None, AgentClient(self.agent.path))
        worker.register_module(trainer.model, trainer.optimizer)
        worker.register_tensors({"step": trainer.step}, role="buffer")
        for name, handler in trainer.ops().items():
            worker.op(name)(handler)
        outcome: "queue.Queue[Any]" = queue.Queue()
        thread = threading.Thread(target=lambda: outcome.put(_call(worker.serve)), daemon=True)
        thread.start()
        self.assertTrue(self.agent.stream_open.wait(30), "the worker opened its event stream")

        [registration] = self.agent.registrations
        self.assertEqual({k: registration[k] for k in ("job", "rank", "gpu")}, {"job": "job-b", "rank": 2, "gpu": None})
        self.assertEqual(registration["ops"], ["train_step", "status", "state_hash", "sleep", "noop"])
        names = [t["name"] for t in registration["tensors"]]
        self.assertEqual(set(names), set(trainer.state_tensors()))
        self.assertTrue(all(t["key"].startswith("job-b/r2/") and t["key"].endswith("#v0") for t in registration["tensors"]))
        shm_names = {t["memory"]["name"] for t in registration["tensors"]}
        self.assertEqual(len(shm_names), 1, "one arena")
        self.assertEqual(worker.worker_id, "w-1")

        twin = TinyTrainer(rank=2, seed=4, hidden=HIDDEN)
        expected = [twin.train_step({"step": k}) for k in range(4)]
        reply = self.agent.send("run", {"requestId": "q1", "opId": "s0", "name": "train_step", "args": {"step": 0}})
        self.assertEqual((reply["ok"], reply["result"]), (True, expected[0]))
        self.assertEqual(set(reply), {"requestId", "ok", "result", "startedAtMs", "durationMs"})
        self.assertEqual(self.agent.offload(1, "q2"), {"requestId": "q2", "ok": True})
        self.assertTrue(all(t.numel() == 0 for t in trainer.state_tensors().values()))
        self.assertFalse(os.path.exists(f"/dev/shm/{shm_names.pop()}"), "the released arena is unlinked")
        reply = self.agent.onload(1, "q3")
        self.assertEqual((reply["requestId"], reply["ok"], set(reply["result"])), ("q3", True, {"tensors"}))
        for k in (1, 2):
            reply = self.agent.send("run", {"requestId": f"s{k}", "name": "train_step", "args": {"step": k}})
            self.assertEqual(reply["result"], expected[k])
        # A rollback to version 0 (the registration) and on again from there.
        self.agent.send("release", {"requestId": "q4"})
        self.assertEqual(self.agent.onload(0, "q5")["ok"], True)
        self.assertEqual(self.agent.send("run", {"requestId": "q6", "name": "status"})["result"], {"step": 0})
        for k in range(4):
            reply = self.agent.send("run", {"requestId": f"t{k}", "name": "train_step", "args": {"step": k}})
            self.assertEqual(reply["result"], expected[k])
        reply = self.agent.send("run", {"requestId": "q7", "name": "train_step", "args": {"step": 0}})
        self.assertEqual(reply, {"requestId": "q7", "ok": False,
                                 "error": {"code": "ERR_OPERATION_FAILED", "message": "ValueError: expected step 4, got 0"}})
        arena_name = worker.state.arena.name  # type: ignore[union-attr]
        self.assertEqual(self.agent.send("stop", {"requestId": "q8", "reason": "job deleted"}), {"requestId": "q8", "ok": True})
        thread.join(30)
        self.assertEqual(outcome.get(timeout=1), ("returned", "job deleted"))
        self.assertFalse(os.path.exists(f"/dev/shm/{arena_name}"), "serve() unlinks its arena")
        self.assertNotIn("DELETE /v1/workers/w-1", self.agent.requests)
        self.assertEqual(trainer.train_step({"step": 4}), twin.train_step({"step": 4}), "the model stays usable")

    def test_the_trainer_deregisters_on_sigterm(self) -> None:
        proc = subprocess.Popen([sys.executable, str(TRAINER), "serve", "--socket", self.agent.path, "--job", "job-c",
                                 "--rank", "0", "--hidden", str(HIDDEN)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        assert proc.stdout is not None
        registered = json.loads(proc.stdout.readline())
        self.assertEqual(registered["registered"]["workerId"], "w-1")
        self.assertTrue(self.agent.stream_open.wait(30))
        self.assertEqual(self.agent.send("run", {"requestId": "a", "name": "noop"})["result"], {})
        self.assertEqual(self.agent.send("run", {"requestId": "b", "name": "sleep", "args": {"ms": 20}})["result"], {})
        shm = self.agent.registrations[0]["tensors"][0]["memory"]["name"]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, err)
        self.assertEqual(out.strip().splitlines()[-1], '{"stopped": "interrupted"}')
        self.assertIn("DELETE /v1/workers/w-1", self.agent.requests)
        self.assertFalse(os.path.exists(f"/dev/shm/{shm}"), "no shared memory left behind")
        self.assertNotIn("leaked", err)


def _call(fn: Any) -> Tuple[str, Any]:
    try:
        return ("returned", fn())
    except BaseException as err:  # noqa: BLE001 - reported to the test thread
        return ("raised", err)


if __name__ == "__main__":
    unittest.main()
