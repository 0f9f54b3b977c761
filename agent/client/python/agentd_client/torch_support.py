"""Torch tensors to and from the agent. Needs PyTorch; import it only where torch is installed::

    from agentd_client.torch_support import SharedTensorArena, TorchStateClient, tensor_key

How each tensor's bytes reach the agent (they never travel in JSON):

* CUDA tensors: by CUDA IPC. ``untyped_storage()._share_cuda_()`` gives the
  handle of the allocation behind the storage and the storage's byte offset in
  it; the tensor's own ``storage_offset()`` is added. The client synchronizes
  each device's current stream before the request, so work queued there on the
  tensors is complete (work on other streams is the caller's to finish); the
  agent copies on its own stream, after the IPC event when PyTorch recorded one.
  Once the agent has answered, the client gives back the IPC reference counter
  that ``_share_cuda_()`` took (see ``_Placement.ipc_lease``).
* CPU tensors allocated from a :class:`SharedTensorArena`: the agent reads or
  writes the arena's shared memory directly, no copy in this process.
* Other CPU tensors: copied through a staging shared-memory buffer the client
  owns (grown to the largest batch it has staged, unlinked by ``close()``).

Every tensor must be contiguous (the agent copies ``nbytes`` linear bytes) and
must stay alive, and unmodified for an offload, until the call returns.
"""
import ctypes
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from multiprocessing.shared_memory import SharedMemory
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

import torch

from .client import AgentClient, KeyLike, OffloadItem, OnloadItem
from .errors import AgentError
from .keys import TORCH_DTYPES, StateKey, key_dtype, parse_key
from .memory import CudaIpcMemory, MemorySpec, ShmMemory
from .schema import Durability, OffloadResult, OnloadResult

#: Byte alignment of tensors placed in shared memory (a cache line; enough for every dtype).
SHM_ALIGNMENT = 64
#: Smallest staging buffer (bytes): small batches do not each replace it.
_MIN_STAGING_BYTES = 1 << 20


def tensor_key(tensor: torch.Tensor, namespace: str, fqn: str, *, version: int, role: str = "param",
               offsets: Optional[Sequence[int]] = None) -> StateKey:
    """The canonical key of ``tensor`` as a chunk: its local shape and dtype.

    ``offsets`` are the chunk's global offsets (elements) in the full tensor;
    default zeros, i.e. the tensor is the whole thing. Data-parallel replicas
    holding the same chunk must derive the same key, which this does when
    they pass the same namespace/fqn/role/offsets/version.
    """
    shape = tuple(tensor.shape)
    return StateKey(namespace, fqn, role, tuple(offsets) if offsets is not None else (0,) * len(shape),
                    shape, key_dtype(tensor.dtype), version)


def state_dict_keys(state: Mapping[str, torch.Tensor], namespace: str, *, version: int,
                    role: str = "param") -> Dict[StateKey, torch.Tensor]:
    """Keys for a whole ``state_dict()`` (fqn = the entry's name, each tensor a whole chunk)."""
    return {tensor_key(t, namespace, name, version=version, role=role): t for name, t in state.items()}


