"""Shared fixtures: real servers on free ports, started once per session where that is safe."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/servers.py, tests/helpers

from servers import PostgresServer, RedisClusterSet, RedisSentinelSet, RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One plain Redis for the session; tests isolate themselves by db number or key prefix."""
    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture
def fresh_redis() -> Iterator[RedisServer]:
    """A Redis of this test's own, for tests that stop, kill or restart it."""
    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.close()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh database per test."""
    return postgres_server.create_database(f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="session")
def redis_stack_server() -> Iterator[RedisServer]:
    """Redis 8.2 with RedisJSON and RediSearch, for the ``redis-stack`` backend."""
    from servers import redis_stack_binaries

    binary, modules = redis_stack_binaries()
    server = RedisServer(binary=binary, modules=modules).start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis8_server() -> Iterator[RedisServer]:
    """The same Redis 8.2 without modules: vector sets (VADD/VSIM), no RedisJSON/RediSearch."""
    from servers import redis_stack_binaries

    server = RedisServer(binary=redis_stack_binaries()[0]).start()
    yield server
    server.close()


@pytest.fixture
def redis_sentinel() -> Iterator[RedisSentinelSet]:
    """A primary, a replica and three sentinels of this test's own (tests kill the primary)."""
    servers = RedisSentinelSet().start()
    yield servers
    servers.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterSet]:
    """A 3-master Redis Cluster for the session; tests isolate themselves by thread id."""
    servers = RedisClusterSet(masters=3).start()
    yield servers
    servers.close()


# The kind of a test is its folder: tests/unit is `unit`, tests/integration `integration` …
KINDS = ("unit", "integration", "chart", "chaos", "e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its folder's kind, and refuse one whose own marker says otherwise
    (so `-m unit` selects exactly tests/unit, and a misfiled test is an error, not a surprise)."""
    root = Path(__file__).parent
    misfiled = []
    for item in items:
        folder = item.path.relative_to(root).parts[0]
        if folder not in KINDS:
            continue
        marked = {m.name for m in item.iter_markers() if m.name in KINDS}
        if marked - {folder}:
            misfiled.append(f"{item.nodeid}: marked {sorted(marked)} but lives in tests/{folder}")
        item.add_marker(folder)
    if misfiled:
        raise pytest.UsageError("tests whose marker contradicts their folder:\n" + "\n".join(misfiled))
