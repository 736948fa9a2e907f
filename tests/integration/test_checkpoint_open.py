"""``open_checkpointer`` against real stores: metrics, migrations under concurrency, a store
that is down (StoreUnavailable, never memory, never a password), and backend specifics."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import psycopg
import pytest
import redis
from checkpoint_graph import build_graph, settings_for
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from prometheus_client import REGISTRY

from threadline import config
from threadline.checkpoint import InstrumentedSaver, StoreUnavailable, open_checkpointer
from threadline.config import CheckpointSettings

from servers import RedisServer, free_port

pytestmark = pytest.mark.integration

PASSWORD = "Du0PmDvmqDWqDTgfGnmi6/SKyuQydi3z7cPTgEQoE+s="


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis", "redis-stack", "postgres"])
async def test_a_graph_turn_moves_the_checkpoint_metrics(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    def snapshot() -> dict[str, float]:
        return {
            "reads": sample("threadline_checkpoint_read_duration_seconds_count", backend=backend),
            "writes": sample("threadline_checkpoint_write_duration_seconds_count", backend=backend),
            "get": sample(
                "threadline_checkpoint_operations_total",
                backend=backend,
                op="get_tuple",
            ),
            "put": sample("threadline_checkpoint_operations_total", backend=backend, op="put"),
            "put_writes": sample(
                "threadline_checkpoint_operations_total",
                backend=backend,
                op="put_writes",
            ),
            "errors": sum(
                sample("threadline_checkpoint_errors_total", backend=backend, op=op)
                for op in ("get_tuple", "put", "put_writes", "list")
            ),
        }

    async with open_checkpointer(settings_for(backend, request, tmp_path)) as saver:
        assert isinstance(saver, InstrumentedSaver)
        before = snapshot()
        graph = build_graph(saver)
        await graph.ainvoke(
            {"messages": [HumanMessage("hi")]},
            {"configurable": {"thread_id": "metrics"}},
        )
        after = snapshot()
    for key in ("reads", "writes", "get", "put", "put_writes"):
        assert after[key] > before[key], (key, before, after)
    assert after["errors"] == before["errors"]
    assert after["writes"] - before["writes"] == (
        after["put"] - before["put"] + after["put_writes"] - before["put_writes"]
    )


async def test_four_replicas_migrate_one_fresh_database_at_once(
    postgres_url: str,
) -> None:
    settings = config.load(CheckpointSettings, backend="postgres", postgres_url=postgres_url)
    all_open = asyncio.Barrier(4)

    async def replica() -> None:
        async with open_checkpointer(settings) as saver:
            await all_open.wait()  # the four are open together, each past its setup()
            assert await saver.aget_tuple({"configurable": {"thread_id": "x"}}) is None

    async with asyncio.timeout(60):  # the blocking-lock variant hangs here forever
        await asyncio.gather(*(replica() for _ in range(4)))
    with psycopg.connect(postgres_url) as conn:
        versions = [row[0] for row in conn.execute("SELECT v FROM checkpoint_migrations")]
        indexes = {
            row[0]
            for row in conn.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE '%thread_id_idx'")
        }
        invalid = conn.execute("SELECT count(*) FROM pg_index WHERE NOT indisvalid").fetchone()
    assert sorted(versions) == list(range(len(AsyncPostgresSaver.MIGRATIONS)))  # each once
    assert indexes == {
        "checkpoints_thread_id_idx",
        "checkpoint_blobs_thread_id_idx",
        "checkpoint_writes_thread_id_idx",
    }
    assert invalid == (0,)  # no half-built CREATE INDEX CONCURRENTLY left behind


async def test_a_second_open_does_not_migrate_again(postgres_url: str) -> None:
    settings = config.load(CheckpointSettings, backend="postgres", postgres_url=postgres_url)
    async with open_checkpointer(settings):
        pass
    async with open_checkpointer(settings):
        pass
    with psycopg.connect(postgres_url) as conn:
        versions = [row[0] for row in conn.execute("SELECT v FROM checkpoint_migrations")]
    assert sorted(versions) == list(range(len(AsyncPostgresSaver.MIGRATIONS)))


async def _unavailable(settings: CheckpointSettings) -> StoreUnavailable:
    with pytest.raises(StoreUnavailable) as caught:
        async with open_checkpointer(settings):
            pytest.fail("opened a store that is down")
    error = caught.value
    assert error.backend == settings.backend
    for text in (str(error), repr(error), repr(error.__cause__)):
        assert PASSWORD not in text and "SKyuQydi3z7" not in text
    return error


@pytest.mark.parametrize("backend", ["redis", "redis-stack"])
async def test_redis_down_is_store_unavailable(backend: str, fresh_redis: RedisServer) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{fresh_redis.port}/0"
    fresh_redis.stop()
    settings = config.load(CheckpointSettings, backend=backend, redis_url=url)
    error = await _unavailable(settings)
    assert f"redis://:***@127.0.0.1:{fresh_redis.port}/0" in str(error)


async def test_redis_stack_on_plain_redis_says_what_is_missing(
    redis_server: RedisServer,
) -> None:
    settings = config.load(CheckpointSettings, backend="redis-stack", redis_url=redis_server.url(0))
    error = await _unavailable(settings)
    assert "RediSearch" in str(error) and "CHECKPOINT_BACKEND=redis" in str(error)


async def test_postgres_down_is_store_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from threadline.checkpoint import postgres

    monkeypatch.setattr(postgres, "CONNECT_TIMEOUT", 1.0)
    url = f"postgresql://app:{PASSWORD.replace('/', '%2F')}@127.0.0.1:{free_port()}/app"
    error = await _unavailable(config.load(CheckpointSettings, backend="postgres", postgres_url=url))
    assert "127.0.0.1" in str(error)


async def test_sqlite_unopenable_is_store_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    await _unavailable(config.load(CheckpointSettings, backend="sqlite", sqlite_path=blocker / "c.sqlite"))


async def test_sqlite_creates_parent_dirs_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "checkpoints.sqlite"
    async with open_checkpointer(config.load(CheckpointSettings, backend="sqlite", sqlite_path=path)):
        pass
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"checkpoints", "writes"} <= tables


async def test_sqlite_many_concurrent_turns_share_one_connection(
    tmp_path: Path,
) -> None:
    settings = config.load(CheckpointSettings, backend="sqlite", sqlite_path=tmp_path / "c.sqlite")
    async with open_checkpointer(settings) as saver:
        graph = build_graph(saver)

        async def conversation(n: int) -> int:
            thread = {"configurable": {"thread_id": f"t{n}"}}
            for i in range(3):
                result = await graph.ainvoke({"messages": [HumanMessage(f"m{i}")]}, thread)
            history = [t async for t in saver.alist(thread)]
            assert history
            return len(result["messages"])

        lengths = await asyncio.gather(*(conversation(n) for n in range(20)))
    assert lengths == [6] * 20


async def test_redis_stack_ttl_is_whole_minutes_rounded_up(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    settings = settings_for("redis-stack", request, tmp_path).model_copy(update={"redis_ttl": 90})
    async with open_checkpointer(settings) as saver:
        graph = build_graph(saver)
        await graph.ainvoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "ttl"}})
    server = request.getfixturevalue("redis_stack_server")
    with redis.Redis.from_url(server.url(0)) as client:
        ttls = {client.ttl(key) for key in client.scan_iter("checkpoint*")}
    assert ttls and all(60 < ttl <= 120 for ttl in ttls), ttls  # 90 s → 2 min


async def test_no_argument_reads_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECKPOINT_BACKEND", "sqlite")
    monkeypatch.setenv("CHECKPOINT_SQLITE_PATH", str(tmp_path / "env" / "c.sqlite"))
    async with open_checkpointer() as saver:
        assert isinstance(saver, InstrumentedSaver) and saver.backend == "sqlite"
    assert (tmp_path / "env" / "c.sqlite").exists()


async def test_no_argument_misconfiguration_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHECKPOINT_BACKEND", "redis-stack")
    monkeypatch.setenv("CHECKPOINT_REDIS_URL", f"redis://:{PASSWORD}@127.0.0.1:1/1")
    with pytest.raises(config.ConfigError, match=r"^CHECKPOINT_REDIS_URL: .*db 0") as caught:
        async with open_checkpointer():
            pytest.fail("opened a misconfigured store")
    assert PASSWORD not in str(caught.value)
