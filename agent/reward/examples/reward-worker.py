#!/usr/bin/env python3
"""An example reward worker, and the double the reward-service tests run.

The agent's supervisor starts it with AGENTD_SOCKET, AGENTD_REWARD_STAGE and
AGENTD_REWARD_WORKER_ID. It loops: fetch a request of its stage (long-poll),
compute, post the result. A real worker replaces ``compute``; this one
behaves as the request's payload declares, so a trainer can script realistic
timing and failures:

  {"stageMs": {"<stage>": 250, ...},       time to spend at each stage (default 0)
   "crashAttempts": {"<stage>": [1]},       exit abruptly (code 3) on these attempts at the stage
   "error": {"<stage>": "message"},         report the reward function failing at the stage
   "reward": 1.0,                           the reward posted by the last stage (default 1.0)
   "endAt": "<stage>"}                      finish with the reward at this stage (skip the rest)

SIGTERM: finish the current request, then exit 0. It exits when its agent
(parent) dies or has not answered for AGENT_GONE_S, so a killed agent leaves
no workers behind.

``--external STAGE``: started by hand (or by another process manager) instead
of by the agent: it registers with the agent at AGENTD_SOCKET as an external
worker of STAGE (one slot), serves it the same way, and leaves on SIGTERM.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python"))
from agentd_client import AgentClient, AgentError  # noqa: E402

AGENT_GONE_S = 5.0
RETRYABLE = {"ERR_AGENT_UNREACHABLE", "ERR_CONNECTION_LOST", "ERR_LEADER_UNAVAILABLE", "ERR_UNAVAILABLE", "ERR_NOT_LEADER"}


def compute(lease):
    """What the stage does with one request: returns (reward or None, output)."""
    stage = lease["stage"]
    payload = lease.get("payload") or {}
    if lease["attempt"] in (payload.get("crashAttempts") or {}).get(stage, []):
        os._exit(3)  # a crash in the middle of a request: the agent reports the worker lost
    time.sleep(((payload.get("stageMs") or {}).get(stage, 0)) / 1000)
    error = (payload.get("error") or {}).get(stage)
    if error is not None:
        raise RuntimeError(error)
    if lease["lastStage"] or payload.get("endAt") == stage:
        return float(payload.get("reward", 1.0)), {"stage": stage, "worker": os.environ["AGENTD_REWARD_WORKER_ID"]}
    return None, {"from": stage, "input": lease.get("input")}


def main():
    agent = AgentClient(timeout_s=30)
    external = sys.argv[2] if len(sys.argv) == 3 and sys.argv[1] == "--external" else None
    if external is not None:
        [worker_id] = agent.reward_register_worker(external)["workerIds"]
        os.environ["AGENTD_REWARD_WORKER_ID"] = worker_id
        print(f"registered as {worker_id}", flush=True)
    else:
        worker_id = os.environ["AGENTD_REWARD_WORKER_ID"]
    parent = os.getppid()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    try:
        return serve(agent, worker_id, stop, lambda: external is not None or os.getppid() == parent)
    finally:
        if external is not None:
            try:
                agent.reward_leave()
            except AgentError as err:
                print(f"leaving failed: {err}", file=sys.stderr, flush=True)


def serve(agent, worker_id, stop, parent_alive):
    unreachable_since = None
    while not stop and parent_alive():
        try:
            lease = agent.reward_fetch(worker_id, wait_ms=1000)
            unreachable_since = None
        except AgentError as err:
            if err.code in ("ERR_AGENT_UNREACHABLE", "ERR_CONNECTION_LOST"):
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > AGENT_GONE_S:
                    print("the agent is gone: exiting", file=sys.stderr, flush=True)
                    return 0
            elif err.code == "ERR_FORBIDDEN":
                # The agent does not take this process for the worker: asking again cannot help. Exiting
                # shows the supervisor (and its log) a crash instead of a worker that looks alive and idle.
                print(f"fetch refused: {err}", file=sys.stderr, flush=True)
                return 2
            elif err.code not in RETRYABLE:
                print(f"fetch failed: {err}", file=sys.stderr, flush=True)
            time.sleep(0.2)
            continue
        if lease is None:
            continue
        try:
            reward, output = compute(lease)
            agent.reward_complete(worker_id, lease["leaseId"], reward=reward, output=output)
        except AgentError as err:
            print(f"request {lease['requestId']}: {err}", file=sys.stderr, flush=True)
        except Exception as err:  # the reward function failed: the request ends as failed
            try:
                agent.reward_complete(worker_id, lease["leaseId"], error=str(err)[:4000])
            except AgentError as post_err:
                print(f"request {lease['requestId']}: {post_err}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
