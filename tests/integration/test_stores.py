"""What ``Stores.open`` (stores.py) opens for each backend, against real SQLite files and a real
``redis-server``: the store classes, where their data lands, one Redis client shared by lease,
quotas and records, everything closed with the exit stack; the eviction warning; and how
opening fails (a store down, a misconfigured URL).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from threadline import config
from threadline.checkpoint import InstrumentedSaver, is_store_down
from threadline.config import (
    CheckpointSettings,
    ConfigError,
    ModelSettings,
    ServerSettings,
    SessionSettings,
    Settings,
    TurnSettings,
)
from threadline.errors import StoreUnavailable
from threadline.lease import LocalTurnLease, RedisTurnLease
from threadline.quotas import LocalQuotas, RedisQuotas
from threadline.redis_keys import thread_record_key
from threadline.runs.records import ThreadRecord
from threadline.runs.records_local import LocalRecordStore
from threadline.runs.records_redis import RedisRecordStore
from threadline.sessions import MemorySessionStore, RedisSessionStore
from threadline.stores import Stores, warn_if_evicting

from servers import RedisServer, free_port

pytestmark = pytest.mark.integration

CHECKPOINT_DB, SESSION_DB = 11, 12  # this file's dbs of the session's Redis
PASSWORD = "Du0PmDvmqDWqDTgfGnmi6/SKyuQydi3z7cPTgEQoE+s="


def settings(checkpoint: dict[str, object], session: dict[str, object] | None = None) -> Settings:
    return Settings(
        checkpoint=config.load(CheckpointSettings, **checkpoint),
        session=config.load(SessionSettings, **(session or {})),
        turn=config.load(TurnSettings),
        model=config.load(ModelSettings),
        server=config.load(ServerSettings, max_streams=7),
    )


def connections(server: RedisServer, db: int) -> int:
    """Clients connected to ``server`` with ``db`` selected (the caller's own is on db 0)."""
    with server.client() as admin:
        return sum(1 for c in admin.client_list() if c["db"] == str(db))


@pytest.fixture
def clean_dbs(redis_server: RedisServer) -> Iterator[None]:
    for db in (CHECKPOINT_DB, SESSION_DB):
        with redis.Redis.from_url(redis_server.url(db)) as client:
            client.flushdb()
    yield


# --- what each backend opens --------------------------------------------------------------------


async def test_sqlite_opens_its_file_and_process_local_stores(tmp_path: Path) -> None:
    path = tmp_path / "state" / "checkpoints.sqlite"
    async with AsyncExitStack() as stack:
        stores = await Stores.open(settings({"backend": "sqlite", "sqlite_path": path}), stack)
        assert isinstance(stores.checkpointer, InstrumentedSaver) and stores.checkpointer.backend == "sqlite"
        assert type(stores.lease) is LocalTurnLease
        assert type(stores.quotas) is LocalQuotas
        assert type(stores.records) is LocalRecordStore
        assert type(stores.sessions) is MemorySessionStore
        assert (stores.sessions.ttl, stores.sessions.max_lifetime) == (3600, 86400)
        assert path.exists(), "the checkpoint file is created at open"
        token = await stores.sessions.create("ann", "digest")
        assert (await stores.sessions.lookup(token)).principal == "ann"
        await stores.ping()
    # Closed with the stack: the in-memory sessions are gone with it.
    assert await stores.sessions.lookup(token) is None


async def test_memory_opens_nothing_outside_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the default sqlite path would be ./data/...
    async with AsyncExitStack() as stack:
        stores = await Stores.open(settings({"backend": "memory"}), stack)
        assert stores.checkpointer.backend == "memory"
        assert type(stores.lease) is LocalTurnLease and type(stores.records) is LocalRecordStore
        await stores.ping()
    assert list(tmp_path.iterdir()) == []


async def test_redis_opens_redis_stores_on_one_shared_client(
    redis_server: RedisServer, clean_dbs: None
) -> None:
    s = settings(
        {"backend": "redis", "redis_url": redis_server.url(CHECKPOINT_DB)},
        {"backend": "redis", "redis_url": redis_server.url(SESSION_DB)},
    )
    async with AsyncExitStack() as stack:
        stores = await Stores.open(s, stack)
        assert stores.checkpointer.backend == "redis"
        assert type(stores.lease) is RedisTurnLease
        assert type(stores.quotas) is RedisQuotas
        assert type(stores.records) is RedisRecordStore
        assert type(stores.sessions) is RedisSessionStore
        # Lease, quotas and records share one client (white-box: the attribute each keeps it in);
        # streams and joins read on a pool of their own, one connection per stream slot.
        shared = stores.lease._client
        assert stores.quotas._client is shared and stores.records._client is shared
        readers = stores.records._readers
        assert readers is not shared and readers.connection_pool.max_connections == 7
        await stores.ping()

        # Each store's data lands in the Redis its setting names.
        thread_id = f"t-{uuid.uuid4()}"
        async with stores.lease.hold(thread_id):
            with redis.Redis.from_url(redis_server.url(CHECKPOINT_DB)) as cp_db:
                assert cp_db.exists(f"tl:{{{thread_id}}}:lease")
        when = "2024-01-01T00:00:00+00:00"
        assert await stores.records.create_thread(ThreadRecord(thread_id, "ann", when, when))
        assert (await stores.records.get_thread(thread_id)).owner == "ann"
        with redis.Redis.from_url(redis_server.url(CHECKPOINT_DB)) as cp_db:
            assert cp_db.exists(thread_record_key(thread_id)), "records share the checkpoint Redis"
        token = await stores.sessions.create("ann", "digest")
        with redis.Redis.from_url(redis_server.url(SESSION_DB)) as session_db:
            assert [k.decode() for k in session_db.scan_iter("tl:session:*")] != []
        with redis.Redis.from_url(redis_server.url(CHECKPOINT_DB)) as cp_db:
            assert list(cp_db.scan_iter("tl:session:*")) == [], "sessions live in REDIS_URL's db"
        assert (await stores.sessions.lookup(token)).principal == "ann"
        # A blocking read (a stream, a join) goes through the readers pool: it connects now.
        await stores.records.append_event(thread_id, "run-1", "values", b"{}")
        (event,) = await stores.records.read_events(thread_id, "run-1", None, wait_seconds=0.5)
        assert (event.event, event.data) == ("values", b"{}")
        assert connections(redis_server, CHECKPOINT_DB) > 0 and connections(redis_server, SESSION_DB) > 0
    # The stack closed every client the stores opened.
    assert connections(redis_server, CHECKPOINT_DB) == 0
    assert connections(redis_server, SESSION_DB) == 0


async def test_redis_checkpoints_with_memory_sessions(redis_server: RedisServer, clean_dbs: None) -> None:
    async with AsyncExitStack() as stack:
        stores = await Stores.open(
            settings({"backend": "redis", "redis_url": redis_server.url(CHECKPOINT_DB)}), stack
        )
        assert type(stores.lease) is RedisTurnLease and type(stores.sessions) is MemorySessionStore


async def test_sqlite_checkpoints_with_redis_sessions(
    tmp_path: Path, redis_server: RedisServer, clean_dbs: None
) -> None:
    s = settings(
        {"backend": "sqlite", "sqlite_path": tmp_path / "c.sqlite"},
        {"backend": "redis", "redis_url": redis_server.url(SESSION_DB)},
    )
    async with AsyncExitStack() as stack:
        stores = await Stores.open(s, stack)
        # Lease and records stay process-local without Redis checkpoints (ADR 0009).
        assert type(stores.lease) is LocalTurnLease and type(stores.records) is LocalRecordStore
        assert type(stores.sessions) is RedisSessionStore
        assert connections(redis_server, SESSION_DB) > 0
    assert connections(redis_server, SESSION_DB) == 0


# --- the eviction warning -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "warned"),
    [("allkeys-lru", True), ("volatile-ttl", True), ("allkeys-random", True), ("noeviction", False)],
)
async def test_an_evicting_checkpoint_redis_is_warned_about(
    policy: str, warned: bool, fresh_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    with fresh_redis.client() as admin:
        admin.config_set("maxmemory-policy", policy)
    caplog.set_level(logging.WARNING, logger="threadline.stores")
    async with AsyncExitStack() as stack:
        await Stores.open(settings({"backend": "redis", "redis_url": fresh_redis.url(1)}), stack)
    found = [r for r in caplog.records if r.name == "threadline.stores"]
    assert bool(found) is warned
    if warned:
        (record,) = found
        assert record.levelno == logging.WARNING and record.maxmemory_policy == policy
        assert f"maxmemory-policy {policy}" in record.getMessage() and "noeviction" in record.getMessage()


async def test_a_redis_that_refuses_config_gets_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    # Managed Redis often disables CONFIG: the check says nothing and opening goes on.
    server = RedisServer(extra_args=("--rename-command", "CONFIG", "")).start()
    try:
        caplog.set_level(logging.DEBUG, logger="threadline.stores")
        client = aioredis.Redis.from_url(server.url(1))
        with pytest.raises(redis.ResponseError):
            await client.config_get("maxmemory-policy")
        await warn_if_evicting(client)
        await client.aclose()
        async with AsyncExitStack() as stack:
            await Stores.open(settings({"backend": "redis", "redis_url": server.url(1)}), stack)
        assert [r for r in caplog.records if r.name == "threadline.stores"] == []
    finally:
        server.close()


# --- how opening fails --------------------------------------------------------------------------


async def test_a_checkpoint_redis_that_is_down_is_store_unavailable_without_the_password(
    fresh_redis: RedisServer,
) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{fresh_redis.port}/1"
    fresh_redis.stop()
    async with AsyncExitStack() as stack:
        with pytest.raises(StoreUnavailable) as caught:
            await Stores.open(settings({"backend": "redis", "redis_url": url}), stack)
    error = caught.value
    assert error.backend == "redis" and is_store_down(error)
    assert str(error).startswith("checkpoint backend 'redis' unavailable: ")
    assert f"redis://:***@127.0.0.1:{fresh_redis.port}/1" in str(error)
    for text in (str(error), repr(error), repr(error.__cause__)):
        assert PASSWORD not in text and "SKyuQydi3z7" not in text


async def test_an_unopenable_sqlite_file_is_store_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    async with AsyncExitStack() as stack:
        with pytest.raises(StoreUnavailable) as caught:
            await Stores.open(settings({"backend": "sqlite", "sqlite_path": blocker / "c.sqlite"}), stack)
    assert caught.value.backend == "sqlite"


async def test_a_session_redis_that_is_down_is_store_unavailable_naming_it_without_the_password(
    tmp_path: Path,
) -> None:
    """The app retries opening on a store error (runtime.connect); this one must count as one,
    and say which store (and setting) it is."""
    port = free_port()
    s = settings(
        {"backend": "sqlite", "sqlite_path": tmp_path / "c.sqlite"},
        {"backend": "redis", "redis_url": f"redis://:{PASSWORD}@127.0.0.1:{port}/0"},
    )
    async with AsyncExitStack() as stack:
        with pytest.raises(StoreUnavailable) as caught:
            await Stores.open(s, stack)
    assert is_store_down(caught.value)
    assert str(caught.value).startswith(
        f"session store (REDIS_URL) unavailable: redis://:***@127.0.0.1:{port}/0"
    )
    assert PASSWORD not in str(caught.value) and PASSWORD not in repr(caught.value)


async def test_a_store_that_stops_answering_fails_the_ping(fresh_redis: RedisServer) -> None:
    async with AsyncExitStack() as stack:
        stores = await Stores.open(settings({"backend": "redis", "redis_url": fresh_redis.url(1)}), stack)
        await stores.ping()
        fresh_redis.stop()
        with pytest.raises(Exception) as caught:
            await stores.ping()
        assert is_store_down(caught.value), repr(caught.value)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CHECKPOINT_REDIS_URL", f"http://:{PASSWORD}@127.0.0.1:6379/1"),
        ("CHECKPOINT_REDIS_URL", f"redis://:{PASSWORD}@127.0.0.1:port/1"),
        ("REDIS_URL", f"redis://:{PASSWORD}@127.0.0.1:6379/zero"),
        ("REDIS_URL", f"redis+sentinel://:{PASSWORD}@127.0.0.1:26379"),
    ],
)
def test_a_misconfigured_url_stops_before_any_store_opens_naming_its_variable(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The settings Stores.open is given come from Settings.load: a URL that cannot be used never
    # gets that far (a well-formed URL to the wrong place is StoreUnavailable, above).
    monkeypatch.setenv("CHECKPOINT_BACKEND", "redis")
    monkeypatch.setenv("SESSION_BACKEND", "redis")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        Settings.load()
    assert str(caught.value).startswith(f"{variable}: ")
    assert PASSWORD not in str(caught.value) and "SKyuQydi3z7" not in str(caught.value)
