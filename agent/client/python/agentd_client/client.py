"""AgentClient: the StateManager API and the device lock of the node's agent, from a Python worker.

Every method is one HTTP request on the agent's unix socket and blocks until
the agent answers; ``offload`` and ``onload`` answer only when every copy is
complete (synchronous client semantics, PlexRL §5.3), so the caller may reuse
or free its memory as soon as they return. A failed request raises
:class:`~agentd_client.errors.AgentError` with the daemon's code, and a failed
batch changes nothing on the agent. An ``AgentClient`` holds no connection
between calls: share one between threads freely.
"""
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union
from urllib.parse import quote

from .errors import AgentError
from .keys import StateKey
from .memory import MemorySpec
from .schema import (AcquireGpuResult, Durability, GpuLockState, LocksBody, MaterializeResult, OffloadResult, OnloadResult,
                     ReleaseGpuResult, Residency, ResidencyKey, StoredTier)
from .transport import DEFAULT_SOCKET_PATH, UnixSocketTransport

#: A key as its canonical text or a :class:`StateKey`.
KeyLike = Union[str, StateKey]


@dataclass(frozen=True)
class OffloadItem:
    """Store ``key`` from ``source``: ``key.nbytes`` bytes at the source's offset.

    With ``verify`` a replica of an already stored key is checksummed against
    the stored copy and the result says ``verified`` (for debugging clients
    that suspect their replicas differ; it costs a read of the source).
    """

    key: KeyLike
    source: MemorySpec
    verify: bool = False

    def to_json(self) -> Any:
        item = {"key": str(self.key), "source": self.source.to_json()}
        if self.verify:
            item["verify"] = True
        return item


@dataclass(frozen=True)
class OnloadItem:
    """Copy the stored ``key`` into ``target``: ``key.nbytes`` bytes at the target's offset."""

    key: KeyLike
    target: MemorySpec

    def to_json(self) -> Any:
        return {"key": str(self.key), "target": self.target.to_json()}


