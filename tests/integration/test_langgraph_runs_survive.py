"""Runs that outlive their replica (ADR 0010), driven by the real ``langgraph-sdk`` against real
replicas on one real Redis: takeover after SIGKILL and after a pause past the lease,
interrupts resumed on another replica, ``rollback`` (strategy and cancel action), ``enqueue``
order across replicas, ``on_disconnect=continue``. The graph is ``graphs/steps.py``: each step
appends its number, so a step lost or run twice shows in the result."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from langgraph_sdk import get_client

from client import API_KEY
from servers import redis_env, until

pytestmark = pytest.mark.integration

GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"
# A 1 s lease: a dead replica's runs are taken over about a second later.
ENV = {"LANGGRAPH_CONFIG": str(GRAPHS), "TURN_LEASE_SECONDS": "1", "TURN_LEASE_WAIT_SECONDS": "10"}


def numbers(n: int, tag: str = "") -> list[str]:
    return [f"{tag}{i}" for i in range(1, n + 1)]


@pytest.fixture
def replicas(redis_server, start_replica):
    env = redis_env(redis_server, **ENV)

    def start(*names: str):
        procs = [start_replica(env, name) for name in names]
        return procs, [get_client(url=p.url, api_key=API_KEY) for p in procs]

    return start


async def steps_done(client, tid: str) -> int:
    return len((await client.threads.get_state(tid))["values"].get("done") or [])


async def test_a_killed_replicas_run_is_taken_over_and_finished_from_its_last_checkpoint(replicas) -> None:
    (doomed, _), (a, b) = replicas("doomed", "survivor")
    tid = (await a.threads.create())["thread_id"]
    # Resumable: its events are replayed once it ended (as langgraph-api keeps only those).
    run = await a.runs.create(tid, "steps", input={"steps": 6, "delay": 0.3}, stream_resumable=True)
    queued = await b.runs.create(tid, "steps", input={"steps": 1, "tag": "q"})
    await until(lambda: _at_least(b, tid, 2), "two steps checkpointed")
    doomed.kill()  # SIGKILL mid-run: no chance to record anything
    result = await b.runs.join(tid, run["run_id"])
    # Every step exactly once: the completed ones were not run again, the rest ran on b.
    assert result["done"] == numbers(6)
    assert (await b.runs.get(tid, run["run_id"]))["status"] == "success"
    attempts = [p.data["attempt"] async for p in b.runs.join_stream(tid, run["run_id"], last_event_id="-1")
                if p.event == "metadata"]  # fmt: skip
    assert attempts == [1, 2]
    # The run queued behind it runs after it, on the survivor: the thread is not stuck.
    after = await b.runs.join(tid, queued["run_id"])
    assert after["done"] == [*numbers(6), "q1"]
    assert (await b.threads.get(tid))["status"] == "idle"


async def _at_least(client, tid: str, n: int) -> bool:
    return await steps_done(client, tid) >= n


async def test_a_background_run_of_a_killed_replica_is_finished_by_the_sweep_with_nobody_waiting(
    replicas,
) -> None:
    (doomed, _), (a, b) = replicas("doomed", "survivor")
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.create(tid, "steps", input={"steps": 4, "delay": 0.3})
    await until(lambda: _at_least(b, tid, 1), "a step checkpointed")
    doomed.kill()

    async def ended() -> bool:
        return (await b.runs.get(tid, run["run_id"]))["status"] == "success"

    # Nobody joins: only the survivor's sweep can find the orphan.
    await until(ended, "the orphan finished by the sweep")
    assert (await b.threads.get_state(tid))["values"]["done"] == numbers(4)


async def test_a_replica_paused_past_its_lease_is_fenced_and_its_run_finished_once_elsewhere(
    replicas,
) -> None:
    (paused, _), (a, b) = replicas("paused", "other")
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.create(tid, "steps", input={"steps": 6, "delay": 0.3}, stream_resumable=True)
    await until(lambda: _at_least(b, tid, 2), "two steps checkpointed")
    paused.signal(signal.SIGSTOP)
    try:
        result = await b.runs.join(tid, run["run_id"])
    finally:
        paused.signal(signal.SIGCONT)
    assert result["done"] == numbers(6)
    # The woken replica's executor finds the run taken: no step, status or end written twice.
    taken = ("run taken over by another replica", "run lost its thread's lease")
    await until(lambda: any(line in paused.logs() for line in taken), "the woken replica to see it taken")
    assert (await b.threads.get_state(tid))["values"]["done"] == numbers(6)
    assert (await a.runs.get(tid, run["run_id"]))["status"] == "success"
    events = [p.event async for p in b.runs.join_stream(tid, run["run_id"], last_event_id="-1")]
    assert "metadata" in events and "error" not in events


async def test_an_interrupt_is_resumed_on_another_replica_after_its_runner_was_killed(replicas) -> None:
    (doomed, _), (a, b) = replicas("doomed", "survivor")
    tid = (await a.threads.create())["thread_id"]
    result = await a.runs.wait(tid, "steps", input={"steps": 1, "ask": "ship it"})
    assert result["__interrupt__"][0]["value"] == {"question": "ship it", "after": 1}
    doomed.kill()
    state = await b.threads.get_state(tid)
    assert state["tasks"][0]["interrupts"][0]["value"]["question"] == "ship it"
    assert (await b.threads.get(tid))["status"] == "interrupted"
    resumed = await b.runs.wait(tid, "steps", command={"resume": "yes"})
    assert resumed["answers"] == ["ship it=yes"]
    assert (await b.threads.get(tid))["status"] == "idle"


async def test_rollback_deletes_what_the_running_run_wrote_before_the_new_run_starts(replicas) -> None:
    _, (a, b) = replicas("a", "b")
    tid = (await a.threads.create())["thread_id"]
    await a.runs.wait(tid, "steps", input={"steps": 1, "tag": "kept"})
    doomed = await a.runs.create(tid, "steps", input={"steps": 20, "delay": 0.1, "tag": "gone"})
    await until(lambda: _at_least(b, tid, 3), "the doomed run checkpointed")
    after = await b.runs.wait(tid, "steps", input={"steps": 1, "tag": "new"}, multitask_strategy="rollback")
    assert after["done"] == ["kept1", "new1"]
    assert (await a.runs.get(tid, doomed["run_id"]))["status"] == "interrupted"
    history = await b.threads.get_history(tid, limit=100)
    assert doomed["run_id"] not in {h["metadata"].get("run_id") for h in history}


async def test_cancel_with_rollback_from_another_replica_leaves_the_thread_as_before(replicas) -> None:
    _, (a, b) = replicas("a", "b")
    tid = (await a.threads.create())["thread_id"]
    await a.runs.wait(tid, "steps", input={"steps": 2, "tag": "kept"})
    before = (await b.threads.get_state(tid))["values"]
    run = await a.runs.create(tid, "steps", input={"steps": 20, "delay": 0.1, "tag": "gone"})
    await until(lambda: _at_least(b, tid, 4), "the run checkpointed")
    result = await b.runs.cancel(tid, run["run_id"], wait=True, action="rollback")
    assert result == before  # the thread's values once rolled back (langgraph-api: no __error__)
    assert (await b.threads.get_state(tid))["values"] == before
    assert (await b.threads.get(tid))["status"] == "idle"
    again = await a.runs.wait(tid, "steps", input={"steps": 1, "tag": "next"})
    assert again["done"] == ["kept1", "kept2", "next1"]


async def test_enqueue_runs_start_in_acceptance_order_across_replicas(replicas) -> None:
    _, (a, b) = replicas("a", "b")
    tid = (await a.threads.create())["thread_id"]
    created = []
    for i in range(6):
        client = (a, b)[i % 2]
        created.append(
            await client.runs.create(tid, "steps", input={"steps": 1, "delay": 0.05, "tag": f"r{i}."})
        )
    final = await b.runs.join(tid, created[-1]["run_id"])
    assert final["done"] == [f"r{i}.1" for i in range(6)]


async def test_on_disconnect_continue_lets_the_run_finish_for_a_later_join(replicas) -> None:
    _, (a, b) = replicas("a", "b")
    tid = (await a.threads.create())["thread_id"]
    stream = a.runs.stream(tid, "steps", input={"steps": 3, "delay": 0.2}, on_disconnect="continue")
    first = await anext(stream)
    await stream.aclose()
    result = await b.runs.join(tid, first.data["run_id"])
    assert result["done"] == numbers(3)


async def test_a_run_cancelled_mid_tool_call_leaves_a_thread_the_next_run_continues(replicas) -> None:
    _, (a, b) = replicas("a", "b")
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.create(tid, "tools", input={"messages": [{"role": "user", "content": "x"}]})

    async def in_tool() -> bool:
        return (await b.threads.get_state(tid))["next"] == ["tools"]

    await until(in_tool, "the model's tool call checkpointed, the tool running")
    await b.runs.cancel(tid, run["run_id"], wait=True)
    messages = (await b.threads.get_state(tid))["values"]["messages"]
    assert [m["type"] for m in messages] == ["human", "ai", "tool"]
    assert messages[2]["tool_call_id"] == messages[1]["tool_calls"][0]["id"]
    assert messages[2]["status"] == "error"
    # Its state has a next step (the agent, past the answered tool): interrupted, as in
    # langgraph-api, which labels a thread by whether its state has a next step.
    assert (await b.threads.get_state(tid))["next"] == ["agent"]
    assert (await b.threads.get(tid))["status"] == "interrupted"
    # The graph's model refuses a history with an unanswered tool call: this run proves there
    # is none (it calls the tool again, for the new message, and answers).
    after = await a.runs.wait(tid, "tools", input={"messages": [{"role": "user", "content": "y"}]})
    assert after["messages"][-1]["content"] == "answer: found y"


async def test_the_interrupt_strategy_mid_tool_call_leaves_a_thread_the_new_run_continues(replicas) -> None:
    _, (a, b) = replicas("a", "b")
    tid = (await a.threads.create())["thread_id"]
    first = await a.runs.create(tid, "tools", input={"messages": [{"role": "user", "content": "x"}]})

    async def in_tool() -> bool:
        return (await b.threads.get_state(tid))["next"] == ["tools"]

    await until(in_tool, "the tool running")
    after = await b.runs.wait(
        tid, "tools", input={"messages": [{"role": "user", "content": "y"}]}, multitask_strategy="interrupt"
    )
    assert after["messages"][-1]["content"] == "answer: found y"
    assert (await a.runs.get(tid, first["run_id"]))["status"] == "interrupted"


async def test_a_run_outlasting_the_drain_is_handed_over_when_its_replica_stops(
    redis_server, start_replica
) -> None:
    env = redis_env(redis_server, **{**ENV, "DRAIN_SECONDS": "1"})
    leaving, staying = start_replica(env, "leaving"), start_replica(env, "staying")
    a = get_client(url=leaving.url, api_key=API_KEY)
    b = get_client(url=staying.url, api_key=API_KEY)
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.create(tid, "steps", input={"steps": 12, "delay": 0.3}, stream_resumable=True)
    await until(lambda: _at_least(b, tid, 1), "a step checkpointed")
    leaving.signal(signal.SIGTERM)  # drains 1 s, then hands the run over (it needs ~3.6 s)
    result = await b.runs.join(tid, run["run_id"])
    assert result["done"] == numbers(12)
    assert leaving.proc.wait(timeout=20) in (0, -signal.SIGTERM)
    attempts = [p.data["attempt"] async for p in b.runs.join_stream(tid, run["run_id"], last_event_id="-1")
                if p.event == "metadata"]  # fmt: skip
    assert attempts == [1, 2]
