"""Upgrades of the ``redis`` saver's storage format, against a real ``redis-server``.

A thread stored by the previous release (``legacy_redis_saver/format1_thread.json``, written by
that release's saver, frozen in ``tests/legacy_redis_saver``) reads and continues under format
2. During a rolling update old and new replicas share one Redis: with
``CHECKPOINT_REDIS_FORMAT=1`` the new release writes what the old one reads; a previous
release that meets format 2 fails loudly instead of reading a conversation as empty.
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from langchain_core.messages import HumanMessage

from threadline.checkpoint.redis import RedisCheckpointSaver
from threadline.redis_keys import ThreadKeys

from legacy_redis_saver.make_fixture import FIXTURE, graph
from legacy_redis_saver.saver import RedisCheckpointSaver as LegacySaver
from servers import RedisServer

pytestmark = pytest.mark.integration

TTL = 3600


def load_fixture(client: redis.Redis, thread_id: str) -> list[list[str]]:
    """Store the fixture's keys as ``thread_id``'s; returns its messages ``[type, content]``."""
    data = json.loads(Path(FIXTURE).read_text())
    keys = ThreadKeys.of(thread_id)
    for suffix, content in data["keys"].items():
        key = getattr(keys, suffix)
        if "hash" in content:
            mapping = {base64.b64decode(f): base64.b64decode(v) for f, v in content["hash"].items()}
            client.hset(key, mapping=mapping)
        else:
            client.zadd(key, {base64.b64decode(m): 0 for m in content["zset"]})
        client.expire(key, TTL)
    return data["messages"]


def contents(state: Any) -> list[list[str]]:
    return [[m.type, m.content] for m in state.values["messages"]]


@pytest.fixture
def client(redis_server: RedisServer) -> Any:
    c = redis.Redis.from_url(redis_server.url(4))
    yield c
    c.close()


async def test_a_thread_of_the_previous_release_reads_and_continues(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    thread_id = f"t-{uuid.uuid4()}"
    old_messages = load_fixture(client, thread_id)
    config = {"configurable": {"thread_id": thread_id}}
    saver = RedisCheckpointSaver.from_url(redis_server.url(4), ttl_seconds=TTL)
    legacy = LegacySaver.from_url(redis_server.url(4), ttl_seconds=TTL)
    try:
        g = graph(saver)
        before = await g.aget_state(config)
        assert contents(before) == old_messages
        old_ids = [s.config["configurable"]["checkpoint_id"] async for s in g.aget_state_history(config)]
        old_states = [
            await g.aget_state({"configurable": {**config["configurable"], "checkpoint_id": i}})
            for i in old_ids
        ]
        # The pending write of the fixture's last checkpoint is still pending.
        assert (await saver.aget_tuple(config)).pending_writes[0][0] == "task-pending"

        for turn in range(5, 8):
            await g.ainvoke({"messages": [HumanMessage(f"question {turn}")]}, config)

        after = contents(await g.aget_state(config))
        assert after[: len(old_messages)] == old_messages
        assert after[len(old_messages) :] == [
            m for t in range(5, 8) for m in (["human", f"question {t}"], ["ai", f"reply to: question {t}"])
        ]
        # Time travel into the old part: every old checkpoint reads as before, with both savers
        # (the old ones refer to whole values only).
        history = [s async for s in g.aget_state_history(config)]
        assert len(history) == len(old_ids) + 3 * 3
        for checkpoint_id, state in zip(old_ids, old_states, strict=True):
            cfg = {
                "configurable": {
                    **config["configurable"],
                    "checkpoint_ns": "",
                    "checkpoint_id": checkpoint_id,
                }
            }
            assert (await g.aget_state(cfg)).values == state.values
            assert (await legacy.aget_tuple(cfg)).checkpoint["channel_values"] == (
                await saver.aget_tuple(cfg)
            ).checkpoint["channel_values"]
        # The continuation is stored item by item: one item field per new message.
        fields = client.hkeys(ThreadKeys.of(thread_id).blobs)
        assert sum(1 for f in fields if f.count(b"\0") == 3) >= 6
    finally:
        await saver.aclose()
        await legacy.aclose()


async def test_rolling_update_old_and_new_replicas_share_a_thread_with_format_1(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    """Old and new replicas answer alternate turns of one conversation; each reads all of it."""
    thread_id = f"t-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread_id}}
    new = RedisCheckpointSaver.from_url(redis_server.url(4), ttl_seconds=TTL, format=1)
    old = LegacySaver.from_url(redis_server.url(4), ttl_seconds=TTL)
    try:
        replicas = [graph(old), graph(new)]
        expected: list[list[str]] = []
        for turn in range(1, 9):
            g = replicas[turn % 2]
            state = await g.ainvoke({"messages": [HumanMessage(f"question {turn}")]}, config)
            expected += [["human", f"question {turn}"], ["ai", f"reply to: question {turn}"]]
            assert [[m.type, m.content] for m in state["messages"]] == expected, turn
        for g in replicas:
            assert contents(await g.aget_state(config)) == expected
            assert len([s async for s in g.aget_state_history(config)]) == 8 * 3
        assert not [f for f in client.hkeys(ThreadKeys.of(thread_id).blobs) if f.count(b"\0") == 3]
    finally:
        await new.aclose()
        await old.aclose()


async def test_the_previous_release_fails_loudly_on_format_2(redis_server: RedisServer) -> None:
    """Never a conversation read as empty: the old release cannot decode a descriptor."""
    thread_id = f"t-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread_id}}
    new = RedisCheckpointSaver.from_url(redis_server.url(4), ttl_seconds=TTL)
    old = LegacySaver.from_url(redis_server.url(4), ttl_seconds=TTL)
    try:
        await graph(new).ainvoke({"messages": [HumanMessage("question 1")]}, config)
        with pytest.raises(NotImplementedError, match="tl-seg"):
            await old.aget_tuple(config)
    finally:
        await new.aclose()
        await old.aclose()


def test_format_3_versions_are_short_and_order_after_the_long_ones() -> None:
    """LangGraph compares versions as strings: a thread written with 51-character versions
    continues in order with format 3's 25-character ones (and formats 1-2 keep the long ones)."""
    from langgraph.checkpoint.memory import InMemorySaver

    client = redis.asyncio.Redis()  # never connected: versions need no I/O
    short = RedisCheckpointSaver(client, ttl_seconds=TTL)
    long_ = RedisCheckpointSaver(client, ttl_seconds=TTL, format=2)
    old = InMemorySaver().get_next_version(None, None)
    assert long_.get_next_version(old, None).split(".")[0] == f"{2:032}"
    versions = [old]
    for _ in range(12):
        versions.append(short.get_next_version(versions[-1], None))
    assert all(len(v) == 25 for v in versions[1:])
    assert versions == sorted(versions)  # each greater than the one before, the long one first
    assert max(versions) == versions[-1] and int(versions[-1].split(".")[0]) == 13
    assert short.get_next_version(7, None).startswith(f"{8:012}.")


