"""``DeltaChannel`` graphs and retention (``CHECKPOINT_KEEP_LAST``) on the ``redis`` saver.

A ``DeltaChannel`` stores no value between snapshots: reading rebuilds it from the writes on
the parent chain (``get_delta_channel_history``), which the saver walks inside Redis in one
script, however deep. Retention keeps the N newest checkpoints of each namespace and never one
that a pending interrupt or a kept checkpoint's delta chain still needs. Every graph also runs
on ``InMemorySaver``: the states must read the same.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from threadline.checkpoint.redis import RedisCheckpointSaver
from threadline.checkpoint.redis.writes import RETAIN_BATCH

from servers import RedisServer

pytestmark = pytest.mark.integration

TTL = 3600


def extend(state: list[str], writes: list[list[str]]) -> list[str]:
    return state + [x for w in writes for x in w]


class Notes(TypedDict):
    notes: Annotated[list[str], DeltaChannel(extend, snapshot_frequency=4)]
    count: int


def delta_graph(saver: BaseCheckpointSaver) -> Any:
    builder = StateGraph(Notes)
    builder.add_node(
        "note", lambda s: {"notes": [f"note {s.get('count', 0)}"], "count": s.get("count", 0) + 1}
    )
    builder.add_edge(START, "note")
    return builder.compile(checkpointer=saver)


@pytest.fixture
async def saver(redis_server: RedisServer) -> AsyncIterator[RedisCheckpointSaver]:
    s = RedisCheckpointSaver.from_url(redis_server.url(6), ttl_seconds=TTL)
    yield s
    await s.aclose()


def trips(saver: RedisCheckpointSaver) -> list[Any]:
    """Record the I/O steps of ``saver``'s async methods: each step is one round trip."""
    steps: list[Any] = []
    inner = saver._io_async

    async def counted(step: Any) -> Any:
        steps.append(step)
        return await inner(step)

    saver._io_async = counted  # type: ignore[method-assign]
    return steps


def norm(history: Any) -> dict[str, Any]:
    """A delta history without task ids (random per run)."""
    return {ch: {**h, "writes": [(c, v) for _task, c, v in h["writes"]]} for ch, h in history.items()}


async def run(g: Any, thread_id: str, turns: int) -> None:
    config = {"configurable": {"thread_id": thread_id}}
    for i in range(turns):
        await g.ainvoke({"notes": [f"input {i}"]}, config)


async def test_a_delta_channel_graph_reads_as_in_memory_in_two_round_trips(
    saver: RedisCheckpointSaver,
) -> None:
    tid, ref_tid = f"t-{uuid.uuid4()}", f"t-{uuid.uuid4()}"
    memory = InMemorySaver()
    g, ref = delta_graph(saver), delta_graph(memory)
    await run(g, tid, 11)
    await run(ref, ref_tid, 11)
    config, ref_config = ({"configurable": {"thread_id": t}} for t in (tid, ref_tid))
    state = await g.aget_state(config)
    assert state.values == (await ref.aget_state(ref_config)).values
    assert state.values["notes"][:3] == ["input 0", "note 0", "input 1"] and len(state.values["notes"]) == 22
    ours = [s.values async for s in g.aget_state_history(config)]
    assert ours == [s.values async for s in ref.aget_state_history(ref_config)]

    # The saver's history for every checkpoint equals InMemorySaver's (ids differ: by position).
    ids = [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(config)]
    ref_ids = [t.config["configurable"]["checkpoint_id"] async for t in memory.alist(ref_config)]
    cold = RedisCheckpointSaver(saver._client, ttl_seconds=TTL)
    steps = trips(cold)
    for i, ref_i in zip(ids, ref_ids, strict=True):
        before = len(steps)
        got = await cold.aget_delta_channel_history(
            config={"configurable": {"thread_id": tid, "checkpoint_ns": "", "checkpoint_id": i}},
            channels=["notes", "count"],
        )
        assert len(steps) - before <= 2, i
        expected = await memory.aget_delta_channel_history(
            config={"configurable": {"thread_id": ref_tid, "checkpoint_ns": "", "checkpoint_id": ref_i}},
            channels=["notes", "count"],
        )
        assert norm(got) == norm(expected), i
    # The sync twin (tools, scripts) walks the same way.
    last = {"configurable": {"thread_id": tid, "checkpoint_ns": "", "checkpoint_id": ids[0]}}
    assert saver.get_delta_channel_history(
        config=last, channels=["notes"]
    ) == await saver.aget_delta_channel_history(config=last, channels=["notes"])


async def test_a_delta_chain_deeper_than_a_snapshot_interval_still_takes_two_round_trips(
    saver: RedisCheckpointSaver,
) -> None:
    class Deep(TypedDict):
        notes: Annotated[list[str], DeltaChannel(extend, snapshot_frequency=1000)]

    builder = StateGraph(Deep)
    builder.add_node("note", lambda s: {"notes": ["n"]})
    builder.add_edge(START, "note")
    g = builder.compile(checkpointer=saver)
    tid = f"t-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": tid}}
    for i in range(60):
        await g.ainvoke({"notes": [str(i)]}, config)
    steps = trips(saver)
    history = await saver.aget_delta_channel_history(config=config, channels=["notes"])
    assert len(steps) <= 2
    assert "seed" not in history["notes"] and len(history["notes"]["writes"]) > 100
    assert len((await g.aget_state(config)).values["notes"]) == 120