class SharedTensorArena:
    """Named shared memory that CPU tensors are allocated from, so the agent reaches them with no staging copy.

    The arena creates and owns its :class:`SharedMemory`: ``close()`` unlinks
    the name and unmaps it. Tensors from :meth:`empty` view that memory; drop
    them before ``close()`` (it raises BufferError while any is alive). Space
    is handed out front to back and only reclaimed by closing the arena.
    """

    def __init__(self, nbytes: int, name: Optional[str] = None) -> None:
        self.shm = SharedMemory(name=name, create=True, size=nbytes)
        self._base = _buffer_address(self.shm)
        self._used = 0
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.shm.name

    @property
    def nbytes(self) -> int:
        return self.shm.size

    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised contiguous CPU tensor in the arena; MemoryError when the arena is full."""
        numel = 1
        for d in shape:
            numel *= int(d)
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        with self._lock:
            offset = _align(self._used)
            if offset + nbytes > self.shm.size:
                raise MemoryError(f"arena {self.name} has {self.shm.size - offset} of its {self.shm.size} bytes left, "
                                  f"{nbytes} asked for")
            self._used = offset + nbytes
        return _view(self.shm, offset, tuple(int(d) for d in shape), dtype)

    def locate(self, tensor: torch.Tensor) -> Optional[ShmMemory]:
        """Where ``tensor``'s bytes lie in the arena, or None when they are not (all) inside it."""
        if tensor.device.type != "cpu":
            return None
        start = tensor.data_ptr() - self._base
        end = start + tensor.numel() * tensor.element_size()
        return ShmMemory(self.name, start) if 0 <= start and end <= self.shm.size else None

    def close(self) -> None:
        """Unlinks the shared-memory name and unmaps it. Idempotent."""
        if self._base == 0:
            return
        try:
            self.shm.unlink()
        except FileNotFoundError:
            pass
        self.shm.close()
        self._base = 0

    def __enter__(self) -> "SharedTensorArena":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TorchStateClient:
    """Offloads and onloads torch tensors through an :class:`AgentClient`.

    Args:
        agent: the client of the node's agent.
        arenas: arenas whose tensors the agent reads and writes in place.
        device_map: the agent's GPU index for each of this process's CUDA
            device indices. Default: from ``CUDA_VISIBLE_DEVICES`` when it lists
            indices (``"2,3"`` maps cuda:0 to GPU 2), the same index when it
            is unset; pass it when ``CUDA_VISIBLE_DEVICES`` lists UUIDs.

    Calls are serialised per client (they share the staging buffer); use one
    client per thread for concurrent requests.
    """

    def __init__(self, agent: AgentClient, *, arenas: Iterable[SharedTensorArena] = (),
                 device_map: Optional[Mapping[int, int]] = None) -> None:
        self.agent = agent
        self.arenas: List[SharedTensorArena] = list(arenas)
        self._device_map = dict(device_map) if device_map is not None else None
        self._staging: Optional[SharedMemory] = None
        self._lock = threading.Lock()

    @property
    def staging_bytes(self) -> int:
        """Bytes of shared memory this client holds for staging (0 until a tensor needed staging)."""
        return self._staging.size if self._staging is not None else 0

    def offload(self, tensors: Mapping[KeyLike, torch.Tensor], durability: Durability = "memory",
                verify: bool = False) -> List[OffloadResult]:
        """Stores every tensor under its key as one all-or-nothing batch (see :meth:`AgentClient.offload`).

        Each key's shape and dtype must match its tensor (ERR_SIZE_MISMATCH
        otherwise, raised before anything is sent). Returns when the agent
        holds every byte; the tensors may be changed or freed afterwards.
        """
        with self._lock:
            placement = self._place(tensors)
            with torch.no_grad():
                for offset, tensor in placement.staged:
                    self._staging_view(offset, tensor).copy_(tensor)
            with placement.ipc_lease():
                return self.agent.offload([OffloadItem(k, spec, verify) for k, spec in placement.specs], durability)

    def onload(self, tensors: Mapping[KeyLike, torch.Tensor]) -> List[OnloadResult]:
        """Fills every tensor with its key's stored bytes (see :meth:`AgentClient.onload`); the tensors are written in place."""
        with self._lock:
            placement = self._place(tensors)
            with placement.ipc_lease():
                results = self.agent.onload([OnloadItem(k, spec) for k, spec in placement.specs])
            with torch.no_grad():
                for offset, tensor in placement.staged:
                    tensor.copy_(self._staging_view(offset, tensor))
            return results

    def pull_shard(self, model: str, *, tp: int, rank: int, preset: str = "llama", version: "int | str" = "latest",
                   device: "str | torch.device" = "cpu", **pull: object) -> Dict[str, torch.Tensor]:
        """Pulls one tensor-parallel rank's shard of ``model`` through the agent into torch tensors on ``device``.

        The agent pulls the rank's slices (:meth:`AgentClient.weights_pull`;
        ``pull`` passes ``from_address``, ``heads``, ``kv_heads``, ``engine``,
        ...), then each is onloaded into a tensor of the engine parameter's
        shape: where the vocab is padded, the rows past the real ones are
        zeros. Returns the tensors by their names in the version.
        """
        result = self.agent.weights_pull(model, version=version, preset=preset, tp=tp, rank=rank, **pull)  # type: ignore[arg-type]
        padded = result.get("paddedShapes") or {}
        shard: Dict[str, torch.Tensor] = {}
        targets: Dict[KeyLike, torch.Tensor] = {}
        for key_text, name in zip(result["keys"], result["names"]):
            key = parse_key(key_text)
            shape = padded.get(key_text, list(key.shape))
            param = torch.zeros(shape, dtype=_torch_dtype(key.dtype), device=device)
            shard[name] = param
            targets[key] = param.narrow(0, 0, key.shape[0]) if key_text in padded else param
        for key_text, shape in padded.items():
            if key_text not in result["keys"]:  # a rank whose vocab part is all padding: zeros only
                key = parse_key(key_text)
                shard[key.fqn] = torch.zeros(shape, dtype=_torch_dtype(key.dtype), device=device)
        if targets:
            self.onload(targets)
        return shard

    def close(self) -> None:
        """Unlinks and unmaps the staging buffer (arenas stay open: their owner closes them). Idempotent."""
        with self._lock:
            if self._staging is not None:
                self._staging.unlink()
                self._staging.close()
                self._staging = None

    def __enter__(self) -> "TorchStateClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _place(self, tensors: Mapping[KeyLike, torch.Tensor]) -> "_Placement":
        """Where the agent finds each tensor: CUDA IPC, an arena, or (for other CPU tensors) the staging buffer."""
        placed: List[Tuple[str, Optional[MemorySpec], int]] = []
        placement = _Placement()
        cuda_devices: Set[torch.device] = set()
        staging_end = 0
        for key, tensor in tensors.items():
            parsed = key if isinstance(key, StateKey) else parse_key(key)
            _check_matches(parsed, tensor)
            spec: Optional[MemorySpec] = None
            offset = 0
            if tensor.device.type == "cuda":
                spec = self._cuda_memory(tensor, placement)
                cuda_devices.add(tensor.device)
            elif tensor.device.type != "cpu":
                raise AgentError("ERR_BAD_REQUEST", f"{parsed.text}: tensors on {tensor.device.type} are not supported (cpu or cuda)")
            else:
                spec = next((s for s in (a.locate(tensor) for a in self.arenas) if s is not None), None)
                if spec is None:
                    offset = _align(staging_end)
                    staging_end = offset + parsed.nbytes
                    placement.staged.append((offset, tensor))
            placed.append((parsed.text, spec, offset))
        # Make work queued on the current streams (writes to, or reads of, these tensors) complete before the
        # agent's copy; the IPC event PyTorch hands over covers the same stream.
        for device in cuda_devices:
            torch.cuda.current_stream(device).synchronize()
        staging = self._ensure_staging(staging_end) if placement.staged else ""
        placement.specs = [(key, spec if spec is not None else ShmMemory(staging, offset)) for key, spec, offset in placed]
        return placement

    def _ensure_staging(self, nbytes: int) -> str:
        """The staging buffer's name, replacing it by a larger one first when it is smaller than ``nbytes``."""
        if self._staging is None or self._staging.size < nbytes:
            if self._staging is not None:
                self._staging.unlink()
                self._staging.close()
                self._staging = None
            self._staging = SharedMemory(create=True, size=max(nbytes, _MIN_STAGING_BYTES))
        return self._staging.name

    def _staging_view(self, offset: int, like: torch.Tensor) -> torch.Tensor:
        assert self._staging is not None
        return _view(self._staging, offset, tuple(like.shape), like.dtype)

    def _cuda_memory(self, tensor: torch.Tensor, placement: "_Placement") -> CudaIpcMemory:
        storage = tensor.untyped_storage()
        shared = placement.shared_storages.get(storage.data_ptr())
        if shared is None:  # one _share_cuda_() per storage: a worker's state shares one
            (device, handle, _storage_bytes, storage_offset_bytes, ref_counter_handle, ref_counter_offset,
             event_handle, event_sync_required) = storage._share_cuda_()
            placement.ipc_counters.append((ref_counter_handle, int(ref_counter_offset)))
            shared = CudaIpcMemory(
                device=self._agent_device(int(device)),
                handle=bytes(handle),
                offset=int(storage_offset_bytes),
                event=bytes(event_handle) if event_sync_required else None,
            )
            placement.shared_storages[storage.data_ptr()] = shared
        return replace(shared, offset=shared.offset + tensor.storage_offset() * tensor.element_size())

    def _agent_device(self, index: int) -> int:
        if self._device_map is not None:
            if index not in self._device_map:
                raise AgentError("ERR_BAD_REQUEST", f"device_map has no entry for cuda:{index}")
            return self._device_map[index]
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        if visible == "":
            return index
        entries = [e.strip() for e in visible.split(",")]
        if index >= len(entries) or not entries[index].isdigit():
            raise AgentError("ERR_BAD_REQUEST", f"cannot tell the agent's GPU index for cuda:{index} from "
                                                f"CUDA_VISIBLE_DEVICES={visible!r}: pass device_map")
        return int(entries[index])


