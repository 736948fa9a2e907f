"""threadline's ``redis`` checkpoint saver against a real ``redis-server`` (no modules).

Covers what the conformance suite does not: any db number, the key layout (hash tag, TTL on
every key, nothing left after delete), the round-trip budget (counted on the connection),
fencing, the decoded-blob cache (another replica's writes, copies, fenced puts), concurrent
writers, the sync twins, and pending-write order against InMemorySaver.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
from langgraph.graph import START, MessagesState, StateGraph
from redis.crc import key_slot

from threadline.checkpoint.errors import FencedError
from threadline.checkpoint.redis import DEFAULT_CACHE_BYTES, RedisCheckpointSaver
from threadline.redis_keys import ThreadKeys, fence_counter_key, lease_key

from servers import RedisServer

pytestmark = pytest.mark.integration

TTL = 3600


def new_thread() -> str:
    return f"t-{uuid.uuid4()}"


def cfg(thread_id: str, ns: str = "", checkpoint_id: str | None = None, **extra: Any) -> dict:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns, **extra}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint(saver: BaseCheckpointSaver, values: dict[str, Any], prev: dict | None = None):
    """A checkpoint whose changed channels (vs ``prev``) get fresh versions from the saver."""
    cp = empty_checkpoint()
    old = prev["channel_versions"] if prev else {}
    cp["channel_versions"] = dict(old)
    new_versions = {}
    for channel, value in values.items():
        cp["channel_values"][channel] = value
        new_versions[channel] = cp["channel_versions"][channel] = saver.get_next_version(
            old.get(channel), None
        )
    if prev:
        for channel, value in prev["channel_values"].items():
            cp["channel_values"].setdefault(channel, value)
    return cp, new_versions


async def put(saver, thread_id, values, prev=None, parent=None, ns="", meta=None, **conf):
    cp, versions = checkpoint(saver, values, prev)
    stored = await saver.aput(
        cfg(thread_id, ns, parent, **conf),
        cp,
        meta or {"source": "loop", "step": 0},
        versions,
    )
    return cp, stored


def scan_thread(client: redis.Redis, thread_id: str) -> list[bytes]:
    return sorted(client.scan_iter(match=f"tl:{{{thread_id}}}:*"))


@pytest.fixture
def sync_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url(1))
    yield client
    client.close()


@pytest.fixture
async def saver(redis_server: RedisServer) -> AsyncIterator[RedisCheckpointSaver]:
    s = RedisCheckpointSaver.from_url(redis_server.url(1), ttl_seconds=TTL)
    yield s
    await s.aclose()


def take_lease(client: redis.Redis, tid: str) -> str:
    """Take the thread's lease as the lease module does (fresh token from the fence counter)."""
    token = str(client.incr(fence_counter_key(tid)))
    client.set(lease_key(tid), token, px=10_000)
    return token


# --- conformance ------------------------------------------------------------------------------


@pytest.mark.parametrize("cache_bytes", [DEFAULT_CACHE_BYTES, 0], ids=["cache", "no-cache"])
async def test_conformance_full_with_all_extended_capabilities(
    redis_server: RedisServer, cache_bytes: int
) -> None:
    @checkpointer_test(name="threadline-redis")
    async def factory() -> AsyncIterator[BaseCheckpointSaver]:
        s = RedisCheckpointSaver.from_url(redis_server.url(2), ttl_seconds=TTL, cache_bytes=cache_bytes)
        yield s
        await s.aclose()

    report = await validate(factory)
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert report.passed_all_base(), failures
    for capability in ("copy_thread", "delete_for_runs", "prune"):
        result = report.results[capability]
        assert result.detected and result.passed is True, (capability, result.failures)
    assert report.conformance_level() == "FULL"


# --- any db, layout, TTL, delete --------------------------------------------------------------


@pytest.mark.parametrize("db", [1, 7])
async def test_works_in_any_db(redis_server: RedisServer, db: int) -> None:
    s = RedisCheckpointSaver.from_url(redis_server.url(db), ttl_seconds=TTL)
    probe = redis.Redis.from_url(redis_server.url(db))
    other = redis.Redis.from_url(redis_server.url(0))
    try:
        tid = new_thread()
        cp, stored = await put(s, tid, {"messages": ["hello"]})
        await s.aput_writes(stored, [("messages", "w")], "task-1")
        got = await s.aget_tuple(cfg(tid))
        assert got is not None and got.checkpoint["id"] == cp["id"]
        assert got.checkpoint["channel_values"] == {"messages": ["hello"]}
        assert got.pending_writes == [("task-1", "messages", "w")]
        assert [t.checkpoint["id"] async for t in s.alist(cfg(tid))] == [cp["id"]]
        assert scan_thread(probe, tid), "keys live in the configured db"
        assert not scan_thread(other, tid), "nothing leaks into db 0"
    finally:
        await s.aclose()
        probe.close()
        other.close()


