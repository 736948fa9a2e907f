"""Fixtures for service tests: real replicas (``python -m threadline serve``) on real sockets."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from servers import ServiceProcess, redis_env, sqlite_env


@pytest.fixture
def start_replica(tmp_path) -> Iterator[Callable[..., ServiceProcess]]:
    """Start replicas for this test; all are killed at its end."""
    started: list[ServiceProcess] = []

    def start(env: dict[str, str], name: str = "replica", wait_ready: bool = True) -> ServiceProcess:
        replica = ServiceProcess(env, name=name, log_dir=tmp_path).start(wait_ready=wait_ready)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.kill()


@pytest.fixture
def replicas_on(fresh_redis, start_replica, tmp_path) -> Callable[..., list[ServiceProcess]]:
    """``replicas_on("redis", **env)``: two replicas on one Redis of the test's own;
    ``replicas_on("sqlite", **env)``: one replica on a SQLite file (its lock is per process)."""

    def start(backend: str = "redis", **env: str) -> list[ServiceProcess]:
        if backend == "redis":
            return [start_replica(redis_env(fresh_redis, **env), name) for name in ("a", "b")]
        return [start_replica(sqlite_env(tmp_path / "cp.sqlite", **env), "only")]

    return start


@pytest.fixture
def sdk_replicas(replicas_on) -> Callable[..., tuple[list[ServiceProcess], list]]:
    """As :func:`replicas_on`, with a ``langgraph-sdk`` client of alice's for each replica."""
    from langgraph_sdk import get_client

    from client import API_KEY

    def start(backend: str = "redis", **env: str) -> tuple[list[ServiceProcess], list]:
        procs = replicas_on(backend, **env)
        return procs, [get_client(url=p.url, api_key=API_KEY) for p in procs]

    return start
