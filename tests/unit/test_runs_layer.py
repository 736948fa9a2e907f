"""The runs/threads layer in one process, without HTTP: LangGraph's in-memory saver, the
in-process record store and lease (the single-process backends' pieces)."""

from __future__ import annotations

import asyncio

import orjson
import pytest
import redis.exceptions
from langgraph.checkpoint.memory import InMemorySaver

from threadline.agent.builtin import BuiltinChatModel, builtin_reply
from threadline.agent.graph import build_graph
from threadline.checkpoint.memory import RollbackInMemorySaver
from threadline.config import QuotaSettings
from threadline.lease import LocalTurnLease
from threadline.runs.assistants import Assistants
from threadline.runs.errors import Conflict, NotFound
from threadline.runs.records_local import LocalRecordStore
from threadline.runs.runs import Runs
from threadline.runs.threads import Threads

from servers import until

pytestmark = pytest.mark.unit


def layer(
    token_delay_ms: float = 0, timeout: float | None = None, records: LocalRecordStore | None = None
) -> Runs:
    graph = build_graph(BuiltinChatModel(token_delay_ms=token_delay_ms), InMemorySaver())
    assistants = Assistants({"chat": graph})
    records, lease = records or LocalRecordStore(), LocalTurnLease(wait_seconds=5)
    threads = Threads(records, assistants, lease, graph.checkpointer)
    return Runs(threads, assistants, records, lease, QuotaSettings(), timeout_seconds=timeout)


def say(text: str, **extra) -> dict:
    return {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": text}]}, **extra}


async def test_runs_queue_on_a_thread_and_each_sees_the_one_before() -> None:
    runs = layer()
    thread = await runs.threads.create("alice")
    tid = thread["thread_id"]
    first = await runs.create("alice", tid, say("one"))
    second = await runs.create("alice", tid, say("two"))
    await runs.join("alice", tid, first.run_id)
    result = orjson.loads(await runs.join("alice", tid, second.run_id))
    contents = [m["content"] for m in result["messages"]]
    assert contents[1] == builtin_reply(["one"], 1) and contents[3] == builtin_reply(contents[:3], 2)
    with pytest.raises(NotFound):
        await runs.get("bob", tid, first.run_id)


async def test_a_run_longer_than_the_timeout_is_stopped_and_the_thread_moves_on() -> None:
    runs = layer(token_delay_ms=200, timeout=0.3)  # 9 tokens at 200 ms: ~1.6 s
    tid = (await runs.threads.create("alice"))["thread_id"]
    run = await runs.create("alice", tid, say("slow", stream_mode=["messages-tuple"]))
    result = orjson.loads(await runs.join("alice", tid, run.run_id))
    assert result["__error__"]["error"] == "TimeoutError"
    assert (await runs.get("alice", tid, run.run_id)).status == "timeout"
    assert (await runs.threads.get("alice", tid))["status"] == "idle"
    fast = await runs.create("alice", tid, say("fast"))  # no streaming: no token delay
    assert "messages" in orjson.loads(await runs.join("alice", tid, fast.run_id))


async def test_reject_while_busy_and_resume_without_an_interrupt_are_conflicts() -> None:
    runs = layer(token_delay_ms=100)
    tid = (await runs.threads.create("alice"))["thread_id"]
    busy = await runs.create("alice", tid, say("long", stream_mode=["messages-tuple"]))
    with pytest.raises(Conflict):
        await runs.create("alice", tid, say("now", multitask_strategy="reject"))
    await runs.join("alice", tid, busy.run_id)
    with pytest.raises(Conflict):
        await runs.create("alice", tid, {"assistant_id": "chat", "command": {"resume": "x"}})
    await asyncio.sleep(0)  # a loop turn: a run the refused creates had set going would be listed
    assert [r.status for r in await runs.list("alice", tid)] == ["success"]


async def _is_running(runs: Runs, tid: str, run_id: str) -> bool:
    return (await runs.get("alice", tid, run_id)).status == "running"


class _UnpolledCancels(LocalRecordStore):
    """Records whose executor never gets round to looking for a cancel: the window in which
    Redis's executor polls (every 0.2 s), stretched over the whole run."""

    async def wait_cancel(self, thread_id: str, run_id: str, on_watched: object = None) -> str:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class _FlakyRollback(RollbackInMemorySaver):
    """A saver whose deleting of a run's checkpoints meets a store outage twice (a Redis
    restart while a cancelled run is rolled back)."""

    failures = 2

    async def adelete_for_runs(self, run_ids) -> None:  # type: ignore[no-untyped-def]
        if self.failures:
            self.failures -= 1
            raise redis.exceptions.ConnectionError("Redis restarting")
        await super().adelete_for_runs(run_ids)


async def test_a_cancel_accepted_as_the_run_ended_wins_over_a_store_outage_while_it_is_settled() -> None:
    """The run ends on its own just after a rollback was accepted, and the rollback then meets
    a store outage: it is waited out and carried out; the run never reads "success"."""
    saver = _FlakyRollback()
    graph = build_graph(BuiltinChatModel(token_delay_ms=20), saver)
    assistants = Assistants({"chat": graph})
    records, lease = _UnpolledCancels(), LocalTurnLease(wait_seconds=5)
    runs = Runs(Threads(records, assistants, lease, saver), assistants, records, lease, QuotaSettings())
    tid = (await runs.threads.create("alice"))["thread_id"]
    run = await runs.create("alice", tid, say("hi", stream_mode=["messages-tuple"]))
    await until(lambda: _is_running(runs, tid, run.run_id), "the run to start", interval=0.01)
    await runs.cancel("alice", tid, run.run_id, "rollback")
    result = orjson.loads(await runs.join("alice", tid, run.run_id))
    assert result == {}  # the thread's values once rolled back, as langgraph-api: no __error__
    assert (await runs.get("alice", tid, run.run_id)).status == "interrupted"
    assert saver.failures == 0
    assert (await runs.threads.state("alice", tid))["values"] == {}  # rolled back


async def test_a_run_that_ends_after_its_cancel_was_accepted_is_cancelled() -> None:
    runs = layer(token_delay_ms=20, records=_UnpolledCancels())
    tid = (await runs.threads.create("alice"))["thread_id"]
    run = await runs.create("alice", tid, say("hi", stream_mode=["messages-tuple"]))
    await until(lambda: _is_running(runs, tid, run.run_id), "the run to start", interval=0.01)
    await runs.cancel("alice", tid, run.run_id, "interrupt")
    result = orjson.loads(await runs.join("alice", tid, run.run_id))  # ran to its end
    assert "__error__" not in result and [m["type"] for m in result["messages"]] == ["human", "ai"]
    assert (await runs.get("alice", tid, run.run_id)).status == "interrupted"
    # A cancel after the end is refused: the run stays as it ended.
    done = await runs.create("alice", tid, say("again"))
    await runs.join("alice", tid, done.run_id)
    await runs.cancel("alice", tid, done.run_id, "interrupt")
    assert (await runs.get("alice", tid, done.run_id)).status == "success"