# --- from format 2 (the previous release, frozen in tests/legacy_redis_saver_v2) ---------------


async def test_rolling_update_from_format_2_release_with_format_2(redis_server: RedisServer) -> None:
    """During the rollout (``CHECKPOINT_REDIS_FORMAT=2``) replicas of the previous release and
    of this one answer alternate turns of one conversation; each reads all of it, and every
    checkpoint (values and pending writes) reads the same through both."""
    from legacy_redis_saver_v2.saver import RedisCheckpointSaver as Format2Release

    thread_id = f"t-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread_id}}
    new = RedisCheckpointSaver.from_url(redis_server.url(4), ttl_seconds=TTL, format=2)
    old = Format2Release.from_url(redis_server.url(4), ttl_seconds=TTL)
    try:
        replicas = [graph(old), graph(new)]
        expected: list[list[str]] = []
        for turn in range(1, 9):
            state = await replicas[turn % 2].ainvoke({"messages": [HumanMessage(f"question {turn}")]}, config)
            expected += [["human", f"question {turn}"], ["ai", f"reply to: question {turn}"]]
            assert [[m.type, m.content] for m in state["messages"]] == expected, turn
        for g in replicas:
            assert contents(await g.aget_state(config)) == expected
            assert len([s async for s in g.aget_state_history(config)]) == 8 * 3
        olds = [(t.checkpoint["channel_values"], t.pending_writes) async for t in old.alist(config)]
        news = [(t.checkpoint["channel_values"], t.pending_writes) async for t in new.alist(config)]
        assert olds == news
    finally:
        await new.aclose()
        await old.aclose()


async def test_a_format_2_thread_continues_in_format_3(redis_server: RedisServer) -> None:
    """A thread the previous release wrote continues under format 3 (versions in order, the
    old checkpoints as they were), and the previous release then fails loudly on it rather
    than reading it wrong."""
    from legacy_redis_saver_v2.saver import RedisCheckpointSaver as Format2Release

    thread_id = f"t-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread_id}}
    new = RedisCheckpointSaver.from_url(redis_server.url(4), ttl_seconds=TTL)
    old = Format2Release.from_url(redis_server.url(4), ttl_seconds=TTL)
    try:
        for turn in range(1, 4):
            await graph(old).ainvoke({"messages": [HumanMessage(f"question {turn}")]}, config)
        before = [
            (t.config, t.checkpoint["channel_values"], t.pending_writes) async for t in old.alist(config)
        ]
        for turn in range(4, 7):
            await graph(new).ainvoke({"messages": [HumanMessage(f"question {turn}")]}, config)
        assert contents(await graph(new).aget_state(config)) == [
            m for t in range(1, 7) for m in (["human", f"question {t}"], ["ai", f"reply to: question {t}"])
        ]
        for cfg, values, writes in before:
            t = await new.aget_tuple(cfg)
            assert t is not None and (t.checkpoint["channel_values"], t.pending_writes) == (values, writes)
        with pytest.raises(NotImplementedError, match="zlibd"):
            await old.aget_tuple(config)
    finally:
        await new.aclose()
        await old.aclose()
