"""Batches at the schema's item limit, bodies over a route's limit, and the three ways a call fails.

A batch of 65,536 keys (the schema's item limit) is several times api.bodyLimitBytes and must
still be stored whole; a body over a route's limit is refused with a 413 the client receives; and
the client tells "no agent" (ERR_AGENT_UNREACHABLE), "the agent closed the connection without an
answer" (ERR_CONNECTION_LOST) and "the agent refused the request" (its code and HTTP status) apart.
"""
import json
import os
import socket
import tempfile
import threading
import unittest
from typing import List

from agent_process import AgentErrorAssertions, DevAgent, make_shm
from agentd_client import AgentClient, AgentError, OffloadItem, OnloadItem, ShmMemory, format_key

#: The schema's item limit of an offload or onload batch (agent/api/wire/state.ts).
MAX_BATCH_ITEMS = 65_536
#: api.bodyLimitBytes of the agent (its default, 1 MiB).
API_BODY_LIMIT = 1 << 20
#: api.maxConnections of the agent (the smallest allowed), so a test can fill it.
MAX_CONNECTIONS = 16
KEY_BYTES = 16
#: Room for MAX_BATCH_ITEMS keys of one 4 KiB extent each, plus the one over the limit.
POOL_FOR_THE_BATCH = (MAX_BATCH_ITEMS + 1024) * 4096

agent: DevAgent


def setUpModule() -> None:
    global agent
    # An agent of its own: the big batch is not dropped afterwards (a shared agent would carry it),
    # and its connection cap is low enough to reach. Its pool holds the whole batch (a key takes at least
    # a 4 KiB extent): what is tested here is the limit, not spilling 65,536 keys to NVMe one by one.
    agent = DevAgent(["--set", f"api.maxConnections={MAX_CONNECTIONS}",
                      "--set", f"state.hostPoolBytes={POOL_FOR_THE_BATCH}"]).start()
    agent.client = AgentClient(agent.socket_path, timeout_s=600)


def tearDownModule() -> None:
    agent.stop()


def key_of(i: int) -> str:
    return format_key("pytest/limits", f"model.layers.{i}.mlp.up_proj.weight", shape=[KEY_BYTES], dtype="u8", version=1)