@dataclass
class _Placement:
    """One batch's memory specs, the tensors copied through staging, and the CUDA IPC ref counters it took."""

    specs: List[Tuple[str, MemorySpec]] = field(default_factory=list)
    #: (offset in the staging buffer, tensor) of CPU tensors outside every arena.
    staged: List[Tuple[int, torch.Tensor]] = field(default_factory=list)
    #: (ref counter file, offset) of each ``_share_cuda_()`` call.
    ipc_counters: List[Tuple[bytes, int]] = field(default_factory=list)
    #: The IPC memory of each storage shared so far (by its data pointer), at the storage's start.
    shared_storages: Dict[int, CudaIpcMemory] = field(default_factory=dict)

    @contextmanager
    def ipc_lease(self) -> Iterator[None]:
        """Gives back the IPC ref counters once the agent has answered.

        Every ``_share_cuda_()`` sets a counter that PyTorch expects the
        consumer to decrement when it is done; until then the producer keeps
        the memory of a freed tensor in limbo. The agent is done when it
        answers (success or an error), so the counters are released then. When
        no answer came (ERR_AGENT_UNREACHABLE, ERR_CONNECTION_LOST: status
        None) the agent may still be copying:
        the counters are kept, holding the memory rather than risking a copy
        from freed memory.
        """
        try:
            yield
        except AgentError as err:
            if err.status is not None:
                self.release_ipc_counters()
            raise
        self.release_ipc_counters()

    def release_ipc_counters(self) -> None:
        """Gives back every counter taken (once the agent no longer copies from or into the memory)."""

        for handle, offset in self.ipc_counters:
            torch.UntypedStorage._release_ipc_counter(handle, offset)
        self.ipc_counters.clear()