class AgentClient:
    """The local API of ``agentd`` over its unix socket.

    Args:
        socket_path: the agent's socket; default ``$AGENTD_SOCKET``, else
            ``/run/agentd/agentd.sock`` (as for ``agentctl``).
        timeout_s: bound on each blocking socket operation in seconds (a large
            offload is one long wait for the answer); ``None`` waits forever.
        starting_wait_s: how long a request answered ``ERR_STARTING`` (an
            agent that just restarted and is still recovering its state; it
            did nothing) is asked again before that error is raised; 0 raises
            it at once.
    """

    def __init__(self, socket_path: Optional[str] = None, timeout_s: Optional[float] = 300.0, starting_wait_s: float = 120.0) -> None:
        path = socket_path if socket_path is not None else os.environ.get("AGENTD_SOCKET", DEFAULT_SOCKET_PATH)
        self._transport = UnixSocketTransport(path, timeout_s)
        self._starting_wait_s = starting_wait_s

    @property
    def socket_path(self) -> str:
        return self._transport.socket_path

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """Any route of the local API: the parsed JSON of a 2xx answer, AgentError otherwise.

        While the agent starts (``ERR_STARTING``: nothing was done) the request
        is sent again, every 50 ms growing to 1 s, for up to ``starting_wait_s``.
        """
        deadline = time.monotonic() + self._starting_wait_s
        pause = 0.05
        while True:
            try:
                return self._transport.request(method, path, body)
            except AgentError as err:
                if err.code != "ERR_STARTING" or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(1.0, pause * 2)

    def health(self) -> bool:
        """True when the agent answers ``GET /healthz`` (it started), False while it is
        starting; AgentError ``ERR_AGENT_UNREACHABLE`` when no agent answers. Never waits."""
        try:
            return bool(self._transport.request("GET", "/healthz", None).get("ok"))
        except AgentError as err:
            if err.code == "ERR_STARTING":
                return False
            raise

    def offload(self, items: Iterable[OffloadItem], durability: Durability = "memory") -> List[OffloadResult]:
        """Stores every item's bytes in the agent, as one all-or-nothing batch; one result per item, in order.

        Returns once every copy is complete; with ``durability="nvme"`` once
        the bytes are also on NVMe and fsynced (they survive an agent restart).
        A key already stored, or being stored by a concurrent writer (another
        data-parallel replica), is not copied again: its result says
        ``deduplicated``. Errors: ``ERR_KEY_INVALID``, ``ERR_SOURCE_NOT_FOUND``,
        ``ERR_SIZE_MISMATCH`` (the memory is smaller than the key's size),
        ``ERR_QUOTA_EXCEEDED``, ``ERR_TIER_FULL`` (host pool and NVMe both full),
        ``ERR_CUDA_UNAVAILABLE``; ``ERR_BAD_REQUEST`` for more than 65,536 items
        (a batch of that many is taken whole, whatever its size in bytes).
        """
        body = {"tensors": [item.to_json() for item in items], "durability": durability}
        return self.call("POST", "/v1/state/offload", body)["results"]

    def onload(self, items: Iterable[OnloadItem]) -> List[OnloadResult]:
        """Copies every item's stored bytes into its target; one result per item, in order.

        Returns once the bytes are in the targets. ``fromTier`` says where each
        key was (an NVMe key is read back through the host pool and stays
        there). Errors: ``ERR_KEY_NOT_FOUND``, ``ERR_SOURCE_NOT_FOUND`` (the
        target does not exist), ``ERR_SIZE_MISMATCH``, ``ERR_DATA_CORRUPT``.
        """
        body = {"tensors": [item.to_json() for item in items]}
        return self.call("POST", "/v1/state/onload", body)["results"]

    def prefetch(self, *, keys: Optional[Iterable[KeyLike]] = None, prefix: Optional[str] = None) -> int:
        """Starts reading NVMe-only keys back into the host pool and returns at once.

        Give exactly one of ``keys`` or ``prefix`` (``""`` selects every key).
        Returns how many keys were scheduled (keys already in host memory are not).
        """
        return int(self.call("POST", "/v1/state/prefetch", _selector(keys, prefix))["scheduled"])

    def drop(self, *, keys: Optional[Iterable[KeyLike]] = None, prefix: Optional[str] = None) -> int:
        """Removes keys from every tier; returns how many existed. Exactly one of ``keys`` or ``prefix``."""
        return int(self.call("POST", "/v1/state/drop", _selector(keys, prefix))["dropped"])

    def hints(self, upcoming: Mapping[str, int]) -> None:
        """Tells the agent what is needed next: ``{prefix: in_ms}``, ms from now.

        Replaces earlier hints. Keys needed soonest are spilled last, and keys
        needed within the agent's prefetch horizon are read back from NVMe now.
        An empty mapping clears the hints.
        """
        self.call("POST", "/v1/state/hints", {"next": [{"prefix": p, "inMs": int(ms)} for p, ms in upcoming.items()]})

    def materialize(self, prefix: str, version: int, path: str, *, max_file_bytes: Optional[int] = None,
                    overwrite: bool = False) -> MaterializeResult:
        """Has the agent write the keys under ``prefix`` at ``version`` to safetensors at ``path``.

        ``path`` is absolute and on the agent's node (the agent writes it, as
        its own user). Chunks of one tensor (keys differing only in offsets)
        are assembled and must tile it exactly; ``grad`` and ``optim.*`` roles
        are named ``<fqn>#<role>``. Above ``max_file_bytes`` (agent default
        5 GiB) the output is split with a Hugging Face style index. An
        existing file is an error unless ``overwrite``. Works from host and
        NVMe, no GPU needed.
        """
        body: Any = {"prefix": prefix, "version": version, "path": path}
        if max_file_bytes is not None:
            body["maxFileBytes"] = max_file_bytes
        if overwrite:
            body["overwrite"] = True
        return self.call("POST", "/v1/state/materialize", body)

    def weights_pull(self, model: str, *, version: Union[int, str] = "latest", from_address: Optional[str] = None,
                     preset: Optional[str] = None, tp: Optional[int] = None, rank: Optional[int] = None,
                     heads: Optional[int] = None, kv_heads: Optional[int] = None,
                     intermediate_size: Optional[int] = None, engine: Optional[str] = None,
                     streams: Optional[int] = None) -> Dict[str, Any]:
        """Has the agent pull a version of ``model`` (or, with ``preset``, ``tp`` and ``rank``, that rank's slices).

        Without ``from_address`` the agent pulls from a holder it finds in its
        mesh. The slices become keys on this agent (``keys``, with ``names``
        the tensor each holds); ``paddedShapes`` gives the engine parameter's
        shape where the vocab is padded. Head counts default to the version's
        metadata (``agentctl weights publish --config``).
        """
        body: Dict[str, Any] = {"model": model, "version": version, **_given({"from": from_address, "streams": streams})}
        if preset is not None:
            if tp is None or rank is None:
                raise AgentError("ERR_BAD_REQUEST", "a preset needs tp and rank")
            body["layout"] = {"tp": tp, "rank": rank, "preset": preset, **_given(
                {"heads": heads, "kvHeads": kv_heads, "intermediateSize": intermediate_size, "engine": engine})}
        return self.call("POST", "/v1/weights/pull", body)

    def residency(self, prefix: Optional[str] = None, *, namespace: Optional[str] = None, job: Optional[str] = None,
                  tier: Optional[StoredTier] = None, limit: Optional[int] = None, cursor: Optional[str] = None,
                  summary: bool = False) -> Residency:
        """Tier usage, dedup and fragmentation, per-namespace totals of the selected keys, and one page of them.

        The filters select keys whose text starts with ``prefix``, of exactly
        ``namespace``, of the namespace ``job`` and those under it, on
        ``tier``; the agent applies them. ``keys`` is one page in key order:
        ``limit`` keys (default 1000, at most 2000) after ``cursor`` (the
        ``nextCursor`` of the previous page; ``None`` at the end). With
        ``summary=True`` the answer has the totals only (no ``keys``), which
        the agent computes without walking the keys. :meth:`residency_keys`
        walks every page.
        """
        params: Dict[str, Any] = {"prefix": prefix, "namespace": namespace, "job": job, "tier": tier, "limit": limit, "cursor": cursor}
        if summary:
            params["summary"] = "true"
        query = "&".join(f"{name}={quote(str(value), safe='')}" for name, value in params.items() if value is not None)
        return self.call("GET", "/v1/state/residency" + ("?" + query if query else ""))

    def residency_keys(self, prefix: Optional[str] = None, *, namespace: Optional[str] = None, job: Optional[str] = None,
                       tier: Optional[StoredTier] = None, page_keys: int = 2000) -> Iterator[ResidencyKey]:
        """Every selected key in key order (filters as :meth:`residency`), fetched ``page_keys`` at a time.

        Keys stored or dropped meanwhile may or may not appear; a key stored
        throughout appears exactly once.
        """
        cursor: Optional[str] = None
        while True:
            page = self.residency(prefix, namespace=namespace, job=job, tier=tier, limit=page_keys, cursor=cursor)
            yield from page.get("keys", [])
            cursor = page.get("nextCursor")
            if cursor is None:
                return

    def acquire_gpu(self, gpu: int, *, holder: Optional[str] = None, timeout_ms: Optional[int] = None) -> AcquireGpuResult:
        """Takes GPU ``gpu``'s device lock (RLinf §3.3); blocks until granted.

        FIFO, re-entrant for its holder (every acquire needs a release). The
        holder is this process (``"pid:<pid>"``) unless ``holder`` names one
        shared by several processes; a holder whose processes have all exited
        loses its locks. ``timeout_ms`` gives up with ``ERR_LOCK_TIMEOUT``
        (423); 0 takes the lock only if it is free now. While holding, watch
        :meth:`gpu_lock_events`: on a ``waiter`` event offload and release.
        """
        body: Dict[str, Any] = {}
        if holder is not None:
            body["holder"] = holder
        if timeout_ms is not None:
            body["timeoutMs"] = timeout_ms
        # The answer comes when the lock is granted, which may take any time: no socket timeout.
        return self._transport.request("POST", f"/v1/locks/gpu/{int(gpu)}/acquire", body, timeout_s=None)

    def release_gpu(self, gpu: int, *, holder: Optional[str] = None) -> ReleaseGpuResult:
        """Releases one level of the lock; ``depth`` 0 means released. ``ERR_LOCK_NOT_HELD`` (409) from a non-holder."""
        return self.call("POST", f"/v1/locks/gpu/{int(gpu)}/release", {"holder": holder} if holder is not None else {})

    @contextmanager
    def gpu_lock(self, gpu: int, *, holder: Optional[str] = None, timeout_ms: Optional[int] = None) -> Iterator[AcquireGpuResult]:
        """``with agent.gpu_lock(0):`` holds GPU 0's lock for the block and releases it however the block ends."""
        granted = self.acquire_gpu(gpu, holder=holder, timeout_ms=timeout_ms)
        try:
            yield granted
        finally:
            self.release_gpu(gpu, holder=holder)

    def locks(self) -> List[GpuLockState]:
        """Every GPU's device lock: holder, its processes, depth, since when, waiters in grant order."""
        body: LocksBody = self.call("GET", "/v1/locks")
        return body["gpus"]

    def gpu_lock_events(self, gpu: int, *, holder: Optional[str] = None) -> Iterator[Tuple[str, Dict[str, Any]]]:
        """The holder's events for GPU ``gpu``, as ``(type, data)``, until the agent closes the stream.

        First ``("state", <GpuLockState>)``; then for the holder (default this
        process): ``waiter`` (someone queued behind it: offload and release;
        sent at once if it already has waiters), ``granted``, ``released``
        (``reason``: released, holder-exited or stopped). Blocks between
        events, so read it on its own thread; close the iterator to stop.
        """
        query = "" if holder is None else "?holder=" + quote(holder, safe="")
        return self._transport.events(f"/v1/locks/gpu/{int(gpu)}/events{query}")

    # Reward service (agent/reward/): trainers submit and collect, supervised workers fetch and complete.

    def reward_batch_start(self, task: str, batch: int, size: int) -> Dict[str, Any]:
        """Batch-start hint: batch ``batch`` of ``task`` starts now with ``size`` requests (the leader scales for it)."""
        return self.call("POST", "/v1/reward/batches", {"task": task, "batch": batch, "size": size})

    def reward_submit(self, task: str, batch: int, request_id: str, payload: Any, *, batch_size: Optional[int] = None) -> Dict[str, Any]:
        """Submits a reward request; returns ``{requestId, duplicate}`` once the leader holds it.

        Idempotent by ``request_id``: submitting it again (after a timeout, or to
        be sure) answers ``duplicate: true``; other content under the same id is
        ``ERR_REWARD_CONFLICT``.
        """
        body: Dict[str, Any] = {"task": task, "batch": batch, "requestId": request_id, "payload": payload}
        if batch_size is not None:
            body["batchSize"] = batch_size
        return self.call("POST", "/v1/reward/requests", body)

    def reward_result(self, request_id: str, *, wait_ms: int = 0) -> Dict[str, Any]:
        """``{state: "pending"}`` or ``{state: "done", result: {status, reward, ...}}``, waiting up to ``wait_ms`` (at most 20000)."""
        return self._transport.request("GET", f"/v1/reward/requests/{quote(request_id, safe='')}?waitMs={int(wait_ms)}",
                                       timeout_s=None if wait_ms <= 0 else wait_ms / 1000 + 30)

    def reward_cancel(self, task: str, batch: int, request_ids: Optional[List[str]] = None) -> Dict[str, Any]:
        """Cancels batch ``batch`` of ``task`` (every request not done yet; the batch ends) or only ``request_ids``.

        Cancelled requests end with ``status: "cancelled"`` and the timeout
        reward. Returns ``{cancelled, finished, unknown}`` (ids): finished ones
        had a result already and keep it.
        """
        body: Dict[str, Any] = {"task": task, "batch": batch}
        if request_ids is not None:
            body["requestIds"] = list(request_ids)
        return self.call("POST", "/v1/reward/cancel", body)

    def reward_status(self) -> Dict[str, Any]:
        """Tasks, batches in flight, queue lengths per stage, workers per stage per node (from the leader)."""
        return self.call("GET", "/v1/reward/status")

    def reward_register_worker(self, stage: str, *, slots: int = 1) -> Dict[str, Any]:
        """Registers this process (started outside the agent's supervisor) as an external worker of ``stage``.

        Returns ``{stage, workerIds}``: one id per slot, each to fetch and
        complete with like a supervised worker's. The agent knows the process
        by its pid: when it exits (or calls :meth:`reward_leave`) its workers
        are gone and their requests retried elsewhere. Needs an admin caller.
        """
        return self.call("POST", "/v1/reward/workers", {"stage": stage, "slots": int(slots)})

    def reward_leave(self) -> Dict[str, Any]:
        """This process's external workers leave; ``{workerIds}``."""
        return self.call("POST", "/v1/reward/workers/leave", {})

    def reward_fetch(self, worker_id: str, *, wait_ms: int = 1000) -> Optional[Dict[str, Any]]:
        """A supervised worker's next request of its stage (a lease), or ``None`` after ``wait_ms``."""
        body = self._transport.request("POST", "/v1/reward/work/fetch", {"workerId": worker_id, "waitMs": int(wait_ms)},
                                       timeout_s=wait_ms / 1000 + 30)
        return body["lease"]

    def reward_complete(self, worker_id: str, lease_id: str, *, reward: Optional[float] = None, output: Any = None,
                        error: Optional[str] = None) -> None:
        """Ends a lease: ``reward`` ends the request (required at the last stage), ``output`` goes to the next stage,
        ``error`` fails it. ``ERR_REWARD_LEASE_LOST`` when the lease timed out or was lost meanwhile."""
        body: Dict[str, Any] = {"workerId": worker_id, "leaseId": lease_id, **_given({"reward": reward, "output": output, "error": error})}
        self.call("POST", "/v1/reward/work/complete", body)


    # Rollout (agent/rollout/): engines registered with their node's agent; a trainer runs a step's
    # generation through its own agent over every instance of the cluster (RLBoost Algorithm 2).

    def rollout_generate(self, prompts: Iterable[Union[str, Mapping[str, Any]]], *, max_tokens: int = 256,
                         model: Optional[str] = None, sampling: Optional[Mapping[str, Any]] = None,
                         step_id: Optional[str] = None, retry_s: float = 120.0,
                         timeout_s: Optional[float] = None, **options: Any) -> Dict[str, Any]:
        """Runs one rollout step (``POST /v1/rollout/steps``) and returns once every response is complete.

        ``prompts``: strings (ids ``p0``, ``p1``, ... and ``max_tokens``,
        ``sampling`` for all) or dicts ``{"prompt", "id"?, "maxTokens"?,
        "sampling"?}``. ``model`` picks the instances serving it and is sent as
        the requests' model. ``options`` are the step's (``balancer``,
        ``maxPending``, ``stallMs``, ``resume``, ...). The answer has
        ``responses`` in the order given (``id``, ``text``, ``tokens``,
        ``finish``, ``route``: the instances that produced it), ``stepMs``,
        ``moves`` and ``removed`` (instances lost during the step, and why).
        A request whose instance is preempted continues on another from its
        tokens; the text is the same as without the preemption. Errors:
        ``ERR_BAD_REQUEST`` (bad input; nothing sent), ``ERR_UNAVAILABLE`` (no
        instance in rotation for ``noInstanceTimeoutMs``).

        ``step_id`` names the step: the agent journals its progress, and when the
        agent dies or the connection breaks mid-step this call submits it again
        (for up to ``retry_s`` seconds, while the agent restarts), going on from
        the tokens collected instead of generating everything again; a step
        already complete is answered again. Use a new id for every step.
        """
        body = _step_body(prompts, max_tokens, model, sampling, step_id, options)
        deadline = time.monotonic() + retry_s
        while True:
            try:
                return self._transport.request("POST", "/v1/rollout/steps", body, timeout_s=timeout_s)
            except AgentError as err:
                if not _may_resubmit(err, step_id, deadline):
                    raise
            time.sleep(0.5)

    def rollout_stream(self, prompts: Iterable[Union[str, Mapping[str, Any]]], *, max_tokens: int = 256,
                       model: Optional[str] = None, sampling: Optional[Mapping[str, Any]] = None,
                       step_id: Optional[str] = None, retry_s: float = 120.0, **options: Any) -> Iterator[Tuple[str, Dict[str, Any]]]:
        """:meth:`rollout_generate`, streamed: yields ``("response", r)`` for each response as soon as it is
        complete (train on microbatches as they fill, RLBoost's dynamic micro-batching), then ``("done",
        summary)``: the answer without its responses. AgentError when the step fails.

        With ``step_id``, a stream cut by the agent's death is opened again while the agent restarts (up to
        ``retry_s``): the step goes on from its journal, and responses already yielded are not yielded again.
        """
        body = _step_body(prompts, max_tokens, model, sampling, step_id, options)
        body["stream"] = True
        yielded: set = set()
        deadline = time.monotonic() + retry_s
        while True:
            try:
                for event, data in self._transport.events("/v1/rollout/steps", body):
                    if event == "error":
                        raise AgentError(data.get("code", "ERR_INTERNAL"), data.get("message", "the step failed"))
                    if event == "response":
                        if data["id"] in yielded:
                            continue
                        yielded.add(data["id"])
                    yield event, data
                    if event == "done":
                        return
                raise AgentError("ERR_CONNECTION_LOST", "the agent closed the step's stream before it was done")
            except AgentError as err:
                if not _may_resubmit(err, step_id, deadline):
                    raise
            time.sleep(0.5)

    def rollout_status(self) -> Dict[str, Any]:
        """Instances registered with this agent (``local``), those it sees in the cluster, steps running here."""
        return self.call("GET", "/v1/rollout")

    def rollout_register(self, instance_id: str, url: str, model: str, *, weight_version: Optional[int] = None,
                         gpus: Optional[List[int]] = None, reserved: bool = False) -> Dict[str, Any]:
        """Registers an OpenAI-compatible streaming engine of this node (probed at ``url/v1/models`` first). Admin.

        ``reserved``: an engine of the training cluster; in a seeded step it takes requests only during the window."""
        return self.call("POST", "/v1/rollout/instances", {"id": instance_id, "url": url, "model": model,
                                                          **_given({"weightVersion": weight_version, "gpus": gpus, "reserved": True if reserved else None})})

    def rollout_deregister(self, instance_id: str) -> Dict[str, Any]:
        """Takes an instance of this node out of the rotation. Admin."""
        return self.call("DELETE", f"/v1/rollout/instances/{quote(instance_id, safe='')}")

    def rollout_terminate(self, instances: Optional[List[str]] = None, reason: Optional[str] = None) -> Dict[str, Any]:
        """Termination notice: this node's instances (or ``instances``) will be preempted; steps move their requests now. Admin."""
        return self.call("POST", "/v1/rollout/terminate", _given({"instances": instances, "reason": reason}))

    # Worker groups and operations (agent/workers/PROTOCOL.md). Workers use these through
    # agentd_client.worker.Worker; a controller calls run_op.

    def run_op(self, job: str, name: str, args: Any = None, *, op_id: Optional[str] = None,
               component: Optional[str] = None, iteration: Optional[int] = None,
               granularity: Optional[int] = None, timeout_s: Optional[float] = None) -> Dict[str, Any]:
        """Runs operation ``name`` on every rank of ``job`` (``POST /v1/jobs/:id/ops``); blocks until all ran it.

        ``args`` (JSON, at most 64 KiB) goes to every rank's handler; omitted
        when ``None``. ``op_id`` makes the call idempotent: the same id again
        answers the first run's result without running it twice (default: the
        agent picks a fresh id). Returns the agent's answer: ``job``, ``opId``,
        ``name``, ``ranks`` (``rank``, ``node``, ``result``, ``startedAtMs``,
        ``durationMs`` for each), ``switched`` and the phase timings.
        ``timeout_s`` bounds each socket wait; the default ``None`` waits as
        long as the operation takes. Errors: ``ERR_JOB_NOT_FOUND``,
        ``ERR_JOB_NOT_RUNNING``, ``ERR_UNKNOWN_OPERATION``, ``ERR_WORKER_MISSING``,
        ``ERR_WORKER_LOST`` / ``ERR_OPERATION_FAILED`` (``details["rank"]``), ``ERR_NODE_LOST``.

        ``component`` (``rollout``, ``inference``, ``actor``; ``env``,
        ``env_rollout``), ``iteration`` and ``granularity`` (environments per
        instance for env components, the batch otherwise) put the operation's
        run time into the job's measured profile, which
        ``agentctl plan workflow CONFIG --job JOB`` plans from.
        """
        body: Dict[str, Any] = {"name": name}
        if args is not None:
            body["args"] = args
        if op_id is not None:
            body["opId"] = op_id
        for key, value in (("component", component), ("iteration", iteration), ("granularity", granularity)):
            if value is not None:
                body[key] = value
        return self._transport.request("POST", f"/v1/jobs/{quote(job, safe='')}/ops", body, timeout_s=timeout_s)

    def workers(self) -> Any:
        """The workers registered with this agent (``GET /v1/workers``), the agent's answer unchanged."""
        return self.call("GET", "/v1/workers")

    def register_worker(self, job: str, rank: int, gpu: Optional[int], ops: Iterable[str],
                        tensors: Iterable[Mapping[str, Any]]) -> Dict[str, Any]:
        """Registers a worker process (``POST /v1/workers``): its ops and its state tensors ``{name, key, memory}``.

        Returns ``{workerId, job, rank, gpu, node, stored}``; open
        :meth:`worker_events` within 10 s or the agent drops the worker.
        """
        body = {"job": job, "rank": rank, "gpu": gpu, "ops": list(ops), "tensors": list(tensors)}
        return self.call("POST", "/v1/workers", body)

    def worker_events(self, worker_id: str) -> Iterator[Tuple[str, Dict[str, Any]]]:
        """The worker's event stream as ``(type, data)``; opening it makes the worker live, closing it is its death."""
        return self._transport.events(f"/v1/workers/{quote(worker_id, safe='')}/events")

    def reply_to_worker_event(self, worker_id: str, reply: Mapping[str, Any]) -> None:
        """Answers one event: ``{requestId, ok: true, ...}`` or ``{requestId, ok: false, error: {code, message}}``."""
        self.call("POST", f"/v1/workers/{quote(worker_id, safe='')}/replies", dict(reply))

    def deregister_worker(self, worker_id: str) -> None:
        """A worker's clean exit (``DELETE /v1/workers/:id``): its stored state is kept for the next worker of its rank."""
        self.call("DELETE", f"/v1/workers/{quote(worker_id, safe='')}")

