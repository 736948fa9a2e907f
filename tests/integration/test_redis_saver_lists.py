"""Format 2 of the ``redis`` saver through real LangGraph graphs: each message stored once.

Every graph runs the same inputs on the redis saver and on ``InMemorySaver``; the whole
history (``get_state_history``, every checkpoint's values) must read the same.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from threadline.checkpoint.redis import DEFAULT_CACHE_BYTES, RedisCheckpointSaver
from threadline.redis_keys import ThreadKeys

from servers import RedisServer

pytestmark = pytest.mark.integration

TTL = 3600


def reply(state: MessagesState) -> dict[str, Any]:
    """Answers; ``edit`` replaces the previous answer, ``forget`` removes the first message."""
    last = state["messages"][-1].content
    if last == "edit" and len(state["messages"]) > 2:
        return {"messages": [AIMessage("edited", id=state["messages"][-2].id)]}
    if last == "forget":
        return {"messages": [RemoveMessage(id=state["messages"][0].id), AIMessage("forgot")]}
    return {"messages": [AIMessage(f"reply to: {last}")]}


def graph(saver: BaseCheckpointSaver) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


@pytest.fixture(params=[DEFAULT_CACHE_BYTES, 0], ids=["cache", "no-cache"])
async def saver(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> AsyncIterator[RedisCheckpointSaver]:
    s = RedisCheckpointSaver.from_url(redis_server.url(5), ttl_seconds=TTL, cache_bytes=request.param)
    yield s
    await s.aclose()


@pytest.fixture
def client(redis_server: RedisServer) -> Any:
    c = redis.Redis.from_url(redis_server.url(5))
    yield c
    c.close()


def shape(values: dict[str, Any]) -> list[tuple[str, str]]:
    """Messages as (type, content): ids are random per run."""
    return [(m.type, m.content) for m in values.get("messages", [])]


async def history(g: Any, config: dict) -> list[Any]:
    return [(shape(s.values), s.metadata["step"], s.next) async for s in g.aget_state_history(config)]


async def run_both(
    saver: RedisCheckpointSaver, inputs: list[str], fork_at: int | None = None
) -> tuple[Any, Any]:
    """The same conversation on both savers; with ``fork_at``, the last input is sent from
    the checkpoint ``fork_at`` steps back in history (time travel) instead of the latest."""
    results = []
    for s in (saver, InMemorySaver()):
        g = graph(s)
        config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
        for text in inputs[:-1] if fork_at else inputs:
            await g.ainvoke({"messages": [HumanMessage(text)]}, config)
        if fork_at:
            past = [st async for st in g.aget_state_history(config)][fork_at]
            await g.ainvoke({"messages": [HumanMessage(inputs[-1])]}, past.config)
            await g.ainvoke({"messages": [HumanMessage("after the fork")]}, config)
        results.append((g, config))
    return results[0], results[1]


async def test_each_message_is_stored_once(saver: RedisCheckpointSaver, client: redis.Redis) -> None:
    (g, config), (ref, ref_config) = await run_both(saver, [f"question {i}" for i in range(20)])
    assert await history(g, config) == await history(ref, ref_config)
    fields = client.hkeys(ThreadKeys.of(config["configurable"]["thread_id"]).blobs)
    items = [f for f in fields if f.count(b"\0") == 3]
    if saver.cache.max_bytes:
        assert len(items) == 40  # 20 questions, 20 replies: each once
    else:  # without the cache nothing to build on: every version whole, as in format 1
        assert items == []


@pytest.mark.parametrize("special", ["edit", "forget"])
async def test_a_replaced_or_removed_message_reads_as_in_memory(
    saver: RedisCheckpointSaver, special: str
) -> None:
    inputs = ["one", "two", "three", special, "four", "five"]
    (g, config), (ref, ref_config) = await run_both(saver, inputs)
    got = await history(g, config)
    assert got == await history(ref, ref_config)
    latest = got[0][0]
    if special == "edit":
        assert ("ai", "edited") in latest and ("ai", "reply to: three") not in latest
    else:
        assert latest[0] == ("ai", "reply to: one") and ("ai", "forgot") in latest
    # A fresh replica reads the same from Redis alone.
    cold = RedisCheckpointSaver(saver._client, ttl_seconds=TTL)
    assert await history(graph(cold), config) == got


@pytest.mark.parametrize("fork_at", [1, 4, 9])
async def test_a_fork_from_an_old_checkpoint_reads_as_in_memory(
    saver: RedisCheckpointSaver, fork_at: int
) -> None:
    inputs = ["one", "two", "three", "four", "fork"]
    (g, config), (ref, ref_config) = await run_both(saver, inputs, fork_at=fork_at)
    got = await history(g, config)
    assert got == await history(ref, ref_config)
    assert ("human", "fork") in got[0][0]
    cold = RedisCheckpointSaver(saver._client, ttl_seconds=TTL)
    assert await history(graph(cold), config) == got


async def test_prune_keeps_the_items_the_latest_needs(
    saver: RedisCheckpointSaver, client: redis.Redis
) -> None:
    (g, config), _ref = await run_both(saver, ["one", "two", "edit", "three"])
    before = shape((await g.aget_state(config)).values)
    await saver.aprune([config["configurable"]["thread_id"]])
    cold = RedisCheckpointSaver(saver._client, ttl_seconds=TTL)
    assert shape((await graph(cold).aget_state(config)).values) == before
    # The lineage the edit left behind is gone; the one in use is whole.
    items = [
        f
        for f in client.hkeys(ThreadKeys.of(config["configurable"]["thread_id"]).blobs)
        if f.count(b"\0") == 3
    ]
    assert len(items) == (len(before) if saver.cache.max_bytes else 0)
    await g.ainvoke({"messages": [HumanMessage("four")]}, config)
    assert shape((await graph(cold).aget_state(config)).values)[-2:] == [
        ("human", "four"),
        ("ai", "reply to: four"),
    ]


async def test_written_bytes_per_turn_stay_flat_and_reach_metrics(saver: RedisCheckpointSaver) -> None:
    from prometheus_client import REGISTRY

    from threadline.checkpoint.instrumented import instrument

    backend = f"redis-test-{uuid.uuid4().hex[:6]}"
    g = graph(instrument(saver, backend))
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}

    def written() -> float:
        return sum(REGISTRY.get_sample_value(
            "threadline_checkpoint_written_bytes_total", {"backend": backend, "op": op}
        ) or 0 for op in ("put", "put_writes"))  # fmt: skip

    per_turn = []
    for i in range(40):
        before = written()
        await g.ainvoke({"messages": [HumanMessage(f"question {i:02d}")]}, config)
        per_turn.append(written() - before)
    assert per_turn[5] > 0
    if saver.cache.max_bytes:  # each message once: turn 40 writes what turn 5 wrote, give or take
        assert per_turn[39] < 1.5 * per_turn[5], per_turn
    else:  # whole lists: grows with the conversation
        assert per_turn[39] > 3 * per_turn[5], per_turn
    assert written() == sum(saver.written_bytes.values())


def writes_shape(t: Any) -> list[tuple[str, Any]]:
    """Pending writes as (channel, value), messages as (type, content): ids are random."""
    return [
        (ch, [(m.type, m.content) for m in v] if isinstance(v, list) else v)
        for _task, ch, v in t.pending_writes
    ]


def input_shape(t: Any) -> Any:
    """The graph input a checkpoint holds (``__start__``), messages as (type, content)."""
    value = t.checkpoint["channel_values"].get("__start__")
    return {k: [(m.type, m.content) for m in v] for k, v in value.items()} if value else value


async def test_pending_writes_are_stored_by_reference_and_read_as_in_memory(
    saver: RedisCheckpointSaver, client: redis.Redis
) -> None:
    """Format 3: a step's writes are the messages its child checkpoint appended; they are
    stored as references to those items, and every checkpoint's pending writes still read as
    InMemorySaver's, also from a fresh replica."""
    inputs = [f"question {i}" for i in range(10)]
    (_g, config), (ref, ref_config) = await run_both(saver, inputs)
    expected = [writes_shape(t) async for t in ref.checkpointer.alist(ref_config)]
    cold = RedisCheckpointSaver(saver._client, ttl_seconds=TTL)
    for reader in (saver, cold):
        assert [writes_shape(t) async for t in reader.alist(config)] == expected
        for t in [t async for t in reader.alist(config)][::3]:  # by id too
            assert writes_shape(await reader.aget_tuple(t.config)) == writes_shape(t)
    # Each turn's input ({"messages": [question]}) is stored by reference to the question's
    # item once the next checkpoint stored it, and reads as InMemorySaver's everywhere.
    inputs_expected = [input_shape(t) async for t in ref.checkpointer.alist(ref_config)]
    for reader in (saver, cold):
        assert [input_shape(t) async for t in reader.alist(config)] == inputs_expected
        for t in [t async for t in reader.alist(config)][::3]:
            assert input_shape(await reader.aget_tuple(t.config)) == input_shape(t)
    blobs = client.hvals(ThreadKeys.of(config["configurable"]["thread_id"]).blobs)
    drefs = [b for b in blobs if b.startswith(b"tl-dref\x00")]
    assert len(drefs) == (len(inputs) if saver.cache.max_bytes else 0)
    # Format 3 keeps a checkpoint's writes together in one field: count the records.
    values = client.hvals(ThreadKeys.of(config["configurable"]["thread_id"]).w)
    refs = [i for v in values for i in range(v.count(b":tl-ref"))]
    # Each turn writes the human message (input step) and the reply (node step), each by
    # reference (LangGraph runs a step's put_writes and its child's put concurrently: the
    # writes go first in the batcher's order, so this holds on a loaded machine too).
    if saver.cache.max_bytes:
        assert len(refs) == 2 * len(inputs)
    else:  # no lists stored item by item: nothing to refer to
        assert refs == []


