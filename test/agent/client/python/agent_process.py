"""A real dev agent for the Python client's tests, plus shared-memory helpers.

Starting an agent takes seconds, so the test modules share one
(:func:`shared_agent`), stopped with SIGTERM when the test process exits.
Each test keeps to its own key namespace and lock holders and cleans up
what it creates, so the tests do not depend on each other's order.

Importing this module puts ``agent/client/python`` first on ``sys.path``, so
the tests exercise the client's source, not an installed copy.
"""
import atexit
import ctypes
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Callable, List, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO_ROOT / "agent" / "client" / "python"))

from agentd_client import AgentClient, AgentError  # noqa: E402

MiB = 1 << 20
#: Small tiers keep the agent light; the spill test relies on the 16 MiB pool.
HOST_POOL_BYTES = 16 * MiB
NVME_CAPACITY_BYTES = 256 * MiB
#: Two GPUs in the inventory (config override, no hardware needed), so the device lock runs.
FAKE_GPUS = json.dumps([
    {"model": "Fake GPU", "memoryBytes": 85_520_809_984, "uuid": "GPU-fake-0", "pciBus": "00000000:17:00.0"},
    {"model": "Fake GPU", "memoryBytes": 85_520_809_984, "uuid": "GPU-fake-1", "pciBus": "00000000:65:00.0"},
])


class DevAgent:
    """``agent/main.ts --dev`` on the project's Node, in a fresh temp state dir (plus ``extra_args``).

    ``start()`` returns once ``GET /healthz`` answers on ``<dir>/agentd.sock``;
    ``stop()`` sends SIGTERM, waits for the exit, and removes the dir.
    """

    def __init__(self, extra_args: Sequence[str] = ()) -> None:
        self.extra_args = list(extra_args)
        # A short dir: the socket path must fit in 107 bytes.
        self.state_dir = tempfile.mkdtemp(prefix="agentd-py-")
        self.socket_path = os.path.join(self.state_dir, "agentd.sock")
        self.log_path = os.path.join(self.state_dir, "agentd.log")
        self.client = AgentClient(self.socket_path, timeout_s=30)
        self.proc: "subprocess.Popen[bytes] | None" = None

    def start(self, timeout_s: float = 30) -> "DevAgent":
        node = REPO_ROOT / "node_modules" / ".bin" / "node"
        if not node.exists():
            raise unittest.SkipTest(f"the project's Node is not installed at {node} (run npm install)")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
        args: List[str] = [str(node), "agent/main.ts", "--dev", "--state-dir", self.state_dir,
                           "--set", f"state.hostPoolBytes={HOST_POOL_BYTES}",
                           "--set", f"state.nvmeCapacityBytes={NVME_CAPACITY_BYTES}", *self.extra_args]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=_terminate_with_parent)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agentd exited with {self.proc.returncode} before it was ready:\n{self.output()}")
            try:
                if self.client.health():
                    return self
            except AgentError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"agentd not ready after {timeout_s} s:\n{self.output()}")
            time.sleep(0.05)

    def output(self) -> str:
        with open(self.log_path, "rb") as log:
            return log.read().decode("utf-8", "replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.state_dir, ignore_errors=True)


def _terminate_with_parent() -> None:
    """In the agent's process before exec: SIGTERM it when the test process dies, even by a signal (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the atexit stop still covers a normal exit


_shared: Optional[DevAgent] = None


def shared_agent() -> DevAgent:
    """The suite's dev agent (16 MiB host pool, two faked GPUs): started on first use, stopped at exit."""
    global _shared
    if _shared is None:
        _shared = DevAgent(["--set", f"inventory.gpus={FAKE_GPUS}"])
        atexit.register(_shared.stop)
        _shared.start()
    return _shared


class AgentErrorAssertions(unittest.TestCase):
    """``assertAgentError`` for the suite's test cases (no tests of its own)."""

    def assertAgentError(self, code: str, status: "int | None", call: Callable[[], object]) -> AgentError:
        """``call()`` raises AgentError with this code and HTTP status (None: no answer came); returns it."""
        with self.assertRaises(AgentError) as caught:
            call()
        self.assertEqual((caught.exception.code, caught.exception.status), (code, status), caught.exception.message)
        return caught.exception


def make_shm(test: unittest.TestCase, data: "bytes | int") -> SharedMemory:
    """A shared-memory object holding ``data`` (or ``data`` zero bytes), closed and unlinked at cleanup."""
    size = data if isinstance(data, int) else len(data)
    shm = SharedMemory(create=True, size=size)
    test.addCleanup(_release, shm)
    if not isinstance(data, int):
        shm.buf[:size] = data
    return shm


def _release(shm: SharedMemory) -> None:
    shm.close()
    try:
        shm.unlink()
    except FileNotFoundError:
        pass


def pattern(nbytes: int, seed: int) -> bytes:
    """Deterministic pseudo-random bytes (different seeds give different bytes)."""
    return random.Random(seed).randbytes(nbytes)
