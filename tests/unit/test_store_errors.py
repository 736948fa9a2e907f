"""Which errors mean "a store is down" (503 + Retry-After) is decided in one place,
threadline.checkpoint, from each backend module's own list, loaded only for that backend."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
import redis.exceptions

from threadline.checkpoint import StoreUnavailable, is_store_down, store_errors

pytestmark = pytest.mark.unit


def test_each_backend_adds_its_own_transient_errors() -> None:
    import psycopg
    import psycopg_pool

    assert {psycopg.OperationalError, psycopg_pool.PoolTimeout} <= set(store_errors("postgres"))
    assert sqlite3.OperationalError in store_errors("sqlite")
    assert psycopg.OperationalError not in store_errors("sqlite")
    assert sqlite3.OperationalError not in store_errors("memory")


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis", "redis-stack", "postgres"])
def test_redis_outages_are_store_errors_on_every_backend(backend: str) -> None:
    """Sessions, the lease and the record store may be on Redis whatever the checkpoints use."""
    for error in (redis.exceptions.ConnectionError, redis.exceptions.ReadOnlyError, StoreUnavailable):
        assert error in store_errors(backend)


def test_is_store_down_knows_the_loaded_backends() -> None:
    store_errors("sqlite")  # loaded, as on a replica that opened it
    assert is_store_down(redis.exceptions.TimeoutError())
    assert is_store_down(sqlite3.OperationalError("database is locked"))
    assert is_store_down(StoreUnavailable("redis", "x"))
    assert not is_store_down(ValueError("a bug"))
    assert not is_store_down(redis.exceptions.ResponseError("NOSCRIPT"))  # a bug, not an outage


def test_a_sqlite_replica_never_imports_psycopg(tmp_path) -> None:
    """ADR 0001 §1: a process imports only its own backend's client library."""
    code = (
        "import sys\n"
        "from threadline.app import create_app\n"
        "from threadline.checkpoint import store_errors\n"
        "create_app()\n"
        "store_errors('sqlite')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'psycopg_pool'))\n"
        "assert not loaded, loaded\n"
    )
    env = {"CHECKPOINT_BACKEND": "sqlite", "CHECKPOINT_SQLITE_PATH": str(tmp_path / "c.sqlite")}
    result = subprocess.run(
        [sys.executable, "-c", code], env={**__import__("os").environ, **env},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