class RequestLimitsTest(AgentErrorAssertions):
    def test_a_batch_at_the_schemas_item_limit_is_stored_and_loaded_whole(self) -> None:
        client = agent.client
        n = MAX_BATCH_ITEMS
        data = bytes(i % 251 for i in range(n * KEY_BYTES))
        source = make_shm(self, data)
        keys = [key_of(i) for i in range(n)]
        offload = [OffloadItem(k, ShmMemory.of(source, i * KEY_BYTES)) for i, k in enumerate(keys)]
        body_bytes = len(json.dumps({"tensors": [item.to_json() for item in offload]}, separators=(",", ":")))
        self.assertGreater(body_bytes, 4 * API_BODY_LIMIT, "the batch is several times api.bodyLimitBytes")

        results = client.offload(offload)
        self.assertEqual(len(results), n)
        self.assertEqual({(r["deduplicated"], r["tier"] in ("host", "nvme")) for r in results}, {(False, True)})
        target = make_shm(self, n * KEY_BYTES)
        loaded = client.onload([OnloadItem(k, ShmMemory.of(target, i * KEY_BYTES)) for i, k in enumerate(keys)])
        self.assertEqual([r["key"] for r in loaded], keys)
        self.assertEqual(bytes(target.buf), data, "every key read back byte-exact")

        # One item over the schema's limit: refused as a whole, coded, nothing stored.
        extra = key_of(n)
        error = self.assertAgentError("ERR_BAD_REQUEST", 400, lambda: client.offload(
            [*offload, OffloadItem(extra, ShmMemory.of(source))]))
        self.assertIn(f"more than {n} items", error.message)
        self.assertAgentError("ERR_BAD_REQUEST", 400, lambda: client.onload(
            [OnloadItem(k, ShmMemory.of(target)) for k in [*keys, extra]]))
        stored = client.residency(prefix="pytest/limits/", summary=True)
        self.assertEqual((sum(stored["keyCounts"].values()), stored["storedBytes"]), (n, n * KEY_BYTES), "residency unchanged")
        self.assertNotIn(extra, {k["key"] for k in client.residency_keys(prefix="pytest/limits/")})

        # A drop batch over api.bodyLimitBytes: every listed key that exists goes, the others count nothing.
        absent = [format_key("pytest/limits/absent", f"w{i}", shape=[KEY_BYTES], dtype="u8", version=1) for i in range(20_000)]
        self.assertEqual(client.drop(keys=[*keys[:3], *absent]), 3)
        self.assertEqual(sum(client.residency(prefix="pytest/limits/", summary=True)["keyCounts"].values()), n - 3)

    def test_a_body_over_its_routes_limit_is_refused_with_413(self) -> None:
        client = agent.client
        # A route bounded by api.bodyLimitBytes; the body is larger than the socket's buffers, so the
        # agent refuses it before it is sent whole.
        error = self.assertAgentError("ERR_BODY_TOO_LARGE", 413, lambda: client.call(
            "POST", "/v1/leader/decisions", {"kind": "x", "payload": "a" * (4 * API_BODY_LIMIT)}))
        self.assertIn(f"{API_BODY_LIMIT} bytes POST /v1/leader/decisions accepts (api.bodyLimitBytes)", error.message)
        # A batch route's limit is its largest schema-valid body, here several MiB of hints.
        error = self.assertAgentError("ERR_BODY_TOO_LARGE", 413, lambda: client.call(
            "POST", "/v1/state/hints", {"next": [], "padding": "a" * (8 * API_BODY_LIMIT)}))
        self.assertIn("POST /v1/state/hints accepts (the largest body its schema admits)", error.message)
        self.assertTrue(client.health(), "the agent serves on")

    def test_no_agent_a_lost_connection_and_a_refusal_are_told_apart(self) -> None:
        missing = AgentClient(os.path.join(agent.state_dir, "no-agent.sock"), timeout_s=5)
        self.assertIn("no socket there", self.assertAgentError("ERR_AGENT_UNREACHABLE", None, missing.health).message)
        with tempfile.TemporaryDirectory(prefix="agentd-py-") as d:
            stale_path = os.path.join(d, "stale.sock")
            stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            stale.bind(stale_path)  # a socket file nobody listens on: what a killed agent leaves behind
            stale.close()
            error = self.assertAgentError("ERR_AGENT_UNREACHABLE", None, AgentClient(stale_path, timeout_s=5).health)
            self.assertIn("a stale socket", error.message)

        # The agent accepts a connection over api.maxConnections and closes it at once, without an answer.
        held: List[socket.socket] = []
        self.addCleanup(lambda: [s.close() for s in held])
        for _ in range(MAX_CONNECTIONS):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(agent.socket_path)
            held.append(s)
        error = self.assertAgentError("ERR_CONNECTION_LOST", None, agent.client.health)
        self.assertIn("closed the connection before answering GET /healthz", error.message)
        for s in held:
            s.close()
        wait_for_health(agent.client)

        self.assertAgentError("ERR_BODY_TOO_LARGE", 413, lambda: agent.client.call(
            "POST", "/v1/leader/decisions", {"kind": "x", "payload": "a" * (2 * API_BODY_LIMIT)}))

    def test_an_answer_sent_before_the_body_was_read_still_reaches_the_caller(self) -> None:
        # A double of a server that refuses a body from its headers and closes without reading it (what
        # the agent did before it read refused bodies to their end): the client, still sending, gets
        # EPIPE or a reset, and reads the answer that is waiting.
        answer = json.dumps({"error": {"code": "ERR_BODY_TOO_LARGE", "message": "refused from the headers"}}).encode()
        with tempfile.TemporaryDirectory(prefix="agentd-py-") as d:
            path = os.path.join(d, "early.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            listener.listen(1)
            self.addCleanup(listener.close)

            def refuse_early() -> None:
                conn, _ = listener.accept()
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(4096)
                conn.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(answer), answer))
                conn.close()

            server = threading.Thread(target=refuse_early, daemon=True)
            server.start()
            error = self.assertAgentError("ERR_BODY_TOO_LARGE", 413, lambda: AgentClient(path, timeout_s=10).call(
                "POST", "/v1/state/offload", {"padding": "a" * (8 * API_BODY_LIMIT)}))
            self.assertEqual(error.message, "refused from the headers")
            server.join(timeout=10)


def wait_for_health(client: AgentClient, attempts: int = 200) -> None:
    """The agent answers again once held connections are closed (it notices the closes asynchronously)."""
    for _ in range(attempts):
        try:
            if client.health():
                return
        except AgentError as err:
            if err.code != "ERR_CONNECTION_LOST":
                raise
        threading.Event().wait(0.05)
    raise AssertionError("the agent did not serve again after the held connections closed")


if __name__ == "__main__":
    unittest.main()
