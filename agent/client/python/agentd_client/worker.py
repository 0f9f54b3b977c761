"""The worker side of a job's worker group (``agent/workers/PROTOCOL.md``). Needs PyTorch::

    from agentd_client import AgentClient
    from agentd_client.worker import Worker, init_optimizer_state

    init_optimizer_state(optimizer)                 # Adam/AdamW state exists from now on
    w = Worker(job="rl-a", rank=0, gpu=0, agent=AgentClient())
    w.register_module(model, optimizer)             # parameters, buffers, optimizer state
    w.register_tensors({"step": step_counter}, role="buffer")

    @w.op("train_step")
    def train_step(args):                           # args: the operation's JSON arguments
        ...
        return {"loss": loss.item()}                # JSON, at most 64 KiB

    w.serve()                                       # until the agent stops the worker

Contracts:

* **State is what the agent moves.** The agent copies every registered tensor
  out of the worker's memory before it sends ``release`` and into it after an
  ``allocate``; the worker never copies state itself. Anything else (Python
  counters, gradients, an LR scheduler's position) is not, so keep what must
  survive a context switch or a rollback in a registered tensor. Gradients are
  not freed on release either: zero them with ``set_to_none=True`` at the end
  of an operation when they must not hold device memory between operations.
* **Tensors stay the same objects.** The worker moves a tensor's bytes by
  rebinding its ``.data`` (a parameter stays the same ``Parameter``, an
  optimizer state entry the same tensor); update state in place, never by
  replacing it (``optimizer.load_state_dict`` replaces: register afterwards).
  A replaced tensor fails the operation that replaced it (``ERR_STATE_MISMATCH``).
* **Memory the agent reaches.** CPU state lives in one
  :class:`~agentd_client.torch_support.SharedTensorArena` (the agent copies it
  in place); CUDA state goes by CUDA IPC. On release CPU state gives its
  shared memory back, CUDA state its device memory (``torch.cuda.empty_cache()``);
  until the next ``allocate`` every state tensor has no elements.
* **State exists at registration.** Optimizers that create state lazily must
  have it first: :func:`init_optimizer_state` for Adam/AdamW;
  :meth:`Worker.register_module` refuses Adam, AdamW and momentum SGD without it.
* **Operations run one at a time**, on the thread that called :meth:`Worker.serve`,
  in the order the agent sends them, with the state in their memory.
"""
import gc
import inspect
import json
import logging
import queue
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import torch

from .client import AgentClient
from .errors import AgentError
from .keys import StateKey
from .torch_support import SHM_ALIGNMENT, SharedTensorArena, TorchStateClient, _Placement, tensor_key

log = logging.getLogger("agentd_client.worker")

#: Operation names the agent accepts (``agent/workers/PROTOCOL.md``).
OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
#: Largest JSON of one operation's result, bytes.
MAX_RESULT_BYTES = 64 * 1024
#: Longest error message a reply may carry (the agent's reply schema); longer ones are cut.
MAX_MESSAGE_CHARS = 8192

#: An operation handler: the parsed JSON arguments in, a JSON-serialisable result out.
OpHandler = Callable[[Any], Any]


