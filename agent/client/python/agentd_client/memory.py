"""Client memory a request names: the bytes never travel in JSON.

The agent copies from (offload) or into (onload) memory the caller owns:

* :class:`ShmMemory`: a POSIX shared-memory object (``/dev/shm/<name>``, what
  :class:`multiprocessing.shared_memory.SharedMemory` creates) plus a byte offset.
* :class:`CudaIpcMemory`: a CUDA IPC handle of a device allocation plus a byte
  offset into it (and optionally an IPC event the agent waits for first).

Ownership: the caller creates the memory, keeps it alive (and, for an
offload, unchanged) until the call returns, and closes and unlinks it when it
is done with it. The agent touches the bytes only while a request that names
them is in progress and stores its own copy: once ``offload`` or ``onload``
returns, the caller may reuse, overwrite or free the memory at once.
"""
import base64
from dataclasses import dataclass
from multiprocessing.shared_memory import SharedMemory
from typing import Any, Dict, Optional, Union

#: Sizes of a ``cudaIpcMemHandle_t`` (64) and of PyTorch's ``_share_cuda_()`` form (66).
CUDA_IPC_HANDLE_BYTES = (64, 66)
#: Size of a ``cudaIpcEventHandle_t``.
CUDA_IPC_EVENT_BYTES = 64


def _check_offset(offset: object) -> None:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be a non-negative int (bytes), got {offset!r}")


@dataclass(frozen=True)
class ShmMemory:
    """The bytes at ``offset`` of the shared-memory object ``/dev/shm/<name>``.

    ``name`` is the object's name with or without its leading ``/``
    (``SharedMemory.name`` gives it without). The request's byte count comes
    from the key; ``offset + nbytes`` must lie inside the object or the agent
    answers ``ERR_SIZE_MISMATCH``; a missing object is ``ERR_SOURCE_NOT_FOUND``.
    """

    name: str
    offset: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or self.name in ("", "/"):
            raise ValueError(f"name must be a shared-memory object name, got {self.name!r}")
        _check_offset(self.offset)

    @classmethod
    def of(cls, shm: SharedMemory, offset: int = 0) -> "ShmMemory":
        """Names ``offset`` bytes into ``shm``; the caller still owns ``shm`` (close and unlink it yourself)."""
        return cls(shm.name, offset)

    def to_json(self) -> Dict[str, Any]:
        return {"kind": "shm", "name": self.name, "offset": self.offset}


@dataclass(frozen=True)
class CudaIpcMemory:
    """The bytes at ``offset`` of the device allocation behind a CUDA IPC handle.

    ``device`` is the GPU's index as the agent numbers them (all GPUs of the
    node, not the caller's ``CUDA_VISIBLE_DEVICES`` view). ``handle`` is the
    64-byte ``cudaIpcMemHandle_t`` of the allocation's base, or PyTorch's 66-byte
    form from ``untyped_storage()._share_cuda_()``; ``offset`` counts bytes from
    that base. ``event``, a ``cudaIpcEventHandle_t`` the producer recorded after
    its last write, makes the agent's copy wait for that write.
    """

    device: int
    handle: bytes
    offset: int
    event: Optional[bytes] = None

    def __post_init__(self) -> None:
        if isinstance(self.device, bool) or not isinstance(self.device, int) or self.device < 0:
            raise ValueError(f"device must be a non-negative int, got {self.device!r}")
        if len(self.handle) not in CUDA_IPC_HANDLE_BYTES:
            raise ValueError(f"a CUDA IPC handle has 64 or 66 bytes, got {len(self.handle)}")
        if self.event is not None and len(self.event) != CUDA_IPC_EVENT_BYTES:
            raise ValueError(f"a CUDA IPC event handle has {CUDA_IPC_EVENT_BYTES} bytes, got {len(self.event)}")
        _check_offset(self.offset)

    def to_json(self) -> Dict[str, Any]:
        spec: Dict[str, Any] = {"kind": "cuda-ipc", "device": self.device,
                                "handle": base64.b64encode(bytes(self.handle)).decode("ascii"), "offset": self.offset}
        if self.event is not None:
            spec["event"] = base64.b64encode(bytes(self.event)).decode("ascii")
        return spec


MemorySpec = Union[ShmMemory, CudaIpcMemory]