@pytest.mark.parametrize("with_write", [True, False], ids=["write-and-input", "input-only"])
async def test_a_write_by_reference_keeps_its_items_when_the_child_is_deleted(
    saver: RedisCheckpointSaver, with_write: bool
) -> None:
    """The child checkpoint that stored the items is deleted (delete_for_runs), the parent
    whose write and input refer to them stays: both still read whole."""
    from langgraph.checkpoint.base import empty_checkpoint

    thread_id = f"t-{uuid.uuid4()}"
    memory = InMemorySaver()
    parent, child = empty_checkpoint(), empty_checkpoint()
    message = HumanMessage("kept by reference", id="h1")
    # The parent holds the input by reference too (a dict of lists: format 3).
    parent["channel_values"] = {"__start__": {"messages": [message]}}
    parent["channel_versions"] = {"__start__": memory.get_next_version(None, None)}
    child["channel_values"] = {"messages": [message]}
    child["channel_versions"] = {"messages": memory.get_next_version(None, None)}
    base = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for s in (saver, memory):
        stored = await s.aput(base, parent, {"run_id": "r1"}, parent["channel_versions"])
        if with_write:
            await s.aput_writes(stored, [("messages", [message])], "task-1", "")
        await s.aput(stored, child, {"run_id": "r2"}, child["channel_versions"])
    blobs = await saver._client.hvals(ThreadKeys.of(thread_id).blobs)
    assert any(b.startswith(b"tl-dref\x00") for b in blobs) == bool(saver.cache.max_bytes)
    await saver.adelete_for_runs(["r2"])  # InMemorySaver has no delete_for_runs
    for reader in (saver, RedisCheckpointSaver(saver._client, ttl_seconds=TTL)):
        got = await reader.aget_tuple(stored)
        expected = await memory.aget_tuple(stored)
        assert got is not None and got.pending_writes == expected.pending_writes
        assert got.checkpoint["channel_values"] == expected.checkpoint["channel_values"]
    assert (
        await saver.aget_tuple({"configurable": {**stored["configurable"], "checkpoint_id": child["id"]}})
        is None
    )


