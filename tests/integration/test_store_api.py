"""Long-term memory through the SDK and from inside graphs (issue 22), on real replicas: the
``/store`` endpoints, each principal's items apart from every other's, the bounds and quotas,
and the same items seen by a run's graph and by its owner's SDK calls, on the embedded default
(SQLite) and on two replicas of one Redis."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from checkpoint_graph import flush
from graphs.embed import embed
from langgraph_sdk import get_client
from langgraph_sdk.errors import APIStatusError

from threadline.config import (
    CheckpointSettings,
    ConfigError,
    ModelSettings,
    ServerSettings,
    SessionSettings,
    Settings,
    TurnSettings,
)
from threadline.store import open_store, store_options

from client import API_KEY, API_KEYS, OTHER_KEY
from servers import RedisServer, redis_env, until

pytestmark = pytest.mark.integration

GRAPHS = Path(__file__).resolve().parent / "graphs"
CONFIG = GRAPHS / "memory.json"
INDEXED = GRAPHS / "memory_index.json"  # semantic search over `text` (graphs/embed.py)


def sqlite_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "CHECKPOINT_BACKEND": "sqlite",
        "CHECKPOINT_SQLITE_PATH": str(tmp_path / "checkpoints.sqlite"),
        "SESSION_BACKEND": "memory",
        "API_KEYS": API_KEYS,
        "LANGGRAPH_CONFIG": str(CONFIG),
        **extra,
    }


async def status_of(call) -> int:
    try:
        await call
    except APIStatusError as exc:
        return exc.status_code
    return 200


async def test_the_sdk_puts_gets_searches_lists_and_deletes(start_replica, tmp_path: Path) -> None:
    replica = start_replica(sqlite_env(tmp_path), "store")
    store = get_client(url=replica.url, api_key=API_KEY).store
    for i in range(12):
        await store.put_item(["prefs", "u1"], f"k{i:02d}", {"n": i, "even": i % 2 == 0})
    await store.put_item(["prefs", "u2"], "k", {"n": 99})
    item = await store.get_item(["prefs", "u1"], "k03")
    assert (item["namespace"], item["key"], item["value"]) == (
        ["prefs", "u1"],
        "k03",
        {"n": 3, "even": False},
    )
    assert await store.get_item(["prefs", "u1"], "nope") is None
    evens = await store.search_items(["prefs", "u1"], filter={"even": True}, limit=100)
    assert sorted(i["key"] for i in evens["items"]) == [f"k{i:02d}" for i in range(0, 12, 2)]
    page = await store.search_items(["prefs"], limit=5, offset=10)
    assert len(page["items"]) == 3  # 13 items under the prefix
    listed = await store.list_namespaces(prefix=["prefs"])
    assert sorted(listed["namespaces"]) == [["prefs", "u1"], ["prefs", "u2"]]
    assert (await store.list_namespaces(prefix=["prefs"], max_depth=1))["namespaces"] == [["prefs"]]
    await store.delete_item(["prefs", "u1"], "k03")
    assert await store.get_item(["prefs", "u1"], "k03") is None


async def test_a_principal_sees_only_its_own_items(start_replica, tmp_path: Path) -> None:
    replica = start_replica(sqlite_env(tmp_path), "store")
    alice = get_client(url=replica.url, api_key=API_KEY).store
    bob = get_client(url=replica.url, api_key=OTHER_KEY).store
    await alice.put_item(["shared"], "secret", {"text": "alice's"})
    assert await bob.get_item(["shared"], "secret") is None
    assert (await bob.search_items([]))["items"] == []
    assert (await bob.list_namespaces())["namespaces"] == []
    await bob.put_item(["shared"], "secret", {"text": "bob's"})
    await bob.delete_item(["shared"], "secret")
    assert (await alice.get_item(["shared"], "secret"))["value"] == {"text": "alice's"}
    assert (await alice.list_namespaces())["namespaces"] == [["shared"]]


async def test_bad_input_and_limits_are_4xx_and_store_nothing(start_replica, tmp_path: Path) -> None:
    env = sqlite_env(
        tmp_path, QUOTA_STORE_ITEMS_PER_PRINCIPAL="3", QUOTA_STORE_ITEM_BYTES="200", MAX_STORE_RESULTS="5"
    )
    replica = start_replica(env, "store")
    store = get_client(url=replica.url, api_key=API_KEY).store
    # What the SDK refuses itself, sent as another client would.
    for bad in (
        {"namespace": ["a.b"], "key": "k"},
        {"namespace": [], "key": "k"},
        {"namespace": ["ns"], "key": ""},
    ):
        put = httpx.put(
            f"{replica.url}/store/items", json={**bad, "value": {}}, headers={"x-api-key": API_KEY}
        )
        assert put.status_code == 422, put.text
    assert await status_of(store.put_item(["ns"], "big", {"v": "x" * 300})) == 413
    assert await status_of(store.search_items(["ns"], limit=6)) == 422
    assert await status_of(store.list_namespaces(limit=6)) == 422
    for key in ("a", "b", "c"):
        await store.put_item(["ns"], key, {"v": key})
    await store.put_item(["ns"], "a", {"v": "again"})  # an item already counted is no new one
    assert await status_of(store.put_item(["ns"], "d", {"v": "d"})) == 429
    assert await store.get_item(["ns"], "big") is None and await store.get_item(["ns"], "d") is None
    await store.delete_item(["ns"], "b")  # its slot is free again
    await store.put_item(["ns"], "d", {"v": "d"})
    assert sorted(i["key"] for i in (await store.search_items(["ns"], limit=5))["items"]) == ["a", "c", "d"]


async def _remember(client, graph: str, text: str | None = None, query: str | None = None) -> list[str]:
    thread = await client.threads.create()
    body = {k: v for k, v in (("remember", text), ("query", query)) if v is not None}
    result = await client.runs.wait(thread["thread_id"], graph, input=body)
    return result["recall"]


@pytest.mark.parametrize("graph", ["memory", "memory_sync"])
async def test_a_graph_shares_the_run_owners_memory(start_replica, tmp_path: Path, graph: str) -> None:
    replica = start_replica(sqlite_env(tmp_path), "store")
    alice = get_client(url=replica.url, api_key=API_KEY)
    bob = get_client(url=replica.url, api_key=OTHER_KEY)
    assert await _remember(alice, graph, "tea is what alice drinks") == ["tea is what alice drinks"]
    # Another thread, the same memory: the store is across threads ...
    assert await _remember(alice, graph) == ["tea is what alice drinks"]
    # ... seen through the owner's SDK calls under the same namespace ...
    item = await alice.store.get_item(["memories"], "tea")
    assert item["value"] == {"text": "tea is what alice drinks"}
    await alice.store.put_item(["memories"], "coffee", {"text": "coffee is for mornings"})
    assert sorted(await _remember(alice, graph)) == ["coffee is for mornings", "tea is what alice drinks"]
    # ... and by nobody else's runs.
    assert await _remember(bob, graph) == []


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_semantic_search_ranks_by_the_configured_embedding(
    start_replica, request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    env = {**sqlite_env(tmp_path), "CHECKPOINT_BACKEND": backend, "LANGGRAPH_CONFIG": str(INDEXED)}
    if backend == "redis":
        server = request.getfixturevalue("redis_server")
        flush(server, 1)
        env["CHECKPOINT_REDIS_URL"] = server.url(1)
    alice = get_client(url=start_replica(env, "store").url, api_key=API_KEY)
    notes = {"tea": "green tea in the afternoon", "code": "python code review", "run": "a morning run"}
    for key, text in notes.items():
        await alice.store.put_item(["notes"], key, {"text": text})
    found = (await alice.store.search_items(["notes"], query="python code"))["items"]
    assert found[0]["key"] == "code" and found[0]["score"] > found[-1]["score"]
    assert (await _remember(alice, "memory", "tea and cake", query="tea"))[0] == "tea and cake"


async def test_semantic_search_on_sqlite_needs_a_python_that_loads_extensions(tmp_path: Path) -> None:
    """The SQLite store's index is the sqlite-vec extension: where this Python's sqlite3 cannot
    load one (pyenv builds here), ``store.index`` stops start-up naming it; elsewhere it works."""
    checkpoint = CheckpointSettings(backend="sqlite", sqlite_path=tmp_path / "checkpoints.sqlite")
    settings = Settings(checkpoint, SessionSettings(), TurnSettings(), ModelSettings(), ServerSettings())
    options = store_options(json.loads(INDEXED.read_text())["store"], lambda path, where: embed)
    if not hasattr(sqlite3.Connection, "enable_load_extension"):
        with pytest.raises(ConfigError, match=r"`store\.index`: this Python's sqlite3 cannot load"):
            async with open_store(settings, options):
                pass
        return
    async with open_store(settings, options) as store:
        await store.aput(("n",), "code", {"text": "python code review"})
        await store.aput(("n",), "tea", {"text": "green tea"})
        assert (await store.asearch(("n",), query="python code"))[0].key == "code"


async def test_items_outlive_a_restart_of_the_embedded_default(start_replica, tmp_path: Path) -> None:
    env = sqlite_env(tmp_path)
    replica = start_replica(env, "store")
    await get_client(url=replica.url, api_key=API_KEY).store.put_item(["keep"], "k", {"v": 1})
    replica.stop()
    again = start_replica(env, "store-again")
    assert (await get_client(url=again.url, api_key=API_KEY).store.get_item(["keep"], "k"))["value"] == {
        "v": 1
    }
    assert (tmp_path / "checkpoints.store.sqlite").is_file()


async def test_two_replicas_on_one_redis_share_the_store(start_replica, redis_server: RedisServer) -> None:
    flush(redis_server, 1)
    env = redis_env(redis_server, LANGGRAPH_CONFIG=str(CONFIG))
    url_a, url_b = start_replica(env, "a").url, start_replica(env, "b").url
    a, b = get_client(url=url_a, api_key=API_KEY), get_client(url=url_b, api_key=API_KEY)
    assert await _remember(a, "memory", "tea is what alice drinks") == ["tea is what alice drinks"]
    assert (await b.store.get_item(["memories"], "tea"))["value"] == {"text": "tea is what alice drinks"}
    await b.store.put_item(["memories"], "code", {"text": "python code review"})
    assert (await _remember(a, "memory", query="python code"))[0] == "python code review"
    assert (await get_client(url=url_b, api_key=OTHER_KEY).store.search_items([]))["items"] == []


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        (
            {"index": {"dims": 0, "embed": "./embed.py:embed"}},
            "`store.index.dims` must be a positive integer",
        ),
        ({"index": {"dims": 16, "embed": "./embed.py:nope"}}, "`store.index.embed` (./embed.py:nope)"),
        ({"ttl": {"default_ttl": "soon"}}, "`store.ttl.default_ttl` must be a positive number"),
    ],
    ids=["dims", "missing-function", "ttl"],
)
def test_a_bad_store_section_stops_start_up_naming_it(tmp_path: Path, store: dict, expected: str) -> None:
    config = tmp_path / "langgraph.json"
    (tmp_path / "embed.py").write_text((GRAPHS / "embed.py").read_text())
    (tmp_path / "graph.py").write_text((GRAPHS / "memory.py").read_text())
    config.write_text(json.dumps({"graphs": {"memory": "./graph.py:graph"}, "store": store}))
    env = {**os.environ, **sqlite_env(tmp_path), "LANGGRAPH_CONFIG": str(config)}
    done = subprocess.run(
        [sys.executable, "-m", "threadline", "serve"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert expected in done.stderr


@pytest.mark.parametrize("backend", ["memory", "postgres", "redis-stack", "redis"])
async def test_every_backend_serves_the_store(
    start_replica, request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    env = {**sqlite_env(tmp_path), "CHECKPOINT_BACKEND": backend}
    if backend == "postgres":
        env["CHECKPOINT_POSTGRES_URL"] = request.getfixturevalue("postgres_url")
    elif backend in ("redis", "redis-stack"):
        server = request.getfixturevalue("redis_server" if backend == "redis" else "redis_stack_server")
        db = 1 if backend == "redis" else 0  # RediSearch indexes live in db 0 only
        flush(server, db)
        env["CHECKPOINT_REDIS_URL"] = server.url(db)
    client = get_client(url=start_replica(env, backend).url, api_key=API_KEY)
    for i in range(3):
        await client.store.put_item(["notes", backend], f"k{i}", {"i": i})
    assert (await client.store.get_item(["notes", backend], "k1"))["value"] == {"i": 1}
    found = await client.store.search_items(["notes"], filter={"i": 2})
    assert [item["key"] for item in found["items"]] == ["k2"]
    assert await _remember(client, "memory", "tea is what alice drinks") == ["tea is what alice drinks"]


def test_an_index_on_postgres_without_pgvector_stops_start_up_naming_it(
    postgres_url: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        **sqlite_env(tmp_path),
        "CHECKPOINT_BACKEND": "postgres",
        "CHECKPOINT_POSTGRES_URL": postgres_url,
        "LANGGRAPH_CONFIG": str(INDEXED),
    }
    done = subprocess.run(
        [sys.executable, "-m", "threadline", "serve"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "`store.index`: the Postgres at" in done.stderr and "pgvector" in done.stderr


async def test_an_item_with_a_ttl_expires_and_frees_its_quota_slot(
    start_replica, redis_server: RedisServer
) -> None:
    flush(redis_server, 1)
    env = redis_env(redis_server, QUOTA_STORE_ITEMS_PER_PRINCIPAL="1")
    store = get_client(url=start_replica(env, "ttl").url, api_key=API_KEY).store
    await store.put_item(["brief"], "k", {"v": 1}, ttl=0.02)  # minutes: 1.2 s
    assert await status_of(store.put_item(["brief"], "other", {"v": 2})) == 429

    async def gone() -> bool:
        return await store.get_item(["brief"], "k", refresh_ttl=False) is None  # a read refreshes by default

    await until(gone, what="the item to expire")
    await store.put_item(["brief"], "other", {"v": 2})  # the expired item no longer counts