def _selector(keys: Optional[Iterable[KeyLike]], prefix: Optional[str]) -> Any:
    if (keys is None) == (prefix is None):
        raise AgentError("ERR_BAD_REQUEST", 'give exactly one of "keys" (a list of keys) or "prefix"')
    if isinstance(keys, (str, StateKey)):
        raise TypeError("keys must be a list of keys, not a single key")
    return {"keys": [str(k) for k in keys]} if keys is not None else {"prefix": prefix}


def _may_resubmit(err: AgentError, step_id: Optional[str], deadline: float) -> bool:
    """A named step whose agent died or restarts (no answer came) is submitted again until ``deadline``."""
    lost = err.code in ("ERR_CONNECTION_LOST", "ERR_AGENT_UNREACHABLE", "ERR_STARTING")
    return step_id is not None and lost and time.monotonic() <= deadline


def _step_body(prompts: Iterable[Union[str, Mapping[str, Any]]], max_tokens: int, model: Optional[str],
               sampling: Optional[Mapping[str, Any]], step_id: Optional[str], options: Mapping[str, Any]) -> Dict[str, Any]:
    """A rollout step's request body: prompts as strings (ids p0, p1, ...) or request dicts."""
    requests: List[Dict[str, Any]] = []
    for i, p in enumerate(prompts):
        r: Dict[str, Any] = {"id": f"p{i}", "prompt": p, "maxTokens": int(max_tokens)} if isinstance(p, str) else {"id": f"p{i}", "maxTokens": int(max_tokens), **p}
        if sampling is not None and "sampling" not in r:
            r["sampling"] = dict(sampling)
        requests.append(r)
    body: Dict[str, Any] = {"requests": requests, **_given({"model": model, "stepId": step_id})}
    if options:
        body["options"] = dict(options)
    return body


def _given(fields: Mapping[str, Any]) -> Dict[str, Any]:
    """The fields whose value is not None (optional request fields)."""
    return {k: v for k, v in fields.items() if v is not None}