async def test_every_key_of_a_thread_shares_one_hash_slot() -> None:
    for tid in (new_thread(), "odd{thread}id", "a}b"):
        keys = [*ThreadKeys.of(tid), lease_key(tid), fence_counter_key(tid)]
        assert len({key_slot(k.encode()) for k in keys}) == 1, tid
        assert len(set(keys)) == len(ThreadKeys._fields)


async def test_ttl_on_every_key_and_refreshed_on_write(
    saver: RedisCheckpointSaver, sync_client: redis.Redis
) -> None:
    tid = new_thread()
    take_lease(sync_client, tid)
    cp1, _stored = await put(saver, tid, {"a": 1, "b": "x"}, fencing_token="1")
    await saver.aput_writes(cfg(tid, "", cp1["id"], fencing_token="1"), [("a", 2)], "task")
    await put(saver, tid, {"c": 1}, ns="child:1", fencing_token="1")

    keys = scan_thread(sync_client, tid)
    # Format 3 keeps a checkpoint's writes in one field: no widx index.
    widx = {b"widx"} if saver.format < 3 else set()
    assert {k.rsplit(b":", 1)[1] for k in keys} == {b"idx", b"cp", b"blobs", *widx, b"w", b"lease", b"fence"}
    for key in keys:
        assert sync_client.ttl(key) > 0, key

    # Shorten every data key's TTL, write once more: all of them are back at ~TTL. The lease
    # keeps its own (short) TTL: only the lease module may extend it.
    for key in keys:
        if not key.endswith(b":lease"):
            sync_client.expire(key, 100)
    await put(saver, tid, {"a": 3}, prev=cp1, parent=cp1["id"], fencing_token="1")
    for key in scan_thread(sync_client, tid):
        ttl = sync_client.ttl(key)
        assert (ttl <= 10) if key.endswith(b":lease") else (TTL - 60 < ttl <= TTL), (
            key,
            ttl,
        )


async def test_delete_thread_leaves_no_key(saver: RedisCheckpointSaver, sync_client: redis.Redis) -> None:
    tid, other = new_thread(), new_thread()
    for ns in ("", "child:1"):
        _cp, stored = await put(saver, tid, {"a": ns}, ns=ns)
        await saver.aput_writes(stored, [("a", 1), (ERROR, "boom")], "task")
    await put(saver, other, {"a": 1})
    assert scan_thread(sync_client, tid)

    await saver.adelete_thread(tid)

    assert scan_thread(sync_client, tid) == []
    assert await saver.aget_tuple(cfg(tid)) is None
    assert await saver.aget_tuple(cfg(other)) is not None


async def test_delete_thread_keeps_a_live_lease_and_the_fence_counter(
    saver: RedisCheckpointSaver, sync_client: redis.Redis
) -> None:
    tid = new_thread()
    token = take_lease(sync_client, tid)
    await put(saver, tid, {"a": 1}, fencing_token=token)

    await saver.adelete_thread(tid)

    left = scan_thread(sync_client, tid)
    assert left == sorted([fence_counter_key(tid).encode(), lease_key(tid).encode()])
    assert all(sync_client.ttl(k) > 0 for k in left)
    # The turn in flight keeps writing under its lease.
    await put(saver, tid, {"a": 2}, fencing_token=token)


async def test_prune_keeps_only_blobs_the_kept_checkpoints_use(
    saver: RedisCheckpointSaver, sync_client: redis.Redis
) -> None:
    tid = new_thread()
    prev, parent = None, None
    for i in range(4):
        prev, stored = await put(saver, tid, {"a": i}, prev=prev, parent=parent)
        parent = stored["configurable"]["checkpoint_id"]
    prev, _ = await put(saver, tid, {"b": "kept"}, prev=prev, parent=parent)  # `a` unchanged
    await saver.aprune([tid])
    latest = await saver.aget_tuple(cfg(tid))
    assert latest is not None and latest.checkpoint["channel_values"] == {
        "a": 3,
        "b": "kept",
    }
    assert sync_client.hlen(ThreadKeys.of(tid).blobs) == 2
    assert len([t async for t in saver.alist(cfg(tid))]) == 1


# --- round trips ------------------------------------------------------------------------------


