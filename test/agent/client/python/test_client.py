"""AgentClient against a real dev agent: shared-memory round trips, dedup, residency, drop, prefetch, errors."""
import json
import os
import pickle
import random
import struct
import tempfile
import threading
import time
import unittest
from typing import Any, Callable, Dict, List, Literal, get_args, get_origin, get_type_hints

from agent_process import MiB, AgentErrorAssertions, DevAgent, make_shm, pattern, shared_agent
from agentd_client import (AcquireGpuResult, AgentClient, AgentError, MaterializeResult, OffloadItem, OffloadResult,
                           OnloadItem, OnloadResult, ReleaseGpuResult, Residency, ShmMemory, format_key, parse_key)
from agentd_client.schema import LocksBody

agent: DevAgent


def setUpModule() -> None:
    global agent
    agent = shared_agent()


def u8_key(namespace: str, name: str, nbytes: int, version: int = 1) -> str:
    return format_key(namespace, name, shape=[nbytes], dtype="u8", version=version)


def wait_until(condition: Callable[[], bool], timeout_s: float = 10, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


class StateApiTest(AgentErrorAssertions):
    def setUp(self) -> None:
        self.client = agent.client
        # One namespace per test; whatever it stored is dropped afterwards, so tests share the 16 MiB pool.
        self.ns = f"pytest/{self._testMethodName}"
        self.addCleanup(lambda: self.client.drop(prefix=self.ns + "/"))

    def test_offload_onload_round_trip_is_byte_exact(self) -> None:
        data = pattern(3 * MiB, seed=1)
        source = make_shm(self, data)
        keys = [u8_key(self.ns, f"w{i}", MiB) for i in range(3)]
        results = self.client.offload([OffloadItem(k, ShmMemory.of(source, i * MiB)) for i, k in enumerate(keys)])
        self.assertEqual(results, [{"key": k, "tier": "host", "deduplicated": False, "durable": False} for k in keys])

        target = make_shm(self, 2 * MiB + 7)
        # Onload in another order and at odd offsets; the agent writes exactly nbytes at each.
        loaded = self.client.onload([OnloadItem(keys[2], ShmMemory(target.name, 0)), OnloadItem(keys[0], ShmMemory(target.name, MiB + 7))])
        self.assertEqual(loaded, [{"key": keys[2], "fromTier": "host"}, {"key": keys[0], "fromTier": "host"}])
        self.assertEqual(bytes(target.buf[:MiB]), data[2 * MiB:])
        self.assertEqual(bytes(target.buf[MiB:MiB + 7]), bytes(7), "bytes between the targets are untouched")
        self.assertEqual(bytes(target.buf[MiB + 7:]), data[:MiB])

    def test_offload_accepts_state_keys_of_any_dtype(self) -> None:
        key = parse_key(format_key(self.ns, "m", role="optim.exp_avg", offsets=[4, 0], shape=[16, 8], dtype="bf16", version=3))
        data = pattern(key.nbytes, seed=2)
        self.client.offload([OffloadItem(key, ShmMemory.of(make_shm(self, data)))])
        target = make_shm(self, key.nbytes)
        self.client.onload([OnloadItem(key, ShmMemory.of(target))])
        self.assertEqual(bytes(target.buf), data)

    def test_concurrent_replicas_are_stored_once(self) -> None:
        replicas = 4
        data = pattern(4 * MiB, seed=3)
        sources = [make_shm(self, data) for _ in range(replicas)]
        keys = [u8_key(self.ns, f"layer{i}", MiB) for i in range(4)]
        start = threading.Barrier(replicas)
        answers: List[object] = [None] * replicas

        def replica(r: int) -> None:
            client = AgentClient(agent.socket_path)  # a data-parallel rank: its own client, its own memory
            start.wait()
            try:
                answers[r] = client.offload([OffloadItem(k, ShmMemory.of(sources[r], i * MiB)) for i, k in enumerate(keys)])
            except AgentError as err:
                answers[r] = err

        threads = [threading.Thread(target=replica, args=(r,)) for r in range(replicas)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results = [res for answer in answers if isinstance(answer, list) for res in answer]
        self.assertEqual(len(results), replicas * len(keys), f"every replica's offload succeeded: {answers}")
        for k in keys:
            copied = [r for r in results if r["key"] == k and not r["deduplicated"]]
            self.assertEqual(len(copied), 1, f"{k} copied exactly once")

        residency = self.client.residency(prefix=self.ns + "/")
        self.assertEqual((residency["storedBytes"], residency["logicalBytes"]), (4 * MiB, 16 * MiB))
        self.assertEqual([(k["key"], k["replicas"]) for k in residency["keys"]], [(k, replicas) for k in sorted(keys)])
        target = make_shm(self, MiB)
        self.client.onload([OnloadItem(keys[3], ShmMemory.of(target))])
        self.assertEqual(bytes(target.buf), data[3 * MiB:])

    def test_verify_compares_a_replica_with_the_stored_copy(self) -> None:
        key = u8_key(self.ns, "w", 4096)
        self.client.offload([OffloadItem(key, ShmMemory.of(make_shm(self, pattern(4096, seed=4))))])
        same = self.client.offload([OffloadItem(key, ShmMemory.of(make_shm(self, pattern(4096, seed=4))), verify=True)])
        differs = self.client.offload([OffloadItem(key, ShmMemory.of(make_shm(self, pattern(4096, seed=5))), verify=True)])
        self.assertEqual((same[0]["deduplicated"], same[0]["verified"]), (True, True))
        self.assertEqual((differs[0]["deduplicated"], differs[0]["verified"]), (True, False))

    def test_residency_lists_keys_under_a_prefix(self) -> None:
        source = make_shm(self, 3 * 4096)
        mine = [u8_key(self.ns + "/a", "w", 4096), u8_key(self.ns + "/b", "w", 8192)]
        self.client.offload([OffloadItem(mine[0], ShmMemory.of(source)), OffloadItem(mine[1], ShmMemory.of(source, 4096))])
        residency = self.client.residency(prefix=self.ns + "/a/")
        self.assertEqual([(k["key"], k["bytes"], k["tier"], k["replicas"], k["durable"]) for k in residency["keys"]],
                         [(mine[0], 4096, "host", 1, False)])
        self.assertEqual(residency["namespaces"], [{"namespace": self.ns + "/a", "keys": 1, "logicalBytes": 4096, "storedBytes": 4096, "quotaBytes": None}])
        everything = self.client.residency()
        self.assertTrue({k for k in mine} <= {k["key"] for k in everything["keys"]})
        self.assertEqual(everything["tiers"]["host"]["capacityBytes"], 16 * MiB)
        self.assertGreaterEqual(everything["tiers"]["host"]["usedBytes"], 12288)
        self.assertEqual(self.client.residency(prefix="no/such/prefix?&=")["keys"], [], "the prefix is quoted into the query")

    def test_residency_pages_filters_and_summary(self) -> None:
        source = make_shm(self, 5 * 4096)
        keys = sorted([u8_key(self.ns + "/a", f"w{i}", 4096) for i in range(4)] + [u8_key(self.ns + "/a/sub", "w", 4096)])
        self.client.offload([OffloadItem(k, ShmMemory.of(source, i * 4096)) for i, k in enumerate(keys)])
        first = self.client.residency(prefix=self.ns + "/", limit=2)
        self.assertEqual([k["key"] for k in first["keys"]], keys[:2])
        second = self.client.residency(prefix=self.ns + "/", limit=2, cursor=first["nextCursor"])
        self.assertEqual([k["key"] for k in second["keys"]], keys[2:4])
        self.assertEqual([k["key"] for k in self.client.residency_keys(prefix=self.ns + "/", page_keys=2)], keys, "every page, each key once")
        self.assertEqual([k["key"] for k in self.client.residency_keys(namespace=self.ns + "/a", tier="host")], [k for k in keys if "/sub/" not in k])
        self.assertEqual([k["key"] for k in self.client.residency_keys(job=self.ns, tier="nvme")], [])
        summary = self.client.residency(job=self.ns, summary=True)
        self.assertNotIn("keys", summary)
        self.assertEqual((summary["keyCounts"], summary["storedBytes"], summary["dedupRatio"]), ({"host": 5, "nvme": 0}, 5 * 4096, 1.0))
        self.assertEqual([n["namespace"] for n in summary["namespaces"]], [self.ns + "/a", self.ns + "/a/sub"])
        for bad in [dict(tier="gpu"), dict(limit=0), dict(limit=2001), dict(cursor="not a cursor"), dict(namespace="a//b"), dict(summary=True, limit=5)]:
            self.assertAgentError("ERR_BAD_REQUEST", 400, lambda b=bad: self.client.residency(**b))  # type: ignore[misc]

    def test_drop_by_keys_and_by_prefix(self) -> None:
        source = make_shm(self, 4 * 4096)
        keys = [u8_key(self.ns, f"w{i}", 4096) for i in range(4)]
        self.client.offload([OffloadItem(k, ShmMemory.of(source, i * 4096)) for i, k in enumerate(keys)])
        self.assertEqual(self.client.drop(keys=[keys[0], parse_key(keys[1])]), 2)
        self.assertEqual(self.client.drop(keys=[keys[0]]), 0, "already gone")
        self.assertEqual([k["key"] for k in self.client.residency(prefix=self.ns + "/")["keys"]], keys[2:])
        self.assertEqual(self.client.drop(prefix=self.ns + "/"), 2)
        self.assertEqual(self.client.residency(prefix=self.ns + "/")["keys"], [])
        self.assertAgentError("ERR_KEY_NOT_FOUND", 404, lambda: self.client.onload([OnloadItem(keys[2], ShmMemory.of(source))]))

    def test_durable_offload_spill_prefetch_and_hints(self) -> None:
        durable = u8_key(self.ns, "durable", MiB)
        [result] = self.client.offload([OffloadItem(durable, ShmMemory.of(make_shm(self, pattern(MiB, seed=6))))], durability="nvme")
        self.assertEqual((result["tier"], result["durable"]), ("host", True))

        # 14 MiB more: 15 of the pool's 16 MiB is above its 90 % watermark, so the agent
        # spills to NVMe in the background until the pool is down to 75 % (12 MiB).
        data = pattern(14 * MiB, seed=7)
        source = make_shm(self, data)
        keys = [u8_key(self.ns, f"bulk{i:02d}", MiB) for i in range(14)]
        self.client.offload([OffloadItem(k, ShmMemory.of(source, i * MiB)) for i, k in enumerate(keys)])
        nvme_only = lambda: [k["key"] for k in self.client.residency(prefix=self.ns + "/")["keys"] if k["tier"] == "nvme"]  # noqa: E731
        wait_until(lambda: self.client.residency()["tiers"]["host"]["usedBytes"] <= 12 * MiB, what="the background spill")
        spilled = nvme_only()
        self.assertEqual(len(spilled), 3, "spilling 15 MiB down to 12 MiB moves three 1 MiB keys")
        self.assertEqual(self.client.prefetch(keys=[spilled[0]]), 1)
        wait_until(lambda: spilled[0] not in nvme_only(), what="the prefetch of one key")
        self.assertEqual(nvme_only(), spilled[1:])
        # Hints: keys needed now are within the agent's prefetch horizon, so it reads them back at once.
        self.client.hints({self.ns + "/": 0})
        wait_until(lambda: nvme_only() == [], what="the prefetch that hints start")
        self.client.hints({})
        self.assertEqual(self.client.prefetch(prefix=self.ns + "/"), 0, "nothing left on NVMe only")

        target = make_shm(self, MiB)
        for k in spilled:
            i = keys.index(k) if k in keys else None
            self.client.onload([OnloadItem(k, ShmMemory.of(target))])
            expected = data[i * MiB:(i + 1) * MiB] if i is not None else pattern(MiB, seed=6)
            self.assertEqual(bytes(target.buf), expected, f"{k} reads back byte-exact after spill and prefetch")
        durable_entry = [k for k in self.client.residency(prefix=durable)["keys"]]
        self.assertEqual([k["durable"] for k in durable_entry], [True])

    def test_materialize_writes_safetensors_an_independent_reader_can_read(self) -> None:
        weight = pattern(4 * 4 * 4, seed=10)  # f32 [4,4], offloaded as two row-chunks (tensor parallel)
        moment = pattern(6 * 8, seed=11)      # f64 [6], optimizer state of the same parameter
        source = make_shm(self, weight + moment)
        top = format_key(self.ns, "w", offsets=[0, 0], shape=[2, 4], dtype="f32", version=5)
        bottom = format_key(self.ns, "w", offsets=[2, 0], shape=[2, 4], dtype="f32", version=5)
        exp_avg = format_key(self.ns, "w", role="optim.exp_avg", shape=[6], dtype="f64", version=5)
        self.client.offload([OffloadItem(bottom, ShmMemory.of(source, 32)), OffloadItem(top, ShmMemory.of(source, 0)),
                             OffloadItem(exp_avg, ShmMemory.of(source, 64))])
        out_dir = tempfile.TemporaryDirectory(prefix="agentd-py-st-")
        self.addCleanup(out_dir.cleanup)
        path = os.path.join(out_dir.name, "model.safetensors")

        result = self.client.materialize(self.ns + "/", 5, path)
        self.assertEqual((result["files"], result["index"], result["tensors"]), ([path], None, 2))
        with open(path, "rb") as f:
            content = f.read()
        (header_bytes,) = struct.unpack("<Q", content[:8])
        header = json.loads(content[8:8 + header_bytes])
        data = content[8 + header_bytes:]
        tensors = {name: (entry["dtype"], entry["shape"], data[entry["data_offsets"][0]:entry["data_offsets"][1]])
                   for name, entry in header.items() if name != "__metadata__"}
        self.assertEqual(tensors, {"w": ("F32", [4, 4], weight), "w#optim.exp_avg": ("F64", [6], moment)})
        self.assertEqual(result["bytes"], len(weight) + len(moment))

        self.assertAgentError("ERR_BAD_REQUEST", 400, lambda: self.client.materialize(self.ns + "/", 5, path))
        self.assertEqual(self.client.materialize(self.ns + "/", 5, path, overwrite=True)["files"], [path])
        self.assertAgentError("ERR_KEY_NOT_FOUND", 404, lambda: self.client.materialize(self.ns + "/", 6, path, overwrite=True))

    def test_errors_keep_the_daemons_code_and_status(self) -> None:
        shm = make_shm(self, MiB)
        valid = u8_key(self.ns, "w", MiB)
        error = self.assertAgentError("ERR_KEY_INVALID", 400, lambda: self.client.offload([OffloadItem("j/a:param", ShmMemory.of(shm))]))
        self.assertIn("tensors[0].key", error.message)
        error = self.assertAgentError("ERR_SOURCE_NOT_FOUND", 404, lambda: self.client.offload([OffloadItem(valid, ShmMemory("agentd-py-no-such-object"))]))
        self.assertIn("agentd-py-no-such-object", error.message)
        self.assertAgentError("ERR_SIZE_MISMATCH", 400, lambda: self.client.offload([OffloadItem(u8_key(self.ns, "w", 2 * MiB), ShmMemory.of(shm))]))
        self.assertAgentError("ERR_SIZE_MISMATCH", 400, lambda: self.client.offload([OffloadItem(valid, ShmMemory.of(shm, 1))]))
        self.assertAgentError("ERR_BAD_REQUEST", 400, lambda: self.client.offload([]))
        self.assertAgentError("ERR_NOT_FOUND", 404, lambda: self.client.call("GET", "/v1/no/such/route"))
        # A batch whose second item fails stores nothing, not even the valid first item.
        self.assertAgentError("ERR_SOURCE_NOT_FOUND", 404, lambda: self.client.offload([
            OffloadItem(valid, ShmMemory.of(shm)), OffloadItem(u8_key(self.ns, "v", 16), ShmMemory("agentd-py-no-such-object"))]))
        self.assertEqual(self.client.residency(prefix=self.ns + "/")["keys"], [], "no partial state")
        self.client.offload([OffloadItem(valid, ShmMemory.of(shm))])
        self.assertAgentError("ERR_SIZE_MISMATCH", 400, lambda: self.client.onload([OnloadItem(valid, ShmMemory.of(make_shm(self, MiB - 1)))]))

    def test_errors_raised_before_any_request(self) -> None:
        self.assertAgentError("ERR_BAD_REQUEST", None, lambda: self.client.drop())
        self.assertAgentError("ERR_BAD_REQUEST", None, lambda: self.client.prefetch(keys=[], prefix=""))
        with self.assertRaises(TypeError):
            self.client.drop(keys=u8_key(self.ns, "w", 1))  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            ShmMemory("psm_x", -1)
        pickled = pickle.loads(pickle.dumps(AgentError("ERR_TIER_FULL", "no room", 507, {"bytes": 1})))
        self.assertEqual((pickled.code, pickled.message, pickled.status, pickled.details), ("ERR_TIER_FULL", "no room", 507, {"bytes": 1}))
        unreachable = AgentClient(agent.state_dir + "/no-agent.sock", timeout_s=1)
        error = self.assertAgentError("ERR_AGENT_UNREACHABLE", None, unreachable.health)
        self.assertIn("no socket there", error.message)

    def test_client_and_agent_agree_on_the_key_grammar(self) -> None:
        rng = random.Random(9)
        base = u8_key(self.ns, "w", 16)
        corpus = [base, base.replace("u8", "bf16").replace("[16]", "[8]"), "j/a:param", "j/w:param@[01]/[1]:u8#v1",
                  "j/w:param@[]/[]:f64#v0", "j/w:optim.m@[0]/[1]:u8#v1", f"j/w:param@[0]/[{2**53}]:u8#v1"]
        for _ in range(60):  # random single-character edits of a valid key
            i = rng.randrange(len(base))
            corpus.append(base[:i] + rng.choice("/:@[],#v0123x_.-") + base[i + 1:])
        shm_name = "agentd-py-no-such-object"  # a key that parses gets as far as the missing source
        for text in corpus:
            try:
                parse_key(text)
                local = "valid"
            except AgentError as err:
                local = err.code
            try:
                self.client.offload([OffloadItem(text, ShmMemory(shm_name))])
                remote = "stored?!"
            except AgentError as err:
                remote = "valid" if err.code == "ERR_SOURCE_NOT_FOUND" else err.code
            self.assertEqual(local, remote, f"verdicts differ for {text!r}")


class StartingAgentTest(unittest.TestCase):
    """An agent that just restarted answers ERR_STARTING (having done nothing) until it recovered its state."""

    def client_answering(self, starting_answers: int, starting_wait_s: float = 5.0) -> "tuple[AgentClient, List[str]]":
        client = AgentClient("/nonexistent.sock", starting_wait_s=starting_wait_s)
        calls: List[str] = []

        def request(method: str, path: str, body: Any = None) -> Any:
            calls.append(path)
            if len(calls) <= starting_answers:
                raise AgentError("ERR_STARTING", "the agent is starting (subsystems not started yet: state)", 503)
            return {"ok": True} if path == "/healthz" else {"results": []}

        client._transport.request = request  # type: ignore[method-assign]
        return client, calls

    def test_requests_are_sent_again_until_the_agent_started(self) -> None:
        client, calls = self.client_answering(3)
        self.assertEqual(client.call("POST", "/v1/state/offload", {"tensors": []}), {"results": []})
        self.assertEqual(len(calls), 4)

    def test_the_error_is_raised_after_starting_wait_s(self) -> None:
        client, calls = self.client_answering(1000, starting_wait_s=0.2)
        with self.assertRaises(AgentError) as caught:
            client.call("GET", "/v1/state/residency")
        self.assertEqual(caught.exception.code, "ERR_STARTING")
        self.assertLess(len(calls), 10)
        client, calls = self.client_answering(1, starting_wait_s=0)
        with self.assertRaises(AgentError):
            client.call("GET", "/v1/state/residency")
        self.assertEqual(len(calls), 1, "0 raises at once")

    def test_health_is_false_while_starting_and_never_waits(self) -> None:
        client, calls = self.client_answering(1)
        self.assertFalse(client.health())
        self.assertTrue(client.health())
        self.assertEqual(len(calls), 2)


class WireTypesTest(unittest.TestCase):
    """The TypedDicts of agentd_client/schema.py say what the agent's OpenAPI document says."""

    def assertMatchesSchema(self, hint: Any, schema: Dict[str, Any], path: str) -> None:
        if hasattr(hint, "__required_keys__"):  # a TypedDict
            fields = get_type_hints(hint)
            self.assertEqual(set(fields), set(schema.get("properties", {})), f"{path}: fields")
            self.assertEqual(set(hint.__required_keys__), set(schema.get("required", [])), f"{path}: required fields")
            for name, field in fields.items():
                self.assertMatchesSchema(field, schema["properties"][name], f"{path}.{name}")
        elif get_origin(hint) is list:
            self.assertEqual(schema.get("type"), "array", path)
            self.assertMatchesSchema(get_args(hint)[0], schema["items"], f"{path}[]")
        elif get_origin(hint) is Literal:
            enums = {e for alternative in schema.get("anyOf", [schema]) for e in alternative.get("enum", [])}
            self.assertEqual(set(get_args(hint)), enums, f"{path}: values")

    def test_answer_types_match_the_openapi_document(self) -> None:
        paths = agent.client.call("GET", "/v1/openapi.json")["paths"]
        answer = lambda method, route: paths[route][method]["responses"]["200"]["content"]["application/json"]["schema"]  # noqa: E731
        self.assertMatchesSchema(Residency, answer("get", "/v1/state/residency"), "residency")
        self.assertMatchesSchema(OffloadResult, answer("post", "/v1/state/offload")["properties"]["results"]["items"], "offload")
        self.assertMatchesSchema(OnloadResult, answer("post", "/v1/state/onload")["properties"]["results"]["items"], "onload")
        self.assertMatchesSchema(MaterializeResult, answer("post", "/v1/state/materialize"), "materialize")
        self.assertMatchesSchema(AcquireGpuResult, answer("post", "/v1/locks/gpu/{n}/acquire"), "acquire")
        self.assertMatchesSchema(ReleaseGpuResult, answer("post", "/v1/locks/gpu/{n}/release"), "release")
        self.assertMatchesSchema(LocksBody, answer("get", "/v1/locks"), "locks")


if __name__ == "__main__":
    unittest.main()
