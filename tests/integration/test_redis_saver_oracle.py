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
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from threadline.checkpoint.redis import DEFAULT_CACHE_BYTES, RedisCheckpointSaver
from threadline.redis_keys import ThreadKeys

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


# --- message lists stored item by item (format 2) ---------------------------------------------


class Conversation:
    """A random walk over a thread's checkpoints, applied identically to several savers.

    Each step puts a checkpoint whose ``messages`` list is its parent's plus zero to two new
    messages (most steps), with one message replaced or removed, or a fork from an older
    checkpoint; some steps change a second, scalar channel; some add pending writes. The
    writer alternates between two redis savers with separate caches, so one of them often
    extends a list it last saw a few versions ago (and meets the other's items).
    """

    def __init__(self, rng: random.Random, thread_id: str) -> None:
        self.rng = rng
        self.thread_id = thread_id
        self.checkpoints: list[dict[str, Any]] = []  # every checkpoint put, oldest first
        self.counter = 0
        # Messages of the latest checkpoint's pending writes: like a MessagesState step, the
        # next put usually appends them (format 3 then stores the writes by reference).
        self.pending: list[Any] = []

    def message(self) -> Any:
        self.counter += 1
        kind = HumanMessage if self.counter % 2 else AIMessage
        return kind(f"message {self.counter} " + "x" * self.rng.randint(0, 300), id=f"m{self.counter}")

    def next_put(self) -> tuple[dict, dict, dict, dict]:
        """``(config, checkpoint, metadata, new_versions)`` of the next put."""
        rng = self.rng
        roll = rng.random()
        parent = self.checkpoints[-1] if self.checkpoints else None
        if parent is not None and roll < 0.1:
            parent = rng.choice(self.checkpoints)  # a fork (time travel)
        old = list(parent["channel_values"].get("messages", [])) if parent else []
        if old and roll > 0.93:
            i = rng.randrange(len(old))
            old[i] = type(old[i])(f"replaced {i}", id=old[i].id)
        elif old and roll > 0.88:
            del old[rng.randrange(len(old))]
        elif old and roll > 0.85:
            old = [m.model_copy() for m in old]  # equal, not identical: compared by value
        pending, self.pending = self.pending, []
        if pending and parent is self.checkpoints[-1] and roll < 0.8:
            new = old + pending
        else:
            new = old + [self.message() for _ in range(rng.choice([0, 1, 1, 2]))]
        cp = empty_checkpoint()
        versions = dict(parent["channel_versions"]) if parent else {}
        values = dict(parent["channel_values"]) if parent else {}
        changed = {}
        if new != values.get("messages") or rng.random() < 0.3 or not parent:
            changed["messages"] = new
        if rng.random() < 0.3:
            changed["count"] = rng.randint(0, 9)
        for channel, value in changed.items():
            values[channel] = value
            versions[channel] = InMemorySaver().get_next_version(versions.get(channel), None)
        cp["channel_values"], cp["channel_versions"] = values, versions
        self.checkpoints.append(cp)
        config = conf(self.thread_id, "", parent["id"] if parent else None)
        return (
            config,
            cp,
            {"source": "loop", "step": len(self.checkpoints)},
            {c: versions[c] for c in changed},
        )


async def latest(s: BaseCheckpointSaver, thread_id: str, checkpoint_id: str | None = None) -> Any:
    t = await s.aget_tuple(conf(thread_id, "", checkpoint_id))
    return plain(t) if t else None


@pytest.mark.parametrize(
    ("cache_bytes", "second_format"),
    [(DEFAULT_CACHE_BYTES, 3), (0, 3), (DEFAULT_CACHE_BYTES, 1), (DEFAULT_CACHE_BYTES, 2)],
    ids=["cache", "no-cache", "mixed-formats", "formats-2-and-3"],
)
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_reads_match_a_saver_without_the_optimisation(
    redis_server: RedisServer, cache_bytes: int, second_format: int, seed: int
) -> None:
    """Reads of lists stored item by item equal InMemorySaver's, step by step, through both
    writers and a third saver that never writes (cold reads, then warm ones of newer
    versions)."""
    rng = random.Random(seed)
    thread_id = f"t-{uuid.uuid4()}"
    url = redis_server.url(3)
    savers = [
        RedisCheckpointSaver.from_url(url, ttl_seconds=TTL, cache_bytes=cache_bytes),
        RedisCheckpointSaver.from_url(url, ttl_seconds=TTL, cache_bytes=cache_bytes, format=second_format),
        RedisCheckpointSaver.from_url(url, ttl_seconds=TTL, cache_bytes=cache_bytes),
    ]
    memory = InMemorySaver()
    walk = Conversation(rng, thread_id)
    try:
        for step in range(150):
            writer = savers[0] if rng.random() < 0.6 else savers[1]
            config, cp, metadata, versions = walk.next_put()
            stored = await writer.aput(config, cp, metadata, versions)
            await memory.aput(config, cp, metadata, versions)
            if rng.random() < 0.5:
                walk.pending = [walk.message() for _ in range(rng.choice([1, 1, 2]))]
                writes = [("messages", list(walk.pending)), ("count", step)]
                await writer.aput_writes(stored, writes, f"task-{step}", "~0")
                await memory.aput_writes(stored, writes, f"task-{step}", "~0")
            expected = await latest(memory, thread_id)
            for i, reader in enumerate(savers):
                if i == 2 and rng.random() < 0.5:
                    continue  # the reader lets a few versions go by, then catches up
                assert await latest(reader, thread_id) == expected, (seed, step, i)
            old = rng.choice(walk.checkpoints)["id"]
            assert await latest(rng.choice(savers), thread_id, old) == await latest(memory, thread_id, old), (
                seed,
                step,
            )
        assert await listed(savers[2], conf(thread_id)) == await listed(memory, conf(thread_id)), seed
        records = await savers[0]._client.hvals(ThreadKeys.of(thread_id).w)
        by_ref = [r for r in records if b":tl-ref" in r]
        assert by_ref if cache_bytes else not by_ref, seed  # the path under test was taken
    finally:
        for s in savers:
            await s.aclose()