class _Counted:
    """An async client whose connections count their sends: one send is one round trip."""

    def __init__(self, url: str) -> None:
        counter = self

        class Connection(aioredis.Connection):
            async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
                counter.sends += 1
                await super().send_packed_command(command, check_health)

        self.sends = 0
        pool = aioredis.ConnectionPool.from_url(url, connection_class=Connection)
        self.client = aioredis.Redis(connection_pool=pool)

    async def trips(self, coro: Any) -> tuple[int, Any]:
        before = self.sends
        result = await coro
        return self.sends - before, result


async def test_round_trip_budget(redis_server: RedisServer, sync_client: redis.Redis) -> None:
    counted = _Counted(redis_server.url(1))
    s = RedisCheckpointSaver(counted.client, ttl_seconds=TTL)
    try:
        tid = new_thread()
        await put(s, tid, {"warm": 1})  # connect + load the scripts once
        # ... and the pool's connection too (the script batcher keeps one of its own): large
        # blobs go in a MULTI on a pooled connection.
        await put(s, new_thread(), {"warm": "x" * 20_000})
        await s.aget_tuple(cfg(tid))
        await s.aput_writes(cfg(tid, "", (await s.aget_tuple(cfg(tid))).checkpoint["id"]), [], "t")

        cp, versions = checkpoint(s, {"messages": ["x" * 20_000], "other": 1})
        n, _stored = await counted.trips(s.aput(cfg(tid), cp, {"step": 1}, versions))
        assert n == 1, "aput with blobs"
        cp2, versions2 = checkpoint(s, {})
        n, _ = await counted.trips(s.aput(cfg(tid, "", cp["id"]), cp2, {}, versions2))
        assert n == 1, "aput without blobs"

        token = take_lease(sync_client, tid)
        cp3, versions3 = checkpoint(s, {"messages": ["y"]}, cp)
        n, stored3 = await counted.trips(
            s.aput(cfg(tid, "", cp["id"], fencing_token=token), cp3, {}, versions3)
        )
        assert n == 1, "fenced aput"

        writes = [("messages", "a"), ("other", 2), (ERROR, "e")]
        n, _ = await counted.trips(s.aput_writes(stored3, writes, "task"))
        assert n == 1, "aput_writes"
        n, _ = await counted.trips(
            s.aput_writes(cfg(tid, "", cp3["id"], fencing_token=token), writes, "task2")
        )
        assert n == 1, "fenced aput_writes"

        n, latest = await counted.trips(s.aget_tuple(cfg(tid)))
        assert n == 1 and latest.checkpoint["id"] == cp3["id"], "latest aget_tuple, blobs cached"
        assert len(latest.pending_writes) == 6
        n, by_id = await counted.trips(s.aget_tuple(cfg(tid, "", cp["id"])))
        assert n == 2 and by_id.checkpoint["channel_values"]["other"] == 1, "aget_tuple by id"

        # A replica that did not write the thread: two round trips, then one.
        cold = RedisCheckpointSaver(counted.client, ttl_seconds=TTL)
        n, first = await counted.trips(cold.aget_tuple(cfg(tid)))
        assert n == 2 and first == latest, "latest aget_tuple, cold"
        n, again = await counted.trips(cold.aget_tuple(cfg(tid)))
        assert n == 1 and again == latest, "latest aget_tuple, warm"
        off = RedisCheckpointSaver(counted.client, ttl_seconds=TTL, cache_bytes=0)
        for _ in range(2):
            n, _ = await counted.trips(off.aget_tuple(cfg(tid)))
            assert n == 2, "latest aget_tuple, cache off"
    finally:
        await counted.client.aclose()


