"""Long-term memory: the LangGraph Store (``BaseStore``) of the configured backend, one per
process, shared by the API's ``/store`` routes and every graph run (issue 22).

Where items live follows ``CHECKPOINT_BACKEND`` and its URL, so one setting still decides
where state lives:

============  ==============================================================================
memory        ``InMemoryStore`` (process-local, like the checkpoints; TTLs are not applied)
sqlite        ``AsyncSqliteStore`` in a file beside the checkpoints: ``<name>.store.sqlite``;
              ``store.index`` needs a Python whose sqlite3 loads extensions (sqlite-vec)
postgres      ``AsyncPostgresStore`` on ``CHECKPOINT_POSTGRES_URL``, migrated once across
              replicas (the checkpoints' advisory lock); ``store.index`` needs pgvector
redis         threadline's :class:`~threadline.store.redis.RedisStore` on plain Redis (ADR 0015)
redis-stack   the same: langgraph-checkpoint-redis 0.5.2's stores do not work here (its
              ``AsyncRedisStore`` cannot be built with redisvl 0.28, and its ``RedisStore``'s
              ``get`` finds no item: tests/integration/test_store_contract.py records both)
============  ==============================================================================

``langgraph.json``'s ``store`` (``index``: ``dims``, ``embed``, ``fields``; ``ttl``:
``default_ttl``, ``refresh_on_read``, ``sweep_interval_minutes``) is read by
:func:`store_options` and applies to every backend that has the feature.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from langgraph.store.base import BaseStore, IndexConfig, TTLConfig, ensure_embeddings

from threadline.config import ConfigError, Settings
from threadline.errors import StoreUnavailable
from threadline.store.tenant import MAX_TTL_MINUTES

log = logging.getLogger(__name__)

WHERE = "LANGGRAPH_CONFIG: `store"
INDEX_KEYS = frozenset({"dims", "embed", "fields"})
TTL_KEYS = frozenset({"default_ttl", "refresh_on_read", "sweep_interval_minutes"})


@dataclass(frozen=True)
class StoreOptions:
    """What ``langgraph.json`` ``store`` asks for, checked (embeddings resolved)."""

    index: IndexConfig | None = None
    ttl: TTLConfig | None = None


def store_options(section: object, import_object: Any = None) -> StoreOptions:
    """Check ``langgraph.json``'s ``store`` section.

    Args:
        section: the section as written (None: no index, no TTL).
        import_object: resolves ``./file.py:fn`` / ``module:fn`` (the registry's importer).

    Raises:
        ConfigError: naming the key that is wrong.
    """
    if section is None:
        return StoreOptions()
    if not isinstance(section, dict):
        raise ConfigError(f"{WHERE}` must be an object")
    for key in sorted(set(section) - {"index", "ttl"}):
        log.warning("langgraph.json key 'store.%s' is not served by threadline and is ignored", key)
    return StoreOptions(_index(section.get("index"), import_object), _ttl(section.get("ttl")))


def _index(index: object, import_object: Any) -> IndexConfig | None:
    if index is None:
        return None
    if not isinstance(index, dict) or set(index) - INDEX_KEYS:
        raise ConfigError(f"{WHERE}.index` must be an object of {', '.join(sorted(INDEX_KEYS))}")
    dims = index.get("dims")
    if not isinstance(dims, int) or isinstance(dims, bool) or dims <= 0:
        raise ConfigError(f"{WHERE}.index.dims` must be a positive integer")
    fields = index.get("fields")
    if fields is not None and not (isinstance(fields, list) and all(isinstance(f, str) for f in fields)):
        raise ConfigError(f"{WHERE}.index.fields` must be a list of field paths")
    config: IndexConfig = {"dims": dims, "embed": _embeddings(index.get("embed"), import_object)}
    if fields is not None:
        config["fields"] = fields
    return config


def _embeddings(embed: object, import_object: Any) -> Any:
    """An ``Embeddings`` for ``provider:model`` (LangChain's ``init_embeddings``) or for a
    function named by a path (``./embed.py:fn``, sync or async, texts → vectors)."""
    where = f"{WHERE}.index.embed`"
    if not isinstance(embed, str) or ":" not in embed:
        raise ConfigError(f"{where} must be 'provider:model' or './file.py:function'")
    location = embed.rpartition(":")[0]
    if location.endswith(".py") or "/" in location or "." in location:
        if import_object is None:
            raise ConfigError(f"{where}: a path needs a langgraph.json to be relative to")
        value = import_object(embed, where)
        if not callable(value):
            raise ConfigError(f"{where} ({embed}): is a {type(value).__name__}, not a function")
        return ensure_embeddings(value)
    try:
        from langchain.embeddings import init_embeddings

        return init_embeddings(embed)
    except ImportError as exc:
        raise ConfigError(f"{where} ({embed}): {exc.name or 'a package'} is not installed") from None
    except ValueError as exc:  # an unknown provider; the text names it and holds no secret
        raise ConfigError(f"{where} ({embed}): {exc}") from None


def _ttl(ttl: object) -> TTLConfig | None:
    if ttl is None:
        return None
    if not isinstance(ttl, dict) or set(ttl) - TTL_KEYS:
        raise ConfigError(f"{WHERE}.ttl` must be an object of {', '.join(sorted(TTL_KEYS))}")
    config: TTLConfig = {}
    default = ttl.get("default_ttl")
    if default is not None:
        if (
            not isinstance(default, int | float)
            or isinstance(default, bool)
            or not 0 < default <= MAX_TTL_MINUTES
        ):
            raise ConfigError(
                f"{WHERE}.ttl.default_ttl` must be a positive number of minutes, at most {MAX_TTL_MINUTES}"
            )
        config["default_ttl"] = float(default)
    if "refresh_on_read" in ttl:
        if not isinstance(ttl["refresh_on_read"], bool):
            raise ConfigError(f"{WHERE}.ttl.refresh_on_read` must be true or false")
        config["refresh_on_read"] = ttl["refresh_on_read"]
    sweep = ttl.get("sweep_interval_minutes")
    if sweep is not None:
        if not isinstance(sweep, int) or isinstance(sweep, bool) or sweep <= 0:
            raise ConfigError(f"{WHERE}.ttl.sweep_interval_minutes` must be a positive integer")
        config["sweep_interval_minutes"] = sweep
    return config


def sqlite_store_path(checkpoints: Path) -> Path:
    """The store's file beside the checkpoints' (``checkpoints.sqlite`` →
    ``checkpoints.store.sqlite``): a second connection on the checkpoints' own file would
    contend for its write lock with every turn."""
    return checkpoints.with_name(f"{checkpoints.stem}.store{checkpoints.suffix or '.sqlite'}")


@asynccontextmanager
async def open_store(
    settings: Settings, options: StoreOptions, client: aioredis.Redis | None = None
) -> AsyncIterator[BaseStore]:
    """Open the store of ``CHECKPOINT_BACKEND``; yield it ready (tables, indexes, scripts).

    Args:
        settings: the process's settings (the checkpoint backend and URL, the scan bound).
        options: ``langgraph.json``'s ``store``.
        client: the ``redis`` backend's client (the lease's and records').

    Raises:
        ConfigError: the backend cannot give what ``options`` asks (an index without pgvector).
        StoreUnavailable: the store cannot be reached now.
    """
    checkpoint = settings.checkpoint
    backend = checkpoint.backend
    if backend == "memory":
        if options.ttl:
            log.warning("store.ttl is not applied by the memory backend (items live until restart)")
        from langgraph.store.memory import InMemoryStore

        yield InMemoryStore(index=options.index)
    elif backend == "sqlite":
        async with _sqlite(checkpoint.sqlite_path, options) as store:
            yield store
    elif backend == "postgres":
        async with _postgres(checkpoint.postgres_url or "", options) as store:
            yield store
    else:  # redis, and redis-stack (see the module docstring)
        from threadline.store.redis import RedisStore

        assert client is not None, "the redis backend's store needs the lease's client"
        store = RedisStore(
            client, index=options.index, ttl=options.ttl, max_scan=settings.server.max_store_scan
        )
        await store.setup()
        yield store


@asynccontextmanager
async def _swept(store: Any, options: StoreOptions) -> AsyncIterator[None]:
    """Run the store's own TTL sweeper while open, when ``sweep_interval_minutes`` asks."""
    if options.ttl and options.ttl.get("sweep_interval_minutes"):
        await store.start_ttl_sweeper()
        try:
            yield
        finally:
            await store.stop_ttl_sweeper()
    else:
        yield


@asynccontextmanager
async def _sqlite(checkpoints: Path, options: StoreOptions) -> AsyncIterator[BaseStore]:
    import sqlite3

    import aiosqlite
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    if options.index and not hasattr(sqlite3.Connection, "enable_load_extension"):
        # Semantic search on SQLite is the sqlite-vec extension, which this Python cannot load.
        raise ConfigError(
            f"{WHERE}.index`: this Python's sqlite3 cannot load extensions (sqlite-vec), so "
            "CHECKPOINT_BACKEND=sqlite has no semantic search here; drop store.index or use "
            "another backend"
        )
    path = sqlite_store_path(checkpoints)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = await aiosqlite.connect(str(path), isolation_level=None)
    except (OSError, aiosqlite.Error) as exc:
        raise StoreUnavailable("sqlite", f"cannot open the store file ({type(exc).__name__})") from exc
    try:
        store = AsyncSqliteStore(conn, index=options.index, ttl=options.ttl)  # type: ignore[arg-type]
        await store.setup()
        async with _swept(store, options):
            yield store
    finally:
        await conn.close()


@asynccontextmanager
async def _postgres(conninfo: str, options: StoreOptions) -> AsyncIterator[BaseStore]:
    import psycopg
    from langgraph.store.postgres import AsyncPostgresStore

    from threadline.checkpoint.postgres import describe, migrate, open_pool

    target = describe(conninfo)
    async with open_pool(conninfo, "threadline-store", max_size=4) as pool:
        store = AsyncPostgresStore(pool, index=options.index, ttl=options.ttl)  # type: ignore[arg-type]
        try:
            await migrate(store, conninfo)
        except (psycopg.errors.FeatureNotSupported, psycopg.errors.UndefinedFile) as exc:
            raise ConfigError(
                f"{WHERE}.index`: the Postgres at {target} has no pgvector extension "
                "(CREATE EXTENSION vector failed); install it or drop store.index"
            ) from exc
        except psycopg.OperationalError as exc:
            failure = type(exc).__name__
            raise StoreUnavailable("postgres", f"store migrations on {target} failed: {failure}") from exc
        async with _swept(store, options):
            yield store