async def test_an_input_turned_into_a_reference_during_a_read_reads_whole(
    saver: RedisCheckpointSaver,
) -> None:
    """A replica reads a checkpoint whose input blob another replica's put turns into a
    reference between the read's script and its HMGET (seen under load with two replicas):
    the read fetches the items too instead of failing on the reference."""
    from langgraph.checkpoint.base import empty_checkpoint

    thread_id = f"t-{uuid.uuid4()}"
    writer = RedisCheckpointSaver(saver._client, ttl_seconds=TTL)  # format 3, cache on
    reader = RedisCheckpointSaver(saver._client, ttl_seconds=TTL, cache_bytes=saver.cache.max_bytes)
    message = HumanMessage("question", id="h1")
    parent, child = empty_checkpoint(), empty_checkpoint()
    parent["channel_values"] = {"__start__": {"messages": [message]}}
    parent["channel_versions"] = {"__start__": writer.get_next_version(None, None)}
    child["channel_values"] = {"messages": [message]}
    child["channel_versions"] = {"messages": writer.get_next_version(None, None)}
    base = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    stored = await writer.aput(base, parent, {}, parent["channel_versions"])

    # Drive the reader's load step by step (the I/O is real), with the child's put between
    # its script and its HMGET.
    op = reader._op_load(thread_id, [("", parent["id"])])
    step = op.send(None)
    reply = await reader._io_async(step)  # the script: the input is still a whole value
    await writer.aput(stored, child, {}, child["channel_versions"])
    blobs = await saver._client.hvals(ThreadKeys.of(thread_id).blobs)
    assert any(b.startswith(b"tl-dref\x00") for b in blobs)  # rewritten in between
    while True:
        try:
            step = op.send(reply)
        except StopIteration as done:
            (got,) = done.value
            break
        reply = await reader._io_async(step)
    assert got.checkpoint["channel_values"]["__start__"] == {"messages": [message]}