async def test_a_chat_turn_takes_four_round_trips_its_writes_stored_by_reference(
    redis_server: RedisServer, sync_client: redis.Redis
) -> None:
    """A one-node MessagesState turn with ``durability="sync"``: the load, then 3 puts and 2
    put_writes in 3 round trips. LangGraph runs a step's put_writes and its child checkpoint's
    put side by side; they share a batch, the writes first, so the put still stores them by
    reference (it used to wait for the writes' reply: 6 round trips)."""
    counted = _Counted(redis_server.url(1))
    s = RedisCheckpointSaver(counted.client, ttl_seconds=TTL)

    def answer(state: MessagesState) -> dict:
        return {"messages": [AIMessage("an answer")]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    g = builder.compile(checkpointer=s)
    tid = new_thread()
    try:
        for turn in range(3):
            n, _ = await counted.trips(
                g.ainvoke({"messages": [HumanMessage(f"question {turn}")]}, cfg(tid), durability="sync")
            )
            if turn:  # the first one connects and loads the scripts
                assert n == 4, f"turn {turn}"
        w = sync_client.hvals(ThreadKeys.of(tid).w)
        assert sum(v.count(b":tl-ref") for v in w) == 2 * 3  # each turn's question and answer
    finally:
        await counted.client.aclose()


# --- calls made together share a round trip (checkpoint/redis/pipelining.py) ----------------


async def test_puts_made_together_share_one_round_trip_and_each_lands(
    redis_server: RedisServer, sync_client: redis.Redis
) -> None:
    counted = _Counted(redis_server.url(1))
    s = RedisCheckpointSaver(counted.client, ttl_seconds=TTL)
    try:
        cp, warm = await put(s, new_thread(), {"warm": 1})  # connect + load the scripts once
        await s.aput_writes(warm, [("warm", 2)], "task")
        tids = [new_thread() for _ in range(20)]
        n, stored = await counted.trips(
            asyncio.gather(*(put(s, tid, {"n": i, "text": f"value {i}"}) for i, tid in enumerate(tids)))
        )
        assert n == 1, "20 puts made in one loop iteration"
        # Mixed: each thread's pending writes, and a put of a child, together.
        jobs = []
        for i, (tid, (cp, first)) in enumerate(zip(tids, stored, strict=True)):
            jobs.append(s.aput_writes(first, [("n", i * 10)], "task"))
            jobs.append(put(s, tid, {"n": i + 100}, prev=cp, parent=cp["id"]))
        n, _ = await counted.trips(asyncio.gather(*jobs))
        # Each put after its parent's writes in the batch: Redis has them when the put runs.
        assert n == 1, "the writes and the puts of the children, in one round trip"
        cold = RedisCheckpointSaver(redis.asyncio.Redis.from_url(redis_server.url(1)), ttl_seconds=TTL)
        for i, (tid, (_cp, first)) in enumerate(zip(tids, stored, strict=True)):
            latest = await cold.aget_tuple(cfg(tid))
            assert latest.checkpoint["channel_values"] == {"n": i + 100, "text": f"value {i}"}
            assert (await cold.aget_tuple(first)).pending_writes == [("task", "n", i * 10)]
        await cold._client.aclose()
    finally:
        await counted.client.aclose()


async def test_a_fenced_call_fails_alone_in_its_batch(
    saver: RedisCheckpointSaver, sync_client: redis.Redis
) -> None:
    tids = [new_thread() for _ in range(6)]
    old = take_lease(sync_client, tids[0])
    take_lease(sync_client, tids[0])  # another turn took the lease: `old` is stale
    outcomes = await asyncio.gather(
        put(saver, tids[0], {"n": 0}, fencing_token=old),
        *(put(saver, tid, {"n": i}) for i, tid in enumerate(tids[1:], 1)),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], FencedError)
    assert not any(isinstance(o, BaseException) for o in outcomes[1:])
    assert await saver.aget_tuple(cfg(tids[0])) is None
    for i, tid in enumerate(tids[1:], 1):
        assert (await saver.aget_tuple(cfg(tid))).checkpoint["channel_values"] == {"n": i}


async def test_a_batch_that_meets_noscript_lands_whole(
    redis_server: RedisServer, sync_client: redis.Redis
) -> None:
    counted = _Counted(redis_server.url(1))
    saver = RedisCheckpointSaver(counted.client, ttl_seconds=TTL)
    await put(saver, new_thread(), {"warm": 1})
    sync_client.script_flush()  # as after a Redis restart without its script cache
    tids = [new_thread() for _ in range(8)]
    n, _ = await counted.trips(asyncio.gather(*(put(saver, tid, {"n": i}) for i, tid in enumerate(tids))))
    assert n == 2, "the batch, then the script's load with the batch again"
    for i, tid in enumerate(tids):
        assert (await saver.aget_tuple(cfg(tid))).checkpoint["channel_values"] == {"n": i}
    await counted.client.aclose()


async def test_a_cancelled_caller_does_not_stop_the_others_in_its_batch(saver: RedisCheckpointSaver) -> None:
    tids = [new_thread() for _ in range(6)]
    await put(saver, new_thread(), {"warm": 1})
    jobs = [asyncio.ensure_future(put(saver, tid, {"n": i})) for i, tid in enumerate(tids)]
    await asyncio.sleep(0)  # every put has queued its script call
    jobs[0].cancel()
    outcomes = await asyncio.gather(*jobs, return_exceptions=True)
    assert isinstance(outcomes[0], asyncio.CancelledError)
    for i, tid in enumerate(tids[1:], 1):
        assert (await saver.aget_tuple(cfg(tid))).checkpoint["channel_values"] == {"n": i}