async def test_keep_last_keeps_the_newest_and_what_their_delta_chains_need(redis_server: RedisServer) -> None:
    keep = 3
    s = RedisCheckpointSaver.from_url(redis_server.url(6), ttl_seconds=TTL, keep_last=keep)
    try:
        tid, ref_tid = f"t-{uuid.uuid4()}", f"t-{uuid.uuid4()}"
        g, ref = delta_graph(s), delta_graph(InMemorySaver())
        await run(g, tid, 25)
        await run(ref, ref_tid, 25)
        config = {"configurable": {"thread_id": tid}}
        left = [t async for t in s.alist(config)]
        assert len(left) < 25 * 2  # trimmed
        assert len(left) <= keep + RETAIN_BATCH + 2 * 4  # + at most a snapshot interval of chain
        # Reads are whole: the chain back to the last snapshot was kept.
        assert (await g.aget_state(config)).values == (
            await ref.aget_state({"configurable": {"thread_id": ref_tid}})
        ).values
        cold = RedisCheckpointSaver(s._client, ttl_seconds=TTL)
        assert (await delta_graph(cold).aget_state(config)).values["notes"][-1] == "note 24"
    finally:
        await s.aclose()


async def test_keep_last_on_a_messages_graph_drops_old_checkpoints_only(redis_server: RedisServer) -> None:
    s = RedisCheckpointSaver.from_url(redis_server.url(6), ttl_seconds=TTL, keep_last=2)
    try:
        builder = StateGraph(MessagesState)
        builder.add_node("reply", lambda st: {"messages": [("ai", f"reply {len(st['messages'])}")]})
        builder.add_edge(START, "reply")
        g = builder.compile(checkpointer=s)
        config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
        for i in range(20):
            await g.ainvoke({"messages": [HumanMessage(f"q {i}")]}, config)
        history = [st async for st in g.aget_state_history(config)]
        assert len(history) <= 2 + RETAIN_BATCH + 2
        assert [m.content for m in history[0].values["messages"]][-2:] == ["q 19", "reply 39"]
        assert len(history[0].values["messages"]) == 40
    finally:
        await s.aclose()


async def test_retention_never_drops_a_pending_interrupt(redis_server: RedisServer) -> None:
    s = RedisCheckpointSaver.from_url(redis_server.url(6), ttl_seconds=TTL, keep_last=1)
    try:

        def ask(st: MessagesState) -> dict[str, Any]:
            answer = interrupt("approve?")
            return {"messages": [("ai", f"approved: {answer}")]}

        builder = StateGraph(MessagesState)
        builder.add_node("ask", ask)
        builder.add_edge(START, "ask")
        g = builder.compile(checkpointer=s)
        config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
        for i in range(6):
            await g.ainvoke({"messages": [HumanMessage(f"q {i}")]}, config)
            await g.ainvoke(Command(resume=f"yes {i}"), config)
        await g.ainvoke({"messages": [HumanMessage("last")]}, config)  # interrupted now
        # Trim as hard as retention can, then resume: the interrupt is still there.
        await s.aretain(config["configurable"]["thread_id"], 1)
        state = await g.aget_state(config)
        assert state.next == ("ask",) and state.tasks[0].interrupts[0].value == "approve?"
        out = await g.ainvoke(Command(resume="finally"), config)
        assert out["messages"][-1].content == "approved: finally"
        assert len(out["messages"]) == 14
    finally:
        await s.aclose()


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis", "postgres", "redis-stack"])
async def test_a_delta_channel_graph_works_on_every_backend(
    backend: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    """Through ``open_checkpointer``, as the service opens it: the same states as InMemorySaver."""
    from checkpoint_graph import settings_for

    from threadline.checkpoint import open_checkpointer

    ref = delta_graph(InMemorySaver())
    await run(ref, "ref", 7)
    expected = [s.values async for s in ref.aget_state_history({"configurable": {"thread_id": "ref"}})]
    async with open_checkpointer(settings_for(backend, request, tmp_path)) as saver:
        g = delta_graph(saver)
        tid = f"t-{uuid.uuid4()}"
        await run(g, tid, 7)
        config = {"configurable": {"thread_id": tid}}
        assert [s.values async for s in g.aget_state_history(config)] == expected
        assert (await g.aget_state(config)).values["notes"][-1] == "note 6"


async def test_prune_keep_latest_keeps_what_a_delta_channel_needs(saver: RedisCheckpointSaver) -> None:
    """LangGraph's caveat for prune: dropping the ancestors between the latest checkpoint and
    the last snapshot would read a DeltaChannel as empty. This prune keeps them."""
    tid, ref_tid = f"t-{uuid.uuid4()}", f"t-{uuid.uuid4()}"
    g, ref = delta_graph(saver), delta_graph(InMemorySaver())
    await run(g, tid, 10)
    await run(ref, ref_tid, 10)
    config = {"configurable": {"thread_id": tid}}
    before = len([t async for t in saver.alist(config)])
    await saver.aprune([tid])
    after = len([t async for t in saver.alist(config)])
    assert 1 < after < before
    cold = RedisCheckpointSaver(saver._client, ttl_seconds=TTL)
    expected = (await ref.aget_state({"configurable": {"thread_id": ref_tid}})).values
    assert (await delta_graph(cold).aget_state(config)).values == expected
    await g.ainvoke({"notes": ["more"]}, config)
    assert (await delta_graph(cold).aget_state(config)).values["notes"][-2:] == ["more", "note 10"]
