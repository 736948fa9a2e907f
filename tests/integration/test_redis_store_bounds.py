"""``RedisStore`` on real servers, beyond the contract (``test_store_contract.py``): its keys
and their TTLs, the lazy clean-up of indexes, the ``max_scan`` bound, vector sets that rank as
the exact search does, the vector mode pinned per prefix, the sync ``batch``, lost scripts, and
the TTL configuration (ADR 0015)."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore
from store_oracle import TOL, WORDS, index_config

from threadline import redis_client
from threadline.store.redis import RedisStore

from servers import RedisServer

pytestmark = pytest.mark.integration


@pytest.fixture(params=["redis-7.0", "redis-8.2"])
def server(request: pytest.FixtureRequest) -> RedisServer:
    return request.getfixturevalue("redis_server" if request.param == "redis-7.0" else "redis8_server")


async def opened(server: RedisServer, **kw) -> RedisStore:
    store = RedisStore(redis_client.async_client(server.url(3)), prefix=f"t{uuid.uuid4().hex[:10]}", **kw)
    await store.setup()
    return store


@pytest.fixture
async def store(server: RedisServer) -> AsyncIterator[RedisStore]:
    s = await opened(server, index=index_config())
    yield s
    await s.client.aclose()


async def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, "waited too long"
        await asyncio.sleep(0.05)


async def test_every_key_expires_no_earlier_than_the_items_it_indexes(store: RedisStore) -> None:
    c, k = store.client, store.keys
    await store.aput(("short",), "a", {"text": "apple"}, ttl=0.5)
    await store.aput(("short", "sub"), "b", {"text": "banana"}, ttl=1.0)
    await store.aput(("mixed",), "c", {"text": "cherry"}, ttl=0.5)
    await store.aput(("mixed",), "d", {"text": "delta"})  # no TTL: its index must not expire
    item = k.item("short", b"sub\0\0b")
    assert 59_000 < await c.pttl(item) <= 60_000
    assert await c.pttl(item) <= await c.pttl(k.index("short")) <= 120_000  # 2t, once t or less left
    assert await c.pttl(k.index("mixed")) == -1
    assert await c.pttl(k.roots) == await c.pttl(k.gen) == -1  # a root holds an item without TTL
    if store.mode == "v":
        assert await c.pttl(item) <= await c.pttl(k.vectors("short")) <= 120_000
        assert await c.pttl(k.vectors("mixed")) == -1
    # A refresh extends the index only when it had less than the item's TTL left.
    await c.pexpire(k.index("short"), 5_000)
    await c.pexpire(item, 1_000)
    await store.aget(("short", "sub"), "b")
    assert 59_000 < await c.pttl(item) <= 60_000
    assert 110_000 < await c.pttl(k.index("short")) <= 120_000
    kinds = {key.split(b":")[2] for key in await c.keys(store.keys.prefix + b":*")}
    assert kinds == {b"roots", b"gen", b"meta", b"x", b"i"} | ({b"v"} if store.mode == "v" else set())


async def test_members_of_expired_items_leave_the_index_when_a_read_passes_them(store: RedisStore) -> None:
    c, k = store.client, store.keys
    for i in range(5):
        await store.aput(("tenant", "mem"), f"gone{i}", {"text": f"apple {i}"}, ttl=0.3 / 60)
    await store.aput(("tenant", "mem"), "kept", {"text": "apple kept"})
    await store.aput(("only-short",), "x", {"text": "banana"}, ttl=0.3 / 60)

    async def expired() -> bool:
        return not await c.exists(k.item("tenant", b"mem\0\0gone4"), k.item("only-short", b"\0x"))

    await wait_until(expired)
    assert await c.zcard(k.index("tenant")) == 6  # members outlive their items, until a read
    if store.mode == "v":
        assert await c.execute_command("VCARD", k.vectors("tenant")) == 6
    found = await store.asearch(("tenant",), query="apple")
    assert [i.key for i in found] == ["kept"]
    assert await c.zcard(k.index("tenant")) == 1
    if store.mode == "v":
        assert await c.execute_command("VCARD", k.vectors("tenant")) == 1
    assert b"only-short" in await c.zrange(k.roots, 0, -1)
    assert [i.key for i in await store.asearch((), limit=100)] == ["kept"]  # visits every root
    assert await c.zrange(k.roots, 0, -1) == [b"tenant"]  # ... and forgets the empty one
    assert await store.alist_namespaces() == [("tenant", "mem")]


async def test_max_scan_bounds_what_one_call_looks_at(server: RedisServer) -> None:
    store = await opened(server, max_scan=50, page_size=20)
    try:
        for i in range(120):
            await store.aput(("big",), f"k{i:03d}", {"n": i})
        for i in range(60):
            await store.aput((f"root{i:02d}", "x"), "k", {"n": i})
        stats = store.client.info("commandstats")
        before = (await stats).get("cmdstat_zrangebylex", {}).get("calls", 0)
        found = await store.asearch(("big",), limit=100)
        assert [i.key for i in found] == [f"k{i:03d}" for i in range(50)]  # the first 50 members
        assert await store.asearch(("big",), filter={"n": {"$gte": 100}}) == []  # past the bound
        after = (await store.client.info("commandstats"))["cmdstat_zrangebylex"]["calls"]
        assert after - before == 2 * 3  # 50 members in pages of 20: 3 reads a search
        listed = await store.alist_namespaces(prefix=("*",), limit=200)  # 1 budget a root, 1 a step
        assert 10 < len(listed) < 50 and listed == sorted(listed)
        everything = await store.asearch((), limit=500)
        assert len(everything) < 50
    finally:
        await store.client.aclose()


async def test_vector_sets_rank_as_the_exact_search_and_inmemorystore(redis8_server: RedisServer) -> None:
    rng = random.Random(5)
    vset = await opened(redis8_server, index=index_config())
    exact = await opened(redis8_server, index=index_config(), vector_sets=False)
    oracle = InMemoryStore(index=index_config())
    assert (vset.mode, exact.mode) == ("v", "e")
    try:
        for i in range(300):
            ns = ("ranked", rng.choice(["a", "b", "c"]))
            value = {"text": " ".join(rng.sample(WORDS, rng.randint(1, 4))), "title": f"title {i}"}
            for s in (vset, exact, oracle):
                await s.aput(ns, f"k{i:03d}", value)
        for query in ["apple", "banana cherry", "kilo lima mango", "fox golf hotel india"]:
            for prefix in [("ranked",), ("ranked", "b")]:
                want = await oracle.asearch(prefix, query=query, limit=300)
                for s in (vset, exact):
                    got = await s.asearch(prefix, query=query, limit=300)
                    assert len(got) == len(want)
                    for g, w in zip(got, want, strict=True):
                        assert abs(g.score - w.score) <= TOL
    finally:
        await vset.client.aclose()
        await exact.client.aclose()


async def test_the_vector_mode_and_dims_are_pinned_per_prefix(redis8_server: RedisServer) -> None:
    first = await opened(redis8_server, index=index_config(), vector_sets=False)
    try:
        again = RedisStore(first.client, index=index_config(), prefix=first.keys.prefix.decode())
        await again.setup()
        assert again.mode == "e"  # it follows the data, though the server has vector sets
        with pytest.raises(RuntimeError, match="keeps vectors as 'e'"):
            await RedisStore(
                first.client, index=index_config(), prefix=again.keys.prefix.decode(), vector_sets=True
            ).setup()
        other = {**index_config(), "dims": 8}
        with pytest.raises(ValueError, match="16 dims, not 8"):
            await RedisStore(first.client, index=other, prefix=again.keys.prefix.decode()).setup()
    finally:
        await first.client.aclose()


async def test_vector_sets_are_refused_where_the_server_has_none(redis_server: RedisServer) -> None:
    client = redis_client.async_client(redis_server.url(3))
    try:
        with pytest.raises(RuntimeError, match="no vector sets"):
            await RedisStore(client, index=index_config(), vector_sets=True, prefix=uuid.uuid4().hex).setup()
        import redis.asyncio as aioredis

        decoding = aioredis.Redis(port=redis_server.port, decode_responses=True)
        with pytest.raises(ValueError, match="decode_responses"):
            await RedisStore(decoding).setup()
        await decoding.aclose()
    finally:
        await client.aclose()


async def test_sync_batch_runs_on_the_stores_loop_from_another_thread(store: RedisStore) -> None:
    await asyncio.to_thread(store.put, ("sync",), "k", {"v": 1})
    item = await asyncio.to_thread(store.get, ("sync",), "k")
    assert item is not None and item.value == {"v": 1}
    with pytest.raises(asyncio.InvalidStateError, match="async methods"):
        store.get(("sync",), "k")


async def test_lost_scripts_are_loaded_again(store: RedisStore) -> None:
    await store.aput(("flush",), "a", {"v": 1})
    await store.client.script_flush()
    await store.aput(("flush",), "b", {"v": 2})  # a pipeline: the put and the root set's touch
    await store.client.script_flush()
    assert (await store.aget(("flush",), "a")).value == {"v": 1}  # one script call
    await store.client.script_flush()
    assert [i.key for i in await store.asearch(("flush",))] == ["a", "b"]


async def test_default_ttl_and_refresh_on_read_come_from_the_ttl_config(server: RedisServer) -> None:
    store = await opened(server, ttl={"default_ttl": 1.0, "refresh_on_read": False})
    c, item = store.client, store.keys.item("cfg", b"\0k")
    try:
        await store.aput(("cfg",), "k", {"v": 1})
        assert 59_000 < await c.pttl(item) <= 60_000
        await c.pexpire(item, 30_000)
        await store.aget(("cfg",), "k")
        await store.asearch(("cfg",))
        assert await c.pttl(item) <= 30_000  # refresh_on_read=False
        await store.asearch(("cfg",), refresh_ttl=True)
        assert 59_000 < await c.pttl(item) <= 60_000
        await c.pexpire(item, 30_000)
        await store.aget(("cfg",), "k", refresh_ttl=True)
        assert 59_000 < await c.pttl(item) <= 60_000
        await store.aput(("cfg",), "k", {"v": 2}, ttl=None)
        assert await c.pttl(item) == -1
        await store.abatch([PutOp(("cfg",), "k", {"v": 3}, ttl=0.5)])
        assert 29_000 < await c.pttl(item) <= 30_000
    finally:
        await c.aclose()


async def test_ttls_hold_their_order_over_random_puts_and_reads(store: RedisStore) -> None:
    """Every item key expires no later than its root's index and vector set, and those no
    later than the root set, whatever the order of puts, refreshing reads and deletes."""
    rng, c, k = random.Random(3), store.client, store.keys
    for _ in range(300):
        ns = (rng.choice(["r1", "r2", "r3"]), rng.choice(["a", "b"]))
        key, r = rng.choice("kxyz"), rng.random()
        if r < 0.5:
            await store.aput(ns, key, {"text": "apple"}, ttl=rng.choice([None, 0.5, 1.0, 2.0, 10.0]))
        elif r < 0.8:
            await store.aget(ns, key, refresh_ttl=rng.random() < 0.5)
        elif r < 0.9:
            await store.asearch(ns[:1], refresh_ttl=True)
        else:
            await store.adelete(ns, key)
    forever = 10**12

    async def left(key: bytes) -> int:
        ms = await c.pttl(key)
        assert ms != -2, key
        return forever if ms == -1 else ms

    roots = await left(k.roots)
    for root in ["r1", "r2", "r3"]:
        if not await c.exists(k.index(root)):
            continue
        index = await left(k.index(root))
        assert index <= roots
        vectors = await left(k.vectors(root)) if store.mode == "v" else forever
        for member in await c.zrange(k.index(root), 0, -1):
            item = await left(k.item(root, member))
            assert item <= index and item <= vectors, (root, member)