async def test_a_batch_on_a_stopped_redis_fails_every_call(fresh_redis: RedisServer) -> None:
    s = RedisCheckpointSaver.from_url(fresh_redis.url(1), ttl_seconds=TTL)
    try:
        await put(s, new_thread(), {"warm": 1})
        fresh_redis.stop()
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(put(s, new_thread(), {"n": i}) for i in range(5)), return_exceptions=True),
            timeout=20,  # a hang fails the test
        )
        assert all(isinstance(o, redis.ConnectionError) for o in outcomes), outcomes
    finally:
        await s.aclose()


# --- fencing ------------------------------------------------------------------------------------


def snapshot(client: redis.Redis, thread_id: str) -> dict[bytes, Any]:
    """Everything stored for a thread, with TTLs present (not their exact value)."""
    out: dict[bytes, Any] = {}
    for key in scan_thread(client, thread_id):
        kind = client.type(key)
        value = {
            b"hash": client.hgetall,
            b"zset": lambda k: client.zrange(k, 0, -1),
            b"string": client.get,
        }[kind](key)
        out[key] = (value, client.ttl(key) > 0)
    return out


async def test_stale_token_is_fenced_and_writes_nothing(
    saver: RedisCheckpointSaver, sync_client: redis.Redis
) -> None:
    tid = new_thread()
    old = take_lease(sync_client, tid)
    cp1, _stored1 = await put(saver, tid, {"messages": ["one"], "n": 1}, fencing_token=old)
    await saver.aput_writes(cfg(tid, "", cp1["id"], fencing_token=old), [("n", 2)], "t1")

    new = take_lease(sync_client, tid)  # another turn took the lease
    before = snapshot(sync_client, tid)

    stale = cfg(tid, "", cp1["id"], fencing_token=old)
    cp2, versions2 = checkpoint(saver, {"messages": ["two"], "n": 3}, cp1)
    with pytest.raises(FencedError) as raised:
        await saver.aput(stale, cp2, {"step": 2}, versions2)
    assert tid in str(raised.value) and old not in str(raised.value).replace(tid, "")
    cp_no_blobs, _ = checkpoint(saver, {}, cp1)
    with pytest.raises(FencedError):
        await saver.aput(stale, cp_no_blobs, {}, {})
    # Big values go in a plain HSET before the script (small ones in its ARGV): taken out again.
    cp_big, versions_big = checkpoint(saver, {"messages": ["two"], "n": "x" * 40_000}, cp1)
    with pytest.raises(FencedError):
        await saver.aput(stale, cp_big, {"step": 2}, versions_big)
    with pytest.raises(FencedError):
        await saver.aput_writes(stale, [("n", 9), (INTERRUPT, "x")], "t2")
    assert snapshot(sync_client, tid) == before

    latest = await saver.aget_tuple(cfg(tid))
    assert latest.checkpoint["id"] == cp1["id"]
    assert latest.checkpoint["channel_values"] == {"messages": ["one"], "n": 1}

    # The holder of the lease writes.
    fresh = cfg(tid, "", cp1["id"], fencing_token=new)
    await saver.aput(fresh, cp2, {"step": 2}, versions2)
    await saver.aput_writes(cfg(tid, "", cp2["id"], fencing_token=new), [("n", 4)], "t3")
    latest = await saver.aget_tuple(cfg(tid))
    assert latest.checkpoint["channel_values"] == {"messages": ["two"], "n": 3}
    assert latest.pending_writes == [("t3", "n", 4)]


async def test_token_without_any_lease_is_fenced(saver: RedisCheckpointSaver) -> None:
    tid = new_thread()
    with pytest.raises(FencedError):
        await put(saver, tid, {"a": 1}, fencing_token="5")
    assert await saver.aget_tuple(cfg(tid)) is None
    await put(saver, tid, {"a": 1}, fencing_token="")  # empty: unconditional
    assert await saver.aget_tuple(cfg(tid)) is not None


def _graph(checkpointer: BaseCheckpointSaver) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("reply", lambda state: {"messages": [AIMessage("r" * 200)]})
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=checkpointer)


async def test_fencing_token_flows_from_a_graph_run_to_every_write(
    saver: RedisCheckpointSaver, sync_client: redis.Redis
) -> None:
    seen: list[tuple[str, str | None]] = []

    class Spy(RedisCheckpointSaver):
        async def aput(self, config, *args):  # type: ignore[override]
            seen.append(("put", config["configurable"].get("fencing_token")))
            return await super().aput(config, *args)

        async def aput_writes(self, config, *args, **kwargs):  # type: ignore[override]
            seen.append(("writes", config["configurable"].get("fencing_token")))
            return await super().aput_writes(config, *args, **kwargs)

    spy = Spy(saver._client, ttl_seconds=TTL)
    graph = _graph(spy)
    tid = new_thread()
    token = take_lease(sync_client, tid)
    run = {"configurable": {"thread_id": tid, "fencing_token": token}}

    await graph.ainvoke({"messages": [("user", "hi")]}, run)

    assert {kind for kind, _ in seen} == {"put", "writes"}
    assert all(t == token for _, t in seen), seen
    stored = [t async for t in saver.alist(cfg(tid))]
    assert len(stored) == 3
    assert all("fencing_token" not in t.metadata for t in stored)

    take_lease(sync_client, tid)
    with pytest.raises(FencedError):
        await graph.ainvoke({"messages": [("user", "again")]}, run)
    assert len([t async for t in saver.alist(cfg(tid))]) == 3


