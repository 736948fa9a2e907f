"""The ``redis`` saver against ``InMemorySaver`` as the oracle, over seeded random sequences.

Both savers get exactly the same calls (same checkpoints, ids, versions, metadata and writes);
every read must then return the same tuples. A failing seed is printed in the assertion, so a
failure can be replayed.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from threadline.checkpoint.redis import DEFAULT_CACHE_BYTES, RedisCheckpointSaver

from servers import RedisServer

pytestmark = pytest.mark.integration

TTL = 3600
NAMESPACES = ("", "child:1")


@pytest.fixture(params=[DEFAULT_CACHE_BYTES, 0], ids=["cache", "no-cache"])
async def saver(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> AsyncIterator[RedisCheckpointSaver]:
    s = RedisCheckpointSaver.from_url(redis_server.url(1), ttl_seconds=TTL, cache_bytes=request.param)
    yield s
    await s.aclose()


def conf(thread_id: str, ns: str | None = "", checkpoint_id: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": thread_id}
    if ns is not None:
        c["checkpoint_ns"] = ns
    if checkpoint_id:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


async def put_same(
    savers: list[BaseCheckpointSaver], rng: random.Random, thread_id: str, n: int
) -> dict[str, list[str]]:
    """``n`` checkpoints spread over :data:`NAMESPACES`, each a child of the previous one of
    its namespace, with random metadata and some pending writes, put into every saver.

    Returns the checkpoint ids per namespace, oldest first.
    """
    ids: dict[str, list[str]] = {ns: [] for ns in NAMESPACES}
    last: dict[str, Any] = {}
    for step in range(n):
        ns = rng.choices(NAMESPACES, weights=(85, 15))[0]
        prev = last.get(ns)
        cp = empty_checkpoint()
        old_versions = prev["channel_versions"] if prev else {}
        cp["channel_versions"] = dict(old_versions)
        cp["channel_values"] = dict(prev["channel_values"]) if prev else {}
        new_versions = {}
        for channel in rng.sample(["a", "b", "c"], rng.randint(1, 2)):
            cp["channel_values"][channel] = [step, rng.random()]
            new_versions[channel] = cp["channel_versions"][channel] = InMemorySaver().get_next_version(
                old_versions.get(channel), None
            )
        metadata = {"source": rng.choice(["loop", "input"]), "step": step, "tag": rng.choice("xyz")}
        parent = ids[ns][-1] if ids[ns] else None
        writes = [("a", rng.random())] if rng.random() < 0.3 else []
        for s in savers:
            stored = await s.aput(conf(thread_id, ns, parent), cp, dict(metadata), new_versions)
            if writes:
                await s.aput_writes(stored, writes, f"task-{step}")
        ids[ns].append(cp["id"])
        last[ns] = cp
    return ids


def plain(t: CheckpointTuple) -> tuple[Any, ...]:
    return (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)


async def listed(s: BaseCheckpointSaver, config: dict | None, **kw: Any) -> list[tuple[Any, ...]]:
    return [plain(t) async for t in s.alist(config, **kw)]


@pytest.mark.parametrize("count", [99, 101, 260, 330])
async def test_list_pages_past_100_checkpoints_like_in_memory(
    saver: RedisCheckpointSaver, count: int
) -> None:
    """Regression (issue 10, point 7): ``list`` returned at most 100 checkpoints, because the
    loop over one page of loaded tuples rebound the list being paged."""
    seed = 7000 + count
    rng = random.Random(seed)
    thread_id = f"t-{uuid.uuid4()}"
    memory = InMemorySaver()
    ids = await put_same([saver, memory], rng, thread_id, count)
    everything = [i for ns in NAMESPACES for i in ids[ns]]
    assert len(everything) == count

    # Every namespace: the count, and the same tuples (the order across namespaces differs by
    # design: newest id first here, one namespace after the other in InMemorySaver).
    ours = await listed(saver, conf(thread_id, None))
    assert len(ours) == count, seed
    assert sorted(ours, key=repr) == sorted(await listed(memory, conf(thread_id, None)), key=repr), seed

    queries: list[tuple[dict, dict]] = [({}, {}), ({}, {"limit": None})]
    for _ in range(40):
        ns = rng.choice(NAMESPACES)
        kw: dict[str, Any] = {}
        if rng.random() < 0.5 and ids[ns]:
            kw["before"] = conf(thread_id, ns, rng.choice(ids[ns]))
        if rng.random() < 0.5:
            kw["limit"] = rng.choice([1, 50, 99, 100, 101, 150, 250, 251, 1000])
        if rng.random() < 0.5:
            kw["filter"] = rng.choice([{"source": "loop"}, {"tag": "x"}, {"source": "input", "tag": "y"}])
        queries.append(({"ns": ns}, kw))
    for where, kw in queries:
        ns = where.get("ns", "")
        config = conf(thread_id, ns)
        expected = await listed(memory, config, **kw)
        got = await listed(saver, config, **kw)
        assert got == expected, (seed, ns, kw, len(got), len(expected))
    # The unfiltered, unlimited list of the busiest namespace is past 100 when count is.
    assert len(await listed(saver, conf(thread_id, ""))) == len(ids[""])
    if count > 300:
        assert len(ids[""]) > 250, seed
    # Across namespaces with a limit: the newest ``limit`` of everything.
    newest = sorted(everything, reverse=True)[:150]
    assert [
        t[0]["configurable"]["checkpoint_id"] for t in await listed(saver, conf(thread_id, None), limit=150)
    ] == newest