def _torch_dtype(dtype: str) -> torch.dtype:
    """The torch dtype of a key dtype (the inverse of keys.TORCH_DTYPES)."""
    for name, key_name in TORCH_DTYPES.items():
        if key_name == dtype:
            return getattr(torch, name.split(".", 1)[1])
    raise AgentError("ERR_KEY_INVALID", f"key dtype {dtype} has no torch dtype")


def _check_matches(key: StateKey, tensor: torch.Tensor) -> None:
    """The key must describe the tensor exactly, and its bytes must be one linear run."""
    shape, dtype = tuple(tensor.shape), key_dtype(tensor.dtype)
    if key.shape != shape or key.dtype != dtype:
        nbytes = tensor.numel() * tensor.element_size()
        code = "ERR_SIZE_MISMATCH" if nbytes != key.nbytes else "ERR_BAD_REQUEST"
        raise AgentError(code, f"{key.text} names {list(key.shape)} {key.dtype} ({key.nbytes} bytes) but the tensor is "
                               f"{list(shape)} {dtype} ({nbytes} bytes)")
    if not tensor.is_contiguous():
        raise AgentError("ERR_BAD_REQUEST", f"{key.text}: the tensor is not contiguous; pass tensor.contiguous() "
                                            "(for onload, a contiguous tensor you then copy from)")


def _align(offset: int) -> int:
    return -(-offset // SHM_ALIGNMENT) * SHM_ALIGNMENT


def _buffer_address(shm: SharedMemory) -> int:
    """The address the shared memory is mapped at in this process."""
    anchor = ctypes.c_char.from_buffer(shm.buf)
    try:
        return ctypes.addressof(anchor)
    finally:
        del anchor  # releases the buffer export, so shm.close() stays possible


def _view(shm: SharedMemory, offset: int, shape: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A tensor viewing ``shape``/``dtype`` at byte ``offset`` of ``shm`` (it holds the mapping while alive)."""
    numel = 1
    for d in shape:
        numel *= d
    if numel == 0:
        raise ValueError("tensors in shared memory need at least one element")
    return torch.frombuffer(shm.buf, dtype=dtype, count=numel, offset=offset).view(shape)