# --- the decoded-blob cache ---------------------------------------------------------------------


async def test_a_replica_reads_what_another_replica_wrote_after_it(redis_server: RedisServer) -> None:
    a, b = (RedisCheckpointSaver.from_url(redis_server.url(1), ttl_seconds=TTL) for _ in range(2))
    try:
        tid = new_thread()
        cp1, stored1 = await put(a, tid, {"messages": ["one"], "owner": "alice"})
        assert (await a.aget_tuple(cfg(tid))).checkpoint["channel_values"]["messages"] == ["one"]
        prev = (await b.aget_tuple(cfg(tid))).checkpoint
        cp2, _ = await put(b, tid, {"messages": ["one", "two"]}, prev=prev, parent=cp1["id"])
        latest = await a.aget_tuple(cfg(tid))
        assert latest.checkpoint["id"] == cp2["id"]
        assert latest.checkpoint["channel_values"] == {"messages": ["one", "two"], "owner": "alice"}
        by_id = await a.aget_tuple(stored1)
        assert by_id.checkpoint["channel_values"]["messages"] == ["one"]
    finally:
        await a.aclose()
        await b.aclose()


async def test_callers_never_share_the_cached_containers(saver: RedisCheckpointSaver) -> None:
    tid = new_thread()
    messages = ["one"]
    await put(saver, tid, {"messages": messages})
    messages.append("appended by the writer after its put")
    got = (await saver.aget_tuple(cfg(tid))).checkpoint["channel_values"]["messages"]
    assert got == ["one"]
    got.append("appended by a reader")
    assert (await saver.aget_tuple(cfg(tid))).checkpoint["channel_values"]["messages"] == ["one"]


async def test_a_fenced_put_leaves_nothing_in_the_cache(
    saver: RedisCheckpointSaver, sync_client: redis.Redis
) -> None:
    tid = new_thread()
    old = take_lease(sync_client, tid)
    cp1, _ = await put(saver, tid, {"messages": ["one"]}, fencing_token=old)
    take_lease(sync_client, tid)
    held = len(saver.cache)
    with pytest.raises(FencedError):
        await put(saver, tid, {"messages": ["forked"]}, prev=cp1, parent=cp1["id"], fencing_token=old)
    assert len(saver.cache) == held
    assert (await saver.aget_tuple(cfg(tid))).checkpoint["channel_values"] == {"messages": ["one"]}


async def test_a_conversation_reads_the_same_through_a_warm_and_a_cold_saver(
    saver: RedisCheckpointSaver, redis_server: RedisServer
) -> None:
    graph = _graph(saver)
    tid = new_thread()
    for i in range(5):
        await graph.ainvoke({"messages": [("user", f"message {i}")]}, {"configurable": {"thread_id": tid}})
    cold = RedisCheckpointSaver.from_url(redis_server.url(1), ttl_seconds=TTL, cache_bytes=0)
    try:
        warm_history = [t async for t in saver.alist(cfg(tid))]
        cold_history = [t async for t in cold.alist(cfg(tid))]
        assert warm_history == cold_history and len(warm_history) == 15
        assert await saver.aget_tuple(cfg(tid)) == await cold.aget_tuple(cfg(tid))
        assert len(warm_history[0].checkpoint["channel_values"]["messages"]) == 10
    finally:
        await cold.aclose()


# --- concurrency ------------------------------------------------------------------------------


