"""Everything the service keeps state in, opened together and probed together.

Start order: checkpointer → turn lease → sessions; stop order is the reverse. Opening fails
with :class:`StoreUnavailable` when a store cannot be reached; the app then stays up, not
ready, and retries (:mod:`threadline.app`) — nothing is ever replaced by an in-memory store.
"""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import AsyncExitStack

import psycopg
import psycopg_pool
import redis.exceptions
from langgraph.checkpoint.base import BaseCheckpointSaver

from threadline.checkpoint import StoreUnavailable, open_checkpointer
from threadline.config import Settings
from threadline.lease import LocalTurnLease, RedisTurnLease, TurnLease
from threadline.redis_client import async_client
from threadline.sessions import MemorySessionStore, RedisSessionStore, SessionStore

# Exceptions that mean "a store is unreachable or failing right now": answered with 503 and
# Retry-After, never 500.
STORE_ERRORS: tuple[type[Exception], ...] = (
    StoreUnavailable,
    redis.exceptions.ConnectionError,  # MasterNotFoundError (no primary known to Sentinel) too
    redis.exceptions.TimeoutError,
    # During a failover: a Cluster whose failed master's slots are not served yet (CLUSTERDOWN,
    # TRYAGAIN, no node for a slot), or a write that reached a primary just demoted (READONLY).
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.RedisClusterException,
    redis.exceptions.ReadOnlyError,
    psycopg.OperationalError,
    psycopg_pool.PoolTimeout,
    sqlite3.OperationalError,
    ConnectionError,
    TimeoutError,
)

PING_TIMEOUT = 2.0


class Stores:
    """The opened checkpointer, turn lease and session store of one process."""

    def __init__(self, checkpointer: BaseCheckpointSaver, lease: TurnLease, sessions: SessionStore):
        self.checkpointer = checkpointer
        self.lease = lease
        self.sessions = sessions

    @classmethod
    async def open(cls, settings: Settings, stack: AsyncExitStack) -> Stores:
        """Open every store into ``stack`` (closed in reverse order by the caller).

        Raises:
            StoreUnavailable: a store cannot be reached now.
        """
        checkpointer = await stack.enter_async_context(open_checkpointer(settings.checkpoint))
        lease: TurnLease
        if settings.checkpoint.backend in ("redis", "redis-stack"):
            client = async_client(
                settings.checkpoint.redis_url, sentinel_password=settings.checkpoint.redis_sentinel_password
            )
            stack.push_async_callback(client.aclose)
            lease = RedisTurnLease(
                client,
                lease_seconds=settings.turn.lease_seconds,
                wait_seconds=settings.turn.lease_wait_seconds,
                counter_ttl_seconds=settings.checkpoint.redis_ttl,
                wait_replicas=settings.checkpoint.redis_wait_replicas,
                wait_timeout_ms=settings.checkpoint.redis_wait_timeout_ms,
            )
        else:
            lease = LocalTurnLease(wait_seconds=settings.turn.lease_wait_seconds)
        sessions: SessionStore
        if settings.session.backend == "redis":
            sessions = RedisSessionStore(
                async_client(
                    settings.session.redis_url, sentinel_password=settings.session.redis_sentinel_password
                ),
                settings.session.ttl_seconds,
            )
        else:
            sessions = MemorySessionStore(settings.session.ttl_seconds)
        stack.push_async_callback(sessions.aclose)
        stores = cls(checkpointer, lease, sessions)
        await stores.ping()
        return stores

    async def ping(self) -> None:
        """Raise a store error unless every store answers within PING_TIMEOUT."""
        probe = {"configurable": {"thread_id": "__readyz__", "checkpoint_ns": ""}}
        # Past the metrics wrapper: probes are not conversation reads and must not skew p95.
        saver = getattr(self.checkpointer, "inner", self.checkpointer)
        async with asyncio.timeout(PING_TIMEOUT):
            await saver.aget_tuple(probe)
            await self.lease.ping()
            await self.sessions.ping()
