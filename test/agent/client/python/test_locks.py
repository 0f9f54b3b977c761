"""The device lock from Python against a real dev agent with two faked GPUs (RLinf §3.3 context switching)."""
import os
import queue
import threading
import unittest
from typing import Any, Dict, List, Tuple

from agent_process import MiB, DevAgent, make_shm, pattern, shared_agent
from agentd_client import AgentClient, AgentError, OffloadItem, OnloadItem, ShmMemory, format_key

agent: DevAgent


def setUpModule() -> None:
    global agent
    agent = shared_agent()


class DeviceLockTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = agent.client

    def assertAgentError(self, code: str, status: int, call: Any) -> None:
        with self.assertRaises(AgentError) as caught:
            call()
        self.assertEqual((caught.exception.code, caught.exception.status), (code, status), caught.exception.message)

    def test_reentrant_for_this_process_and_released_level_by_level(self) -> None:
        me = f"pid:{os.getpid()}"
        self.assertEqual(self.client.acquire_gpu(1), {"gpu": 1, "holder": me, "depth": 1, "waiting": 0})
        self.assertEqual(self.client.acquire_gpu(1)["depth"], 2)
        [_, gpu1] = self.client.locks()
        self.assertEqual((gpu1["holder"], gpu1["depth"], gpu1["waiters"]), (me, 2, []))
        self.assertIn(os.getpid(), gpu1["pids"])
        self.assertEqual(self.client.release_gpu(1)["depth"], 1)
        self.assertEqual(self.client.release_gpu(1), {"gpu": 1, "holder": me, "depth": 0})
        self.assertAgentError("ERR_LOCK_NOT_HELD", 409, lambda: self.client.release_gpu(1))
        self.assertAgentError("ERR_NOT_FOUND", 404, lambda: self.client.acquire_gpu(7, timeout_ms=0))

    def test_gpu_lock_releases_when_the_block_raises_and_timeouts_are_423(self) -> None:
        with self.assertRaises(KeyError):
            with self.client.gpu_lock(1, holder="trainer") as granted:
                self.assertEqual(granted["holder"], "trainer")
                self.assertAgentError("ERR_LOCK_TIMEOUT", 423, lambda: self.client.acquire_gpu(1, holder="rollout", timeout_ms=0))
                raise KeyError("the block failed")
        self.assertIsNone(self.client.locks()[1]["holder"], "released on the way out")

    def test_a_waiter_makes_the_holder_offload_and_release(self) -> None:
        """The RLinf hand-over: the trainer holds GPU 0, the rollout queues, the trainer is told, offloads, releases."""
        namespace = f"pylock/{self._testMethodName}"
        self.addCleanup(lambda: self.client.drop(prefix=namespace + "/"))
        key = format_key(namespace, "w", shape=[MiB], dtype="u8", version=1)
        weights = make_shm(self, pattern(MiB, seed=21))

        self.client.acquire_gpu(0, holder="trainer")
        events = self.client.gpu_lock_events(0, holder="trainer")
        self.assertEqual(next(events)[0], "state")
        rollout_grant: "queue.Queue[Any]" = queue.Queue()

        def rollout() -> None:
            try:
                rollout_grant.put(AgentClient(agent.socket_path).acquire_gpu(0, holder="rollout"))  # blocks
            except AgentError as err:
                rollout_grant.put(err)

        waiter = threading.Thread(target=rollout, daemon=True)
        waiter.start()
        seen: List[Tuple[str, Dict[str, Any]]] = []
        for event in events:
            seen.append(event)
            if event[0] == "waiter":
                self.assertEqual((event[1]["holder"], event[1]["waiter"]), ("trainer", "rollout"))
                self.assertTrue(rollout_grant.empty(), "the rollout still waits while the trainer holds")
                self.client.offload([OffloadItem(key, ShmMemory.of(weights))])
                self.assertEqual(self.client.release_gpu(0, holder="trainer")["depth"], 0)
            if event[0] == "released":
                self.assertEqual(event[1]["reason"], "released")
                break
        events.close()
        waiter.join(timeout=10)
        granted = rollout_grant.get(timeout=1)
        self.assertEqual(granted, {"gpu": 0, "holder": "rollout", "depth": 1, "waiting": 0}, f"events: {seen}")
        target = make_shm(self, MiB)
        self.client.onload([OnloadItem(key, ShmMemory.of(target))])
        self.assertEqual(bytes(target.buf), bytes(weights.buf), "the rollout finds what the trainer offloaded")
        self.client.release_gpu(0, holder="rollout")


if __name__ == "__main__":
    unittest.main()