async def test_concurrent_writers_on_separate_clients_lose_nothing(
    redis_server: RedisServer,
) -> None:
    savers = [RedisCheckpointSaver.from_url(redis_server.url(1), ttl_seconds=TTL) for _ in range(4)]
    threads = [new_thread() for _ in range(25)]
    per_writer = 5

    async def writer(s: RedisCheckpointSaver, tid: str, w: int) -> list[str]:
        ids, prev, parent = [], None, None
        for i in range(per_writer):
            prev, stored = await put(s, tid, {f"w{w}": i, "shared": (w, i)}, prev=prev, parent=parent)
            parent = stored["configurable"]["checkpoint_id"]
            await s.aput_writes(stored, [(f"w{w}", i)], f"task-{w}-{i}")
            ids.append(parent)
        return ids

    try:
        jobs = [writer(s, tid, w) for tid in threads for w, s in enumerate(savers)]
        written = await asyncio.gather(*jobs)
        for t_index, tid in enumerate(threads):
            expected = {cid for w in range(len(savers)) for cid in written[t_index * len(savers) + w]}
            listed = [t async for t in savers[0].alist(cfg(tid))]
            assert {t.checkpoint["id"] for t in listed} == expected
            for t in listed:  # every checkpoint complete: values and its one write
                assert t.pending_writes and len(t.pending_writes) == 1
                assert "shared" in t.checkpoint["channel_values"]
            latest = await savers[1].aget_tuple(cfg(tid))
            assert latest.checkpoint["id"] == max(expected)
    finally:
        for s in savers:
            await s.aclose()


# --- sync twins -------------------------------------------------------------------------------


def test_sync_methods(redis_server: RedisServer, sync_client: redis.Redis) -> None:
    async_client = aioredis.Redis.from_url(redis_server.url(1))
    s = RedisCheckpointSaver(async_client, ttl_seconds=TTL, sync_client=sync_client)
    tid, copy, run = new_thread(), new_thread(), str(uuid.uuid4())
    cp1, v1 = checkpoint(s, {"a": 1})
    stored1 = s.put(cfg(tid), cp1, {"source": "input", "step": 0}, v1)
    s.put_writes(stored1, [("a", 5)], "task")
    cp2, v2 = checkpoint(s, {"b": 2}, cp1)
    s.put(cfg(tid, "", cp1["id"]), cp2, {"source": "loop", "step": 1, "run_id": run}, v2)

    latest = s.get_tuple(cfg(tid))
    assert latest.checkpoint["channel_values"] == {"a": 1, "b": 2}
    assert latest.parent_config["configurable"]["checkpoint_id"] == cp1["id"]
    assert s.get_tuple(cfg(tid, "", cp1["id"])).pending_writes == [("task", "a", 5)]
    assert [t.checkpoint["id"] for t in s.list(cfg(tid))] == [cp2["id"], cp1["id"]]
    assert [t.checkpoint["id"] for t in s.list(cfg(tid), filter={"source": "input"})] == [cp1["id"]]
    assert any(t.config["configurable"]["thread_id"] == tid for t in s.list(None))

    s.copy_thread(tid, copy)
    assert [t.checkpoint["id"] for t in s.list(cfg(copy))] == [cp2["id"], cp1["id"]]
    s.prune([copy])
    assert [t.checkpoint["id"] for t in s.list(cfg(copy))] == [cp2["id"]]
    s.delete_for_runs([run])  # cp2 of both threads carries the run id
    assert [t.checkpoint["id"] for t in s.list(cfg(tid))] == [cp1["id"]]
    assert list(s.list(cfg(copy))) == []
    s.delete_thread(tid)
    assert s.get_tuple(cfg(tid)) is None
    s.delete_thread(copy)


async def test_sync_methods_need_a_sync_client(redis_server: RedisServer) -> None:
    client = aioredis.Redis.from_url(redis_server.url(1))
    try:
        s = RedisCheckpointSaver(client, ttl_seconds=TTL)
        with pytest.raises(RuntimeError, match="sync_client"):
            s.get_tuple(cfg(new_thread()))
        with pytest.raises(ValueError, match="decode_responses"):
            RedisCheckpointSaver(
                aioredis.Redis.from_url(redis_server.url(1), decode_responses=True),
                ttl_seconds=TTL,
            )
    finally:
        await client.aclose()


# --- semantics matched against InMemorySaver ----------------------------------------------------


async def _same_calls(s: BaseCheckpointSaver, tid: str) -> list[Any]:
    """One script of put/put_writes calls; returns what the saver then reports."""
    cp, versions = checkpoint(s, {"a": 1})
    stored = await s.aput(cfg(tid), cp, {"step": 0}, versions)
    # Out of order on purpose: task paths, task ids, special channels, duplicates.
    await s.aput_writes(stored, [("a", "b1"), ("a", "b2")], "task-b", "~1")
    await s.aput_writes(stored, [("a", "a1"), (ERROR, "e1")], "task-a", "~1")
    await s.aput_writes(stored, [("a", "z1")], "task-z", "~0")
    await s.aput_writes(stored, [("a", "n1")], "task-n", "")
    await s.aput_writes(stored, [("a", "b1-again"), ("a", "b2-again")], "task-b", "~1")
    await s.aput_writes(stored, [("a", "a1-again"), (ERROR, "e2")], "task-a", "~1")
    await s.aput_writes(stored, [(INTERRUPT, "i1")], "task-z", "~0")
    got = await s.aget_tuple(stored)
    return got.pending_writes