def init_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Creates now the state that ``optimizer`` would create lazily at its first step, bit-identically.

    Supports :class:`torch.optim.Adam` and :class:`torch.optim.AdamW`: for every
    parameter that requires grad and has no state yet, ``step`` (as the
    installed torch makes it: ``torch.tensor(0.)`` by default, on the
    parameter's device when ``capturable`` or ``fused``), ``exp_avg``,
    ``exp_avg_sq`` and with ``amsgrad`` ``max_exp_avg_sq``, all zeros. Training
    then runs exactly as with lazily created state. Where the optimizer has its
    own ``_init_group`` (torch >= 2.0) that code creates the state (each
    parameter given a zero gradient for the call, then ``None`` again);
    otherwise torch 1.13's ``step()`` initialisation is reproduced.

    :class:`torch.optim.SGD` without momentum has no state (nothing to do). SGD
    with momentum is refused (ValueError): its buffer starts as a copy of the
    first gradient, not zeros, so register after one step or use Adam/AdamW.
    Any other optimizer: ValueError.
    """
    if isinstance(optimizer, torch.optim.SGD):
        if any(group.get("momentum", 0) != 0 for group in optimizer.param_groups):
            raise ValueError("SGD with momentum starts its momentum_buffer as a copy of the first gradient, not zeros, "
                             "so it cannot be created ahead of time: register the state after one optimizer step, "
                             "or use Adam/AdamW")
        return
    if not isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        raise ValueError(f"init_optimizer_state supports Adam, AdamW and SGD without momentum, "
                         f"not {type(optimizer).__name__}")
    with torch.no_grad():
        if hasattr(optimizer, "_init_group"):
            _init_with_init_group(optimizer)
        else:
            _init_adam_like_torch_1_13(optimizer)


def _init_with_init_group(optimizer: torch.optim.Optimizer) -> None:
    """torch >= 2.0: the optimizer's own lazy initialisation, for parameters given a temporary zero gradient."""
    init_group = optimizer._init_group  # type: ignore[attr-defined]
    # (group, params_with_grad, grads, [amsgrad,] exp_avgs, ...): lists to fill, and AdamW 2.0's amsgrad flag.
    later = list(inspect.signature(init_group).parameters)[1:]
    for group in optimizer.param_groups:
        lent = [p for p in group["params"] if p.requires_grad and p.grad is None]
        try:
            for p in lent:
                p.grad = torch.zeros_like(p)
            init_group(group, *[group["amsgrad"] if name == "amsgrad" else [] for name in later])
        finally:
            for p in lent:
                p.grad = None


def _init_adam_like_torch_1_13(optimizer: torch.optim.Optimizer) -> None:
    """torch 1.13's ``Adam.step`` / ``AdamW.step`` lazy initialisation, for every parameter that requires grad."""
    on_device = bool(optimizer.defaults.get("capturable", False) or optimizer.defaults.get("fused", False))
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not p.requires_grad or len(optimizer.state[p]) != 0:
                continue
            state = optimizer.state[p]
            state["step"] = torch.zeros((1,), dtype=torch.float, device=p.device) if on_device else torch.tensor(0.)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)


@dataclass
class _Entry:
    """One state tensor: its registration name, key (version 0), layout, and how to tell it was replaced."""

    name: str
    key: StateKey
    #: The registered object; its ``.data`` is what moves.
    tensor: torch.Tensor
    shape: Tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    #: What its owner (module, optimizer) holds now, to detect a replaced tensor; None for plain tensors.
    bound: Optional[Callable[[], Any]]


