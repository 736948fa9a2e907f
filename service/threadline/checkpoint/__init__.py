"""Conversation state: one seam, :func:`open_checkpointer`, over five backends.

=============== ==========================================================================
``memory``      LangGraph's ``InMemorySaver`` (+ ``delete_for_runs``); pod-local, warns at start-up
``sqlite``      :mod:`threadline.checkpoint.sqlite`, async bridge over the sync ``SqliteSaver``
``redis``       :mod:`threadline.checkpoint.redis`, threadline's saver on plain Redis
``redis-stack`` :mod:`threadline.checkpoint.redis_stack`, ``AsyncRedisSaver`` (db 0 only)
``postgres``    :mod:`threadline.checkpoint.postgres`, ``AsyncPostgresSaver``, migrated once
=============== ==========================================================================

Every saver comes out wrapped once by :mod:`threadline.checkpoint.instrumented` (metrics).
Whether an error means "a store is down right now" (503 + Retry-After, retry later) is decided
here, once: :func:`store_errors` / :func:`is_store_down`, from the Redis client's transient
errors and the ``TRANSIENT_ERRORS`` each backend module exports.
An unreachable store raises :class:`StoreUnavailable` at open; it is never replaced by memory.
Backend modules are imported only when chosen, so a process on one backend never imports the
client libraries of the others. (No bare ``import redis`` here: once the submodule
``threadline.checkpoint.redis`` is imported, the package attribute ``redis`` is that submodule;
Redis clients come from :mod:`threadline.redis_client`.)
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from langgraph.checkpoint.base import BaseCheckpointSaver

from threadline import config, redis_client
from threadline.checkpoint.instrumented import InstrumentedSaver, instrument
from threadline.checkpoint.memory import RollbackInMemorySaver
from threadline.config import CheckpointSettings
from threadline.errors import StoreUnavailable

__all__ = [
    "InstrumentedSaver",
    "StoreUnavailable",
    "delete_for_runs",
    "is_store_down",
    "open_checkpointer",
    "store_errors",
]

log = logging.getLogger(__name__)

Opener = Callable[[CheckpointSettings], AbstractAsyncContextManager[BaseCheckpointSaver]]


@asynccontextmanager
async def open_checkpointer(
    settings: CheckpointSettings | None = None,
) -> AsyncIterator[BaseCheckpointSaver]:
    """Open the configured checkpoint store; yield its saver, wrapped for metrics.

    Args:
        settings: the checkpoint settings; read from the environment when omitted.

    Yields:
        A ``BaseCheckpointSaver`` ready for use (schema, indexes and migrations done).

    Raises:
        ConfigError: ``settings`` omitted and the environment is misconfigured; the message
            names the variable.
        StoreUnavailable: the store cannot be reached now; the message names the backend and
            never a password. Retry later; nothing falls back to memory.
    """
    if settings is None:
        settings = config.load(CheckpointSettings)
    async with _opener(settings.backend)(settings) as saver:
        yield instrument(saver, settings.backend)


# The module of each backend that has one; imported only when that backend is chosen.
_MODULES = {
    "sqlite": "threadline.checkpoint.sqlite",
    "redis": "threadline.checkpoint.redis",
    "redis-stack": "threadline.checkpoint.redis_stack",
    "postgres": "threadline.checkpoint.postgres",
}
# Down whatever the backend: our own signal, and the OS's connection and timeout errors.
_ALWAYS_DOWN: tuple[type[Exception], ...] = (StoreUnavailable, ConnectionError, TimeoutError)


def store_errors(backend: str | None = None) -> tuple[type[Exception], ...]:
    """The exception types that mean "a store is unreachable or failing right now".

    Args:
        backend: a ``CHECKPOINT_BACKEND``: its module is imported and its errors included.
            None: the errors of every backend module this process has loaded (a backend's
            client library can only raise once it is imported).

    Returns:
        The Redis client's transient errors (sessions, lease and records use Redis with any
        backend), plus the backends' ``TRANSIENT_ERRORS``.
    """
    if backend is not None:
        if backend in _MODULES:
            importlib.import_module(_MODULES[backend])
        names = [_MODULES[backend]] if backend in _MODULES else []
    else:
        names = list(_MODULES.values())
    backend_errors = tuple(
        error for name in names for error in getattr(sys.modules.get(name), "TRANSIENT_ERRORS", ())
    )
    return (*_ALWAYS_DOWN, *redis_client.TRANSIENT_ERRORS, *backend_errors)


def is_store_down(exc: BaseException) -> bool:
    """True when ``exc`` means a store is unreachable or failing right now (see
    :func:`store_errors`): answer 503 with Retry-After, report not-ready, retry."""
    return isinstance(exc, store_errors())


async def delete_for_runs(saver: BaseCheckpointSaver, thread_id: str, run_ids: list[str]) -> None:
    """Delete what ``run_ids`` checkpointed on ``thread_id`` (a rollback): on that thread only
    where the saver can (the ``redis`` saver: its cost is independent of the number of
    threads in Redis, issue 18), else the saver's own ``adelete_for_runs``."""
    inner = getattr(saver, "inner", saver)
    if getattr(inner, "deletes_runs_of_one_thread", False):
        await saver.adelete_for_runs(run_ids, thread_id=thread_id)
    else:
        await saver.adelete_for_runs(run_ids)


def _opener(backend: str) -> Opener:
    if backend == "memory":
        return _open_memory
    if backend == "redis":
        return _open_redis
    if backend not in _MODULES:  # CheckpointSettings allows only the five names; a bug guard
        raise config.ConfigError(f"CHECKPOINT_BACKEND: unknown backend {backend!r}")
    return importlib.import_module(_MODULES[backend]).open_saver


@asynccontextmanager
async def _open_memory(_settings: CheckpointSettings) -> AsyncIterator[BaseCheckpointSaver]:
    log.warning(
        "CHECKPOINT_BACKEND=memory: conversation state lives in this process only and is lost "
        "on restart; other replicas cannot see it"
    )
    yield RollbackInMemorySaver()


@asynccontextmanager
async def _open_redis(settings: CheckpointSettings) -> AsyncIterator[BaseCheckpointSaver]:
    from threadline.checkpoint.redis import RedisCheckpointSaver

    # The saver's client connects lazily; check reachability (and the password) now so a
    # misaddressed or down Redis is reported at open, not inside the first turn.
    await redis_client.ping(
        settings.redis_url, backend="redis", sentinel_password=settings.redis_sentinel_password
    )
    saver = RedisCheckpointSaver.from_url(
        settings.redis_url,
        ttl_seconds=settings.redis_ttl,
        cache_bytes=settings.redis_cache_mb * 2**20,
        sentinel_password=settings.redis_sentinel_password,
        format=settings.redis_format,
        keep_last=settings.keep_last,
    )
    try:
        yield saver
    finally:
        await saver.aclose()