async def test_pending_writes_order_and_overwrites_match_in_memory(
    saver: RedisCheckpointSaver,
) -> None:
    ours = await _same_calls(saver, new_thread())
    reference = await _same_calls(InMemorySaver(), new_thread())
    assert ours == reference
    assert [w[0] for w in ours][:1] == ["task-n"]  # no task path sorts first
    assert ("task-b", "a", "b1") in ours and ("task-a", ERROR, "e2") in ours


async def test_list_matches_in_memory(saver: RedisCheckpointSaver) -> None:
    async def fill(s: BaseCheckpointSaver, tid: str) -> list[str]:
        ids = []
        for ns in ("", "child:1", "child:2"):
            prev, parent = None, None
            for i in range(4):
                prev, stored = await put(
                    s, tid, {"x": i}, prev=prev, parent=parent, ns=ns,
                    meta={"source": "input" if i % 2 else "loop", "step": i, "ns": ns},
                )  # fmt: skip
                parent = stored["configurable"]["checkpoint_id"]
                ids.append(parent)
        return ids

    tid_ours, tid_ref = new_thread(), new_thread()
    memory = InMemorySaver()
    ours_ids, ref_ids = await fill(saver, tid_ours), await fill(memory, tid_ref)
    rename = dict(zip(ref_ids, ours_ids, strict=True))

    async def listed(s, tid, conf_extra, **kw) -> list[tuple[str, str]]:
        conf = {"configurable": {"thread_id": tid, **conf_extra}}
        out = [
            (t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"]) async for t in s.alist(conf, **kw)
        ]
        return [(ns, rename.get(i, i)) for ns, i in out] if s is memory else out

    cases = [
        ({"checkpoint_ns": ""}, {}),
        ({"checkpoint_ns": "child:1"}, {"limit": 2}),
        ({"checkpoint_ns": "child:2"}, {"filter": {"source": "input"}}),
        ({"checkpoint_ns": ""}, {"before_index": 2, "limit": 1}),
        ({"checkpoint_ns": "child:1"}, {"filter": {"step": 3, "ns": "child:1"}}),
        ({"checkpoint_ns": "", "checkpoint_id_index": 1}, {}),
    ]
    for conf_extra, kw in cases:
        kw = dict(kw)
        if "before_index" in kw:
            i = kw.pop("before_index")
            kw_o = {**kw, "before": cfg(tid_ours, "", ours_ids[i])}
            kw_r = {**kw, "before": cfg(tid_ref, "", ref_ids[i])}
        else:
            kw_o = kw_r = kw
        conf_o, conf_r = dict(conf_extra), dict(conf_extra)
        if "checkpoint_id_index" in conf_extra:
            i = conf_o.pop("checkpoint_id_index")
            conf_r.pop("checkpoint_id_index")
            conf_o["checkpoint_id"], conf_r["checkpoint_id"] = ours_ids[i], ref_ids[i]
        assert await listed(saver, tid_ours, conf_o, **kw_o) == await listed(
            memory, tid_ref, conf_r, **kw_r
        ), (conf_extra, kw)
    # No checkpoint_ns in the config: every namespace (order across namespaces may differ).
    every = await listed(saver, tid_ours, {})
    assert sorted(every) == sorted(await listed(memory, tid_ref, {}))
    assert len(every) == 12


# --- failure --------------------------------------------------------------------------------------


async def test_stopped_redis_is_an_error_not_a_hang(fresh_redis: RedisServer) -> None:
    s = RedisCheckpointSaver.from_url(fresh_redis.url(1), ttl_seconds=TTL)
    try:
        tid = new_thread()
        await put(s, tid, {"a": 1})
        fresh_redis.stop()
        with pytest.raises(redis.ConnectionError):
            # wait_for turns a hang into TimeoutError, which would fail this test
            await asyncio.wait_for(s.aget_tuple(cfg(tid)), timeout=20)
        with pytest.raises(redis.ConnectionError):
            await asyncio.wait_for(put(s, tid, {"a": 2}), timeout=20)
        fresh_redis.start()  # data back from the AOF; the script cache is empty
        latest = await s.aget_tuple(cfg(tid))
        assert latest.checkpoint["channel_values"] == {"a": 1}
        # A put's MULTI meets NOSCRIPT: the driver loads the scripts and runs it again.
        fresh_redis.restart()
        await put(s, tid, {"a": 3}, prev=latest.checkpoint, parent=latest.checkpoint["id"])
        assert (await s.aget_tuple(cfg(tid))).checkpoint["channel_values"] == {"a": 3}
    finally:
        await s.aclose()