class WorkerState:
    """The state tensors of one worker and the memory they live in.

    Tensors are added with :meth:`add`; :meth:`share` moves every CPU tensor
    into one new shared-memory arena; :meth:`release` frees every tensor's
    memory (each becomes empty); :meth:`reallocate` gives each its memory back
    (contents undefined until the agent copies the state in; each device's CUDA tensors share one
    allocation, CPU tensors one arena). Each move rebinds the tensor's
    ``.data``, so the registered objects stay the ones the model and the
    optimizer use.
    """

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.arena: Optional[SharedTensorArena] = None
        self.released = False
        self._entries: Dict[str, _Entry] = {}
        self._keys: Dict[str, str] = {}  # key text at v0 -> name

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> List[_Entry]:
        """Every state tensor, in registration order."""
        return list(self._entries.values())

    def add(self, name: str, fqn: str, role: str, tensor: torch.Tensor,
            bound: Optional[Callable[[], Any]] = None) -> None:
        """Adds a state tensor under ``name`` with key ``<namespace>/<fqn>:<role>...#v0``.

        ValueError: a name or key already registered, the same tensor (or
        memory) twice, a tensor that is not a contiguous strided CPU/CUDA
        tensor with at least one element, or a dtype/fqn/role a key cannot name.
        """
        if self.released:
            raise RuntimeError("cannot add state while it is released")
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"state {name!r} must be a torch.Tensor, got {type(tensor).__name__}")
        if name in self._entries:
            raise ValueError(f"state {name!r} is already registered")
        if tensor.layout != torch.strided or tensor.device.type not in ("cpu", "cuda"):
            raise ValueError(f"state {name!r} is a {tensor.layout} tensor on {tensor.device}: "
                             "state tensors are dense (strided) CPU or CUDA tensors")
        if tensor.numel() == 0:
            raise ValueError(f"state {name!r} has no elements: a state tensor needs at least one")
        if not tensor.is_contiguous():
            raise ValueError(f"state {name!r} is not contiguous (shape {list(tensor.shape)}, strides {list(tensor.stride())}): "
                             "the agent copies one linear run of bytes; make it contiguous before registering "
                             "(t.data = t.data.contiguous())")
        for other in self._entries.values():
            if other.tensor is tensor or other.tensor.data_ptr() == tensor.data_ptr():
                raise ValueError(f"state {name!r} is the same tensor (or memory) as {other.name!r}")
        try:
            key = tensor_key(tensor, self.namespace, fqn, version=0, role=role)
        except AgentError as err:
            raise ValueError(f"state {name!r}: {err.message}") from None
        if key.text in self._keys:
            raise ValueError(f"state {name!r} has the same key as {self._keys[key.text]!r}: {key.text}")
        self._keys[key.text] = name
        self._entries[name] = _Entry(name, key, tensor, tuple(tensor.shape), tensor.dtype, tensor.device, bound)

    @contextmanager
    def all_or_nothing(self) -> Iterator[None]:
        """Tensors added in the block stay only if the block completes."""
        entries, keys = dict(self._entries), dict(self._keys)
        try:
            yield
        except BaseException:
            self._entries, self._keys = entries, keys
            raise

    def keys(self, version: int) -> Dict[StateKey, torch.Tensor]:
        """Every state tensor under its key at ``version``, in registration order."""
        return {e.key.with_version(version): e.tensor for e in self._entries.values()}

    def share(self) -> None:
        """Copies every CPU state tensor into a new arena sized for all of them, and rebinds it there.

        CUDA tensors stay where they are (the agent reaches them by CUDA IPC).
        The previous arena, if any, is closed.
        """
        if self.released:
            raise RuntimeError("cannot share released state: reallocate it first")
        cpu = self._cpu_entries()
        arena = SharedTensorArena(_arena_bytes(cpu)) if cpu else None
        with torch.no_grad():
            for e in cpu:
                assert arena is not None
                moved = arena.empty(e.shape, e.dtype)
                moved.copy_(e.tensor.detach())
                e.tensor.data = moved
        self._replace_arena(arena)

    def release(self) -> None:
        """Frees every state tensor's memory: each becomes ``torch.empty(0)`` of its dtype on its device.

        The arena is closed (its shared memory unlinked and unmapped) and the
        CUDA caching allocator gives its free blocks back to the driver.
        Idempotent.
        """
        if self.released:
            return
        with torch.no_grad():
            for e in self._entries.values():
                e.tensor.data = torch.empty(0, dtype=e.dtype, device=e.device)
        self._replace_arena(None)
        if torch.cuda.is_available() and any(e.device.type == "cuda" for e in self._entries.values()):
            torch.cuda.empty_cache()
        self.released = True

    def reallocate(self) -> None:
        """Gives every released tensor its memory back (same shape, dtype, device; contents undefined).

        CPU tensors come from one new shared-memory arena, the CUDA tensors of
        each device from one new device allocation (so the agent opens one IPC
        handle per device, not one per tensor, and copies into one range).
        Nothing happens when the state is not released. All or nothing: when
        a device has no room (AgentError ``ERR_DEVICE_FULL``), nothing was
        allocated and the state stays released.
        """
        if not self.released:
            return
        cpu = self._cpu_entries()
        by_device: Dict[torch.device, List[_Entry]] = {}
        for e in self._entries.values():
            if e.device.type == "cuda":
                by_device.setdefault(e.device, []).append(e)
        blocks: Dict[torch.device, torch.Tensor] = {}
        try:
            for device, entries in by_device.items():
                blocks[device] = torch.empty(_arena_bytes(entries), dtype=torch.uint8, device=device)
        except torch.cuda.OutOfMemoryError as err:
            blocks.clear()
            torch.cuda.empty_cache()
            raise AgentError("ERR_DEVICE_FULL", f"no room on the device for the state: {err}") from err
        arena = SharedTensorArena(_arena_bytes(cpu)) if cpu else None
        with torch.no_grad():
            for e in cpu:
                assert arena is not None
                e.tensor.data = arena.empty(e.shape, e.dtype)
            for device, entries in by_device.items():
                block = blocks[device]
                end = 0
                for e in entries:
                    start = -(-end // SHM_ALIGNMENT) * SHM_ALIGNMENT
                    end = start + e.key.nbytes
                    e.tensor.data = block[start:end].view(e.dtype).view(e.shape)
        self.arena = arena
        self.released = False

    def check_bound(self) -> None:
        """AgentError ``ERR_STATE_MISMATCH`` when a module or optimizer now holds another tensor than the registered one."""
        for e in self._entries.values():
            if e.bound is not None and e.bound() is not e.tensor:
                raise AgentError("ERR_STATE_MISMATCH",
                                 f"state tensor {e.name} was replaced since registration (state must be updated in place; "
                                 "after e.g. optimizer.load_state_dict register the state again)")

    def synchronize(self) -> None:
        """Waits for the work queued on every CUDA device that holds state."""
        for device in {e.device for e in self._entries.values() if e.device.type == "cuda"}:
            torch.cuda.synchronize(device)

    def unlink(self) -> None:
        """Removes the arena's shared-memory name; its memory stays mapped while the tensors use it."""
        if self.arena is not None:
            try:
                self.arena.shm.unlink()
            except FileNotFoundError:
                pass

    def _cpu_entries(self) -> List[_Entry]:
        return [e for e in self._entries.values() if e.device.type == "cpu"]

    def _replace_arena(self, arena: Optional[SharedTensorArena]) -> None:
        old, self.arena = self.arena, arena
        if old is not None:
            _close_arena(old)


def _arena_bytes(entries: List[_Entry]) -> int:
    """Bytes an arena needs for ``entries`` allocated in order (each start aligned as the arena aligns it)."""
    end = 0
    for e in entries:
        end = -(-end // SHM_ALIGNMENT) * SHM_ALIGNMENT + e.key.nbytes
    return max(end, 1)


def _close_arena(arena: SharedTensorArena) -> None:
    """Closes an arena no state tensor views any more; views held elsewhere keep its memory until they die."""
    try:
        arena.close()
    except BufferError:
        gc.collect()  # views kept alive only by reference cycles
        try:
            arena.close()
        except BufferError:
            log.warning("shared memory %s is still viewed by tensors outside the worker's state: "
                        "its name is removed, its memory is freed when they are", arena.name)


class Worker:
    """One rank of a job's worker group: its state, its operations, and the event loop that serves the agent.

    Args:
        job: the job id (the namespace of every key is ``<job>/r<rank>``).
        rank: this worker's rank (see PROTOCOL.md "Ranks").
        gpu: the agent's index of this rank's GPU, or ``None`` for a CPU-only group.
        agent: the client of this node's agent.
        device_map: passed to :class:`~agentd_client.torch_support.TorchStateClient`
            (the agent's GPU index of each CUDA device of this process).

    Register state and operations first, then call :meth:`serve`.
    """

    def __init__(self, job: str, rank: int, gpu: Optional[int], agent: AgentClient, *,
                 device_map: Optional[Mapping[int, int]] = None) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise ValueError(f"rank must be a non-negative int, got {rank!r}")
        if gpu is not None and (isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0):
            raise ValueError(f"gpu must be None or a non-negative int, got {gpu!r}")
        self.job = job
        self.rank = rank
        self.gpu = gpu
        self.agent = agent
        self.state = WorkerState(f"{job}/r{rank}")
        #: The agent's id for this worker once :meth:`serve` has registered it.
        self.worker_id: Optional[str] = None
        #: The agent's registration answer (``stored`` says whether it holds an earlier worker's state).
        self.registration: Optional[Dict[str, Any]] = None
        self._ops: Dict[str, OpHandler] = {}
        self._states = TorchStateClient(agent, device_map=device_map)
        #: The memory specs the agent holds now, and the CUDA IPC counters taken for them (kept until release).
        self._shared: Optional[_Placement] = None
        self._serving = False

    @property
    def namespace(self) -> str:
        return self.state.namespace

    def register_module(self, module: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer] = None) -> None:
        """Registers ``module``'s parameters (role ``param``) and buffers (``buffer``) and ``optimizer``'s state.

        Names: ``param:<fqn>``, ``buffer:<fqn>``, ``optim.<k>:<fqn>`` with key fqn
        ``<fqn>.<k>`` and role ``optim.<k>`` for the optimizer's state entry ``k``
        of the parameter named ``<fqn>``. The optimizer may only hold
        parameters of ``module``; its state must exist already (see
        :func:`init_optimizer_state`), and be tensors (``None`` entries are
        skipped). ValueError otherwise, and for anything :meth:`WorkerState.add` refuses.
        """
        self._check_not_serving()
        names = {id(p): name for name, p in module.named_parameters()}
        if optimizer is not None:
            _check_optimizer(optimizer, names)
        with self.state.all_or_nothing():
            self._add_module(module, optimizer, names)

    def _add_module(self, module: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer],
                    names: Mapping[int, str]) -> None:
        for name, p in module.named_parameters():
            self.state.add(f"param:{name}", name, "param", p, _owner_slot(module, name, "_parameters"))
        for name, b in module.named_buffers():
            self.state.add(f"buffer:{name}", name, "buffer", b, _owner_slot(module, name, "_buffers"))
        if optimizer is None:
            return
        for group in optimizer.param_groups:
            for p in group["params"]:
                entries = optimizer.state[p] if p in optimizer.state else {}
                for k, value in entries.items():
                    if value is None:
                        continue
                    self.state.add(f"optim.{k}:{names[id(p)]}", f"{names[id(p)]}.{k}", f"optim.{k}", value,
                                   _optimizer_slot(optimizer, p, k))

    def register_tensors(self, tensors: Mapping[str, torch.Tensor], *, role: str = "param") -> None:
        """Registers plain tensors as state: name ``<role>:<name>``, key fqn ``<name>``. ValueError as for :meth:`register_module`."""
        self._check_not_serving()
        with self.state.all_or_nothing():
            for name, tensor in tensors.items():
                self.state.add(f"{role}:{name}", name, role, tensor)

    def op(self, name: str) -> Callable[[OpHandler], OpHandler]:
        """Decorator: registers the handler of operation ``name`` (``^[A-Za-z_][A-Za-z0-9_.-]{0,63}$``, unique)."""
        self._check_not_serving()
        if not isinstance(name, str) or OP_NAME.fullmatch(name) is None:
            raise ValueError(f"operation name {name!r} must match ^[A-Za-z_][A-Za-z0-9_.-]{{0,63}}$")
        if name in self._ops:
            raise ValueError(f"operation {name!r} is already registered")

        def register(handler: OpHandler) -> OpHandler:
            self._ops[name] = handler
            return handler
        return register

    def serve(self, on_registered: Optional[Callable[[Dict[str, Any]], None]] = None) -> Optional[str]:
        """Registers with the agent and answers its events until it stops this worker.

        Moves the CPU state into shared memory, registers (``POST /v1/workers``),
        calls ``on_registered`` with the agent's answer, opens the event stream
        and handles each event in order on this thread. Returns the ``stop``
        event's reason, or ``None`` when the agent closed the stream without
        one. On KeyboardInterrupt (raise it from a SIGTERM handler for a clean
        shutdown) the worker deregisters (``DELETE``; its stored state is kept)
        before the stream closes, and the exception propagates. Any other
        exception propagates with the stream closed: the agent counts that as
        the worker's death. Registration errors are AgentErrors (nothing registered).
        """
        self._check_not_serving()
        self._serving = True
        try:
            self.state.share()
            self.registration = self._register()
            self.worker_id = str(self.registration["workerId"])
            if on_registered is not None:
                on_registered(self.registration)
            inbox: "queue.Queue[Any]" = queue.Queue()
            reader = threading.Thread(target=_read_events, args=(self.agent.worker_events(self.worker_id), inbox),
                                      name=f"agentd-worker-{self.worker_id}-events", daemon=True)
            reader.start()
            try:
                return self._loop(inbox)
            except KeyboardInterrupt:
                self._deregister()
                reader.join(timeout=2.0)
                raise
        finally:
            self.state.unlink()
            self._unshare_memory()
            self._states.close()
            self._serving = False

    def handle_event(self, event: str, data: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
        """Handles one event and returns its reply body (``None`` for an event without ``requestId``).

        ``serve`` posts the reply; tests may call this directly.
        """
        if not isinstance(data, Mapping) or "requestId" not in data:
            log.warning("ignoring event %r without a requestId", event)
            return None
        request_id = data["requestId"]
        if event == "run":
            return {"requestId": request_id, **self._run(data)}
        handler = {"allocate": self._allocate, "release": self._release, "stop": lambda _: None}.get(event)
        try:
            if handler is None:
                raise AgentError("ERR_BAD_REQUEST", f"unknown event {event!r}")
            result = handler(data)
        except AgentError as err:
            log.error("%s %s failed: %s", event, request_id, err)
            return {"requestId": request_id, **_failure(err.code, err.message)}
        except Exception as err:  # noqa: BLE001 - every failure is a reply; the worker keeps serving
            log.exception("%s %s failed", event, request_id)
            return {"requestId": request_id, **_failure("ERR_INTERNAL", f"{type(err).__name__}: {err}")}
        return {"requestId": request_id, "ok": True, **({"result": result} if result is not None else {})}

    # Events.

    def _allocate(self, data: Mapping[str, Any]) -> Dict[str, Any]:
        """Gives the released state memory again (contents undefined: the agent copies the state in) and says where."""
        self.state.reallocate()
        return {"tensors": self._share_memory()}

    def _release(self, data: Mapping[str, Any]) -> None:
        """Frees the state's memory: the agent has copied it out (or drops it) and let go of it."""
        self._unshare_memory()
        self.state.release()

    def _run(self, data: Mapping[str, Any]) -> Dict[str, Any]:
        name = data.get("name")
        handler = self._ops.get(name) if isinstance(name, str) else None
        if handler is None:
            return _failure("ERR_UNKNOWN_OPERATION", f"rank {self.rank} has no operation {name!r}")
        if self.state.released:
            return _failure("ERR_OPERATION_FAILED", f"rank {self.rank}'s state is released (no onload before {name!r})")
        started_at_ms = time.time() * 1000
        t0 = time.perf_counter()
        try:
            result = handler(data.get("args"))
            self.state.synchronize()  # the agent may copy the state out as soon as it has the reply
            self.state.check_bound()
            size = len(_result_json(name, result))
            if size > MAX_RESULT_BYTES:
                raise ValueError(f"the result of {name} is {size} bytes of JSON, at most {MAX_RESULT_BYTES}")
        except Exception as err:  # noqa: BLE001 - reported to the controller, and the worker keeps serving
            log.exception("operation %s (%s) failed", name, data.get("opId"))
            return _failure("ERR_OPERATION_FAILED", f"{type(err).__name__}: {err}")
        return {"ok": True, "result": result, "startedAtMs": started_at_ms,
                "durationMs": (time.perf_counter() - t0) * 1000}

    # Plumbing.

    def _loop(self, inbox: "queue.Queue[Any]") -> Optional[str]:
        while True:
            item = inbox.get()
            if isinstance(item, _StreamEnd):
                if item.error is not None:
                    raise item.error
                return None
            event, data = item
            reply = self.handle_event(event, data)
            if reply is not None:
                self._post_reply(reply)
            if event == "stop":
                return str(data.get("reason", "stopped")) if isinstance(data, Mapping) else "stopped"

    def _register(self) -> Dict[str, Any]:
        tensors = [{"name": t["name"], "key": e.key.text, "memory": t["memory"]}
                   for e, t in zip(self.state.entries, self._share_memory())]
        try:
            return self.agent.register_worker(self.job, self.rank, self.gpu, list(self._ops), tensors)
        except AgentError as err:
            if err.status is not None:  # the agent answered: it copies nothing more (without an answer, keep the memory)
                self._unshare_memory()
            raise

    def _share_memory(self) -> List[Dict[str, Any]]:
        """Where each state tensor lives, for the agent (which copies from and into it until the next release).

        CUDA state: the IPC reference counters ``_share_cuda_()`` takes are kept
        until :meth:`_unshare_memory`, so memory the agent may still copy is
        never handed to another allocation in the meantime.
        """
        self._unshare_memory()
        self._states.arenas = [self.state.arena] if self.state.arena is not None else []
        placement = self._states._place(self.state.keys(0))  # same package: the specs TorchStateClient sends
        if placement.staged:
            raise RuntimeError("a CPU state tensor is outside the shared-memory arena")
        self._shared = placement
        # No IPC event: the worker answers only once its devices finished the work queued on the state.
        return [{"name": e.name, "memory": {k: v for k, v in spec.to_json().items() if k != "event"}}
                for e, (_, spec) in zip(self.state.entries, placement.specs)]

    def _unshare_memory(self) -> None:
        if self._shared is not None:
            self._shared.release_ipc_counters()
            self._shared = None

    def _post_reply(self, reply: Dict[str, Any]) -> None:
        assert self.worker_id is not None
        try:
            self.agent.reply_to_worker_event(self.worker_id, reply)
        except AgentError as err:  # the stream ending (if the agent is gone) ends serve()
            log.error("could not reply to %s: %s", reply.get("requestId"), err)

    def _deregister(self) -> None:
        if self.worker_id is None:
            return
        try:
            self.agent.deregister_worker(self.worker_id)
        except AgentError as err:
            log.error("could not deregister worker %s: %s", self.worker_id, err)

    def _check_not_serving(self) -> None:
        if self._serving:
            raise RuntimeError("register state and operations before serve()")


@dataclass
class _StreamEnd:
    """The event stream ended: the agent closed it (``error`` None) or reading it failed."""

    error: Optional[BaseException] = None


def _read_events(events: Iterator[Tuple[str, Any]], inbox: "queue.Queue[Any]") -> None:
    """Moves events into ``inbox`` on a thread of its own, so a KeyboardInterrupt never closes the stream first."""
    try:
        for item in events:
            inbox.put(item)
    except BaseException as err:  # noqa: BLE001 - handed to serve() to raise
        inbox.put(_StreamEnd(err))
    else:
        inbox.put(_StreamEnd())


def _failure(code: str, message: str) -> Dict[str, Any]:
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS - 3] + "..."
    return {"ok": False, "error": {"code": code, "message": message}}


