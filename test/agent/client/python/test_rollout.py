"""Rollout through the agent from Python: register an engine (the project's engine double, its own
process), run a step, compare every response with what the engine answers to the same request
directly; bad input is refused with the daemon's code and nothing is registered."""
import json
import re
import subprocess
import threading
import unittest
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict

from agent_process import REPO_ROOT, AgentErrorAssertions, DevAgent, shared_agent

MODEL = "double-py"
agent: DevAgent


def setUpModule() -> None:
    global agent
    agent = shared_agent()


def direct(url: str, prompt: str, max_tokens: int) -> Dict[str, Any]:
    """The engine's own non-streamed answer: the reference a step's response must equal."""
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(f"{url}/v1/completions", data=body, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as res:
        return json.load(res)["choices"][0]


class _EngineCase(AgentErrorAssertions):
    """An engine double of its own for each test (no tests here)."""
    decode_step_ms = "2"

    def setUp(self) -> None:
        node = REPO_ROOT / "node_modules" / ".bin" / "node"
        self.engine = subprocess.Popen([str(node), str(REPO_ROOT / "test" / "helpers" / "engine-double.ts"), "--port", "0", "--model", MODEL,
                                        "--eos-every", "40", "--decode-step-ms", self.decode_step_ms], stdout=subprocess.PIPE, text=True)
        self.addCleanup(self.engine.wait)
        self.addCleanup(self.engine.kill)
        if self.engine.stdout is not None:
            self.addCleanup(self.engine.stdout.close)
        line = self.engine.stdout.readline() if self.engine.stdout is not None else ""
        match = re.search(r"at (http://\S+)", line)
        self.assertIsNotNone(match, f"the engine double did not start: {line!r}")
        self.url = match.group(1) if match else ""


class RolloutTest(_EngineCase):
    def setUp(self) -> None:
        super().setUp()
        self.client = agent.client

    def test_generate_answers_every_prompt_as_the_engine_does(self) -> None:
        self.client.rollout_register("py0", self.url, MODEL, gpus=[0])
        self.addCleanup(self.client.rollout_deregister, "py0")
        prompts = [f"question {i}: " + " ".join(f"w{k}" for k in range(i * 3)) for i in range(12)]
        answer = self.client.rollout_generate(prompts + [{"id": "long", "prompt": "tail", "maxTokens": 60}], max_tokens=30, model=MODEL)
        self.assertEqual([r["id"] for r in answer["responses"]], [f"p{i}" for i in range(12)] + ["long"])
        for r, p in zip(answer["responses"], prompts + ["tail"]):
            expected = direct(self.url, p, 60 if r["id"] == "long" else 30)
            self.assertEqual((r["text"], r["finish"]), (expected["text"], expected["finish_reason"]), r["id"])
        self.assertEqual(answer["removed"], [])
        status = self.client.rollout_status()
        self.assertEqual([(i["id"], i["state"], i.get("gpus")) for i in status["local"]], [("py0", "up", [0])])

    def test_stream_yields_each_response_then_the_summary(self) -> None:
        self.client.rollout_register("py2", self.url, MODEL)
        self.addCleanup(self.client.rollout_deregister, "py2")
        prompts = [f"stream {i} " + "y " * i for i in range(8)]
        events = list(self.client.rollout_stream(prompts, max_tokens=20, model=MODEL))
        self.assertEqual([e for e, _ in events], ["response"] * 8 + ["done"])
        by_id = {d["id"]: d for e, d in events if e == "response"}
        for i, p in enumerate(prompts):
            self.assertEqual(by_id[f"p{i}"]["text"], direct(self.url, p, 20)["text"])
        self.assertNotIn("responses", events[-1][1])
        self.assertEqual(events[-1][1]["removed"], [])

    def test_bad_input_is_refused_and_changes_nothing(self) -> None:
        self.assertAgentError("ERR_BAD_REQUEST", 400, lambda: self.client.rollout_register("py1", self.url, "not-served"))
        self.assertEqual(self.client.rollout_status()["local"], [])
        self.assertAgentError("ERR_BAD_REQUEST", 400, lambda: self.client.rollout_generate([]))
        self.assertAgentError("ERR_BAD_REQUEST", 400, lambda: self.client.rollout_generate(["x"], sampling={"n": 2}))
        self.assertAgentError("ERR_NOT_FOUND", 404, lambda: self.client.rollout_terminate(["nope"]))
        self.assertAgentError("ERR_UNAVAILABLE", 503, lambda: self.client.rollout_generate(["x"], model="nobody-serves-this", noInstanceTimeoutMs=100))


class RolloutRestartTest(_EngineCase):
    """Its own agent, killed mid-step; the engine decodes slowly enough for the step to be under way."""
    decode_step_ms = "100"

    def test_named_steps_go_on_after_their_agent_was_killed(self) -> None:
        """Two named steps at once, one collected whole and one streamed; the agent is killed under both."""
        own = DevAgent()
        own.start()
        self.addCleanup(own.stop)
        own.client.rollout_register("e0", self.url, MODEL)
        prompts = [f"restart {i} " + "x " * i for i in range(8)]
        result: Dict[str, Any] = {}

        def generate() -> None:
            try:
                result["answer"] = own.client.rollout_generate(prompts, max_tokens=40, model=MODEL, step_id="py-step-1", retry_s=60)
            except Exception as err:  # noqa: BLE001 (reported by the assertion below)
                result["error"] = err

        def stream() -> None:
            try:
                result["events"] = list(own.client.rollout_stream(prompts, max_tokens=40, model=MODEL, step_id="py-step-2", retry_s=60))
            except Exception as err:  # noqa: BLE001 (reported by the assertion below)
                result["stream_error"] = err

        # The references meanwhile: the engine decodes them beside the step's requests.
        pool = ThreadPoolExecutor(len(prompts))
        self.addCleanup(pool.shutdown)
        references = pool.map(lambda p: direct(self.url, p, 40), prompts)
        workers = [threading.Thread(target=generate), threading.Thread(target=stream)]
        for w in workers:
            w.start()
        time.sleep(1.5)  # journals written, mid-generation, some responses streamed
        assert own.proc is not None
        own.proc.kill()
        own.proc.wait()
        own.start()  # the same state directory: the journals and the registration are there
        for w in workers:
            w.join(timeout=120)
        self.assertNotIn("error", result)
        self.assertNotIn("stream_error", result)
        answer = result["answer"]
        for r, expected in zip(answer["responses"], list(references)):
            self.assertEqual((r["text"], r["finish"]), (expected["text"], expected["finish_reason"]), r["id"])
        self.assertGreater(answer.get("resumed", {}).get("tokens", 0), 0, "went on from the journal")
        events = result["events"]
        streamed = [d["id"] for e, d in events if e == "response"]
        self.assertEqual(sorted(streamed), sorted(f"p{i}" for i in range(8)), "each response yielded once, across the resubmission")
        self.assertEqual(events[-1][0], "done")
        self.assertGreater(events[-1][1].get("resumed", {}).get("tokens", 0), 0, "the stream went on from its journal")


if __name__ == "__main__":
    unittest.main()
