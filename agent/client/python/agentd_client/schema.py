"""Shapes of the state API's answers, as the daemon sends them.

These are ``TypedDict`` s: at run time plain dicts parsed from JSON, with the
wire's field names (camelCase) unchanged, so what you read here is what
``GET /v1/openapi.json``, ``agentctl inspect residency --json`` and
``agent/api/routes/state.ts`` say. Byte counts are bytes, times are ms.
"""
from typing import List, Literal, Optional, TypedDict

#: Where the agent holds a key: its pinned host pool or its NVMe tier.
StoredTier = Literal["host", "nvme"]
#: ``"memory"``: answer once the bytes are in the host pool; ``"nvme"``: once they are on NVMe and fsynced.
Durability = Literal["memory", "nvme"]


class _OffloadResultFields(TypedDict):
    key: str
    tier: StoredTier
    #: True when the key was already stored (or being stored) by another writer: no copy was made.
    deduplicated: bool
    #: On NVMe, so it survives an agent restart.
    durable: bool


class OffloadResult(_OffloadResultFields, total=False):
    #: Only with ``verify``: whether this replica's bytes matched the stored copy.
    verified: bool


class OnloadResult(TypedDict):
    key: str
    fromTier: StoredTier


class TierUsage(TypedDict):
    capacityBytes: int
    usedBytes: int


class Tiers(TypedDict):
    device: TierUsage
    host: TierUsage
    nvme: TierUsage


class NamespaceUsage(TypedDict):
    namespace: str
    keys: int
    #: Every replica's offload counted.
    logicalBytes: int
    #: What is actually held.
    storedBytes: int
    quotaBytes: Optional[int]


class HostPoolUsage(TypedDict):
    freeBytes: int
    largestFreeBytes: int
    fragmentation: float


class StateCounters(TypedDict):
    """Totals since the agent started."""
    offloadCopies: int
    deduplicated: int
    spilled: int
    promoted: int
    onloadCopies: int
    #: Keys stored in place in an adopted shared-memory object (a weights region publish): no copy.
    shmAdopted: int
    #: Bytes read from NVMe by range without promoting the key (weights served from NVMe).
    rangeReadBytes: int


class ShmUsage(TypedDict):
    """Adopted shared-memory mappings: host-tier bytes outside the pool (zero-copy weight publishes)."""
    regions: int
    bytes: int


class _ResidencyKeyFields(TypedDict):
    key: str
    bytes: int
    tier: StoredTier
    replicas: int
    lastUseMs: int
    durable: bool


class ResidencyKey(_ResidencyKeyFields, total=False):
    #: The adopted shared-memory object holding the host copy (outside the pool); absent otherwise.
    region: str


class KeyCounts(TypedDict):
    host: int
    nvme: int


class _ResidencyFields(TypedDict):
    tiers: Tiers
    #: The selected keys' totals (every replica counted / held once).
    logicalBytes: int
    storedBytes: int
    #: logicalBytes / storedBytes; None when no key is selected.
    dedupRatio: Optional[float]
    #: Selected keys by tier.
    keyCounts: KeyCounts
    namespaces: List[NamespaceUsage]
    hostPool: HostPoolUsage
    shm: ShmUsage
    counters: StateCounters


class Residency(_ResidencyFields, total=False):
    #: One page of the selected keys in key order; absent with ``summary=True``.
    keys: List[ResidencyKey]
    #: The ``cursor`` of the next page; None when no key follows; absent with ``summary=True``.
    nextCursor: Optional[str]


class MaterializeResult(TypedDict):
    #: Absolute paths of the safetensors files written.
    files: List[str]
    #: The ``<stem>.safetensors.index.json`` file when the output was split, else None.
    index: Optional[str]
    tensors: int
    bytes: int


class AcquireGpuResult(TypedDict):
    gpu: int
    holder: str
    #: Re-entrancy depth after this acquire (1 on a fresh grant).
    depth: int
    #: Requests of other holders still queued for this GPU.
    waiting: int


class ReleaseGpuResult(TypedDict):
    gpu: int
    holder: str
    #: Depth left; 0 = released (the next waiter, if any, has been granted).
    depth: int


class GpuLockWaiter(TypedDict):
    holder: str
    #: The process that sent the queued request.
    pid: int
    #: When it was queued, ms since the epoch.
    sinceMs: int


class GpuLockState(TypedDict):
    gpu: int
    #: None when free.
    holder: Optional[str]
    #: Running processes tied to the holder.
    pids: List[int]
    depth: int
    #: When the current hold was granted, ms since the epoch.
    heldSinceMs: Optional[int]
    #: In grant order.
    waiters: List[GpuLockWaiter]


class LocksBody(TypedDict):
    gpus: List[GpuLockState]
