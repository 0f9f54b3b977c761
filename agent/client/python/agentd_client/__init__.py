"""Python client of agentd's local API (standard library only).

Workers talk to the agent on their own node over its unix socket::

    from multiprocessing.shared_memory import SharedMemory
    from agentd_client import AgentClient, OffloadItem, OnloadItem, ShmMemory, format_key

    agent = AgentClient()                       # $AGENTD_SOCKET or /run/agentd/agentd.sock
    key = format_key("job42/actor", "model.embed.weight", shape=[1024, 64], dtype="bf16", version=3)
    agent.offload([OffloadItem(key, ShmMemory.of(shm))])
    agent.onload([OnloadItem(key, ShmMemory.of(other_shm))])

Torch tensors (CPU through shared memory, CUDA through CUDA IPC) are in
:mod:`agentd_client.torch_support`, which imports torch; this package does not.
"""
from .client import AgentClient, KeyLike, OffloadItem, OnloadItem
from .errors import AgentError
from .keys import DTYPE_BYTES, TORCH_DTYPES, StateKey, format_key, key_dtype, parse_key
from .memory import CudaIpcMemory, MemorySpec, ShmMemory
from .schema import (AcquireGpuResult, Durability, GpuLockState, MaterializeResult, OffloadResult, OnloadResult,
                     ReleaseGpuResult, Residency, ResidencyKey, StoredTier)
from .transport import DEFAULT_SOCKET_PATH

__all__ = [
    "AcquireGpuResult", "AgentClient", "AgentError", "CudaIpcMemory", "DEFAULT_SOCKET_PATH", "DTYPE_BYTES",
    "Durability", "GpuLockState", "KeyLike", "MaterializeResult", "MemorySpec", "OffloadItem", "OffloadResult",
    "OnloadItem", "OnloadResult", "ReleaseGpuResult", "Residency", "ResidencyKey", "ShmMemory", "StateKey",
    "StoredTier", "TORCH_DTYPES", "format_key", "key_dtype", "parse_key",
]