def _result_json(name: str, result: Any) -> bytes:
    """The result as the reply will carry it; ValueError when it is not JSON (NaN and infinities are not)."""
    try:
        return json.dumps(result, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as err:
        raise ValueError(f"the result of {name} is not JSON: {err}") from None


def _owner_slot(module: torch.nn.Module, name: str, table: str) -> Callable[[], Any]:
    """What ``module`` holds now under the dotted ``name`` in its submodule's ``_parameters`` or ``_buffers``."""
    owner_path, _, leaf = name.rpartition(".")
    owner = module.get_submodule(owner_path) if owner_path else module
    return lambda: getattr(owner, table).get(leaf)


def _optimizer_slot(optimizer: torch.optim.Optimizer, p: torch.Tensor, k: str) -> Callable[[], Any]:
    return lambda: optimizer.state[p].get(k) if p in optimizer.state else None


def _check_optimizer(optimizer: torch.optim.Optimizer, names: Mapping[int, str]) -> None:
    """The optimizer holds only the module's parameters, its state entries are tensors, and lazy state exists."""
    lazy = isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW))
    for group in optimizer.param_groups:
        momentum_sgd = isinstance(optimizer, torch.optim.SGD) and group.get("momentum", 0) != 0
        for p in group["params"]:
            if id(p) not in names:
                raise ValueError(f"the optimizer holds a parameter of shape {list(p.shape)} that is not in the module")
            state = optimizer.state[p] if p in optimizer.state else {}
            for k, value in state.items():
                if value is not None and not isinstance(value, torch.Tensor):
                    raise ValueError(f"optimizer state {k!r} of {names[id(p)]} is a {type(value).__name__}, not a tensor: "
                                     "only tensors can be moved and rolled back")
            if p.requires_grad and lazy and len(state) == 0:
                raise ValueError(f"{type(optimizer).__name__} has no state for {names[id(p)]} yet (it creates it at the "
                                 "first step): call init_optimizer_state(optimizer) before registering")
            if p.requires_grad and momentum_sgd and state.get("momentum_buffer") is None:
                raise ValueError(f"SGD has no momentum_buffer for {names[id(p)]} yet: register after one optimizer step")
