"""Everything the service keeps state in, opened together and probed together.

Start order: checkpointer → turn lease and record store → long-term memory store
(:mod:`threadline.store`) → sessions; stop order is the reverse. The record store (LangGraph
API threads, runs, run events) shares the lease's Redis client with Redis checkpoints and is
process-local otherwise, like the lease (ADR 0009). Opening fails with
:class:`StoreUnavailable` when a store cannot be reached; the app then stays up, not ready,
and retries (:mod:`threadline.app`) — nothing is ever replaced by an in-memory store.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack

import redis.asyncio as aioredis
import redis.exceptions
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from threadline import redis_client
from threadline.checkpoint import open_checkpointer
from threadline.config import Settings
from threadline.lease import LocalTurnLease, RedisTurnLease, TurnLease
from threadline.quotas import LocalQuotas, Quotas, RedisQuotas
from threadline.redis_client import async_client
from threadline.runs.assistant_records import AssistantRecords, LocalAssistantRecords, RedisAssistantRecords
from threadline.runs.cron_records import CronRecords, LocalCronRecords, RedisCronRecords
from threadline.runs.records import RecordStore
from threadline.runs.records_local import LocalRecordStore
from threadline.runs.records_redis import RedisRecordStore
from threadline.sessions import MemorySessionStore, RedisSessionStore, SessionStore
from threadline.store import StoreOptions, open_store

log = logging.getLogger(__name__)

PING_TIMEOUT = 2.0

# maxmemory-policy values under which Redis deletes keys on its own when full.
_EVICTING = ("allkeys-", "volatile-")


async def warn_if_evicting(client: aioredis.Redis) -> None:
    """Log a warning when the checkpoint Redis evicts keys when full: it would drop other
    tenants' threads and the fence counters that must never restart (ADR 0006). Managed Redis
    may refuse CONFIG: then nothing is said."""
    try:
        found = await client.config_get("maxmemory-policy")
    except redis.exceptions.ResponseError:
        return
    policy = next(iter(found.values()), b"")
    policy = policy.decode() if isinstance(policy, bytes) else str(policy)
    if policy.startswith(_EVICTING):
        log.warning(
            "the checkpoint Redis evicts keys when full (maxmemory-policy %s): threads, sessions and "
            "fence counters may vanish; set maxmemory-policy noeviction",
            policy,
            extra={"maxmemory_policy": policy},
        )


class Stores:
    """The opened checkpointer, turn lease, record store, long-term memory store and session
    store of one process."""

    def __init__(
        self,
        checkpointer: BaseCheckpointSaver,
        lease: TurnLease,
        sessions: SessionStore,
        quotas: Quotas,
        records: RecordStore | None = None,
        store: BaseStore | None = None,
        assistants: AssistantRecords | None = None,
        crons: CronRecords | None = None,
    ):
        self.checkpointer = checkpointer
        self.lease = lease
        self.sessions = sessions
        self.quotas = quotas
        self.records: RecordStore = records if records is not None else LocalRecordStore()
        self.store = store
        self.assistants: AssistantRecords = assistants if assistants is not None else LocalAssistantRecords()
        self.crons: CronRecords = crons if crons is not None else LocalCronRecords()

    @classmethod
    async def open(
        cls, settings: Settings, stack: AsyncExitStack, store_options: StoreOptions | None = None
    ) -> Stores:
        """Open every store into ``stack`` (closed in reverse order by the caller);
        ``store_options``: ``langgraph.json``'s ``store``.

        Raises:
            StoreUnavailable: a store cannot be reached now.
        """
        checkpointer = await stack.enter_async_context(open_checkpointer(settings.checkpoint))
        lease: TurnLease
        quotas: Quotas
        records: RecordStore
        assistants: AssistantRecords
        crons: CronRecords
        client = None
        if settings.checkpoint.backend in ("redis", "redis-stack"):
            # The ``redis`` saver's own client (closed with it): records, lease and quotas then
            # share its batcher, and a run's first checkpoint read goes with its creation.
            reads_ahead = settings.checkpoint.backend == "redis"
            if reads_ahead:
                client = checkpointer.inner.client  # type: ignore[attr-defined]
            else:
                client = async_client(
                    settings.checkpoint.redis_url,
                    sentinel_password=settings.checkpoint.redis_sentinel_password,
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
            quotas = RedisQuotas(client, settings.quota, settings.checkpoint.redis_ttl)
            # Streams and joins block on reads of their own pool, one connection per slot at
            # most: however many a client opens, leases, heartbeats and quotas keep theirs.
            readers = async_client(
                settings.checkpoint.redis_url,
                sentinel_password=settings.checkpoint.redis_sentinel_password,
                max_connections=settings.server.max_streams,
            )
            stack.push_async_callback(readers.aclose)
            records = RedisRecordStore(
                client, ttl_seconds=settings.checkpoint.redis_ttl, readers=readers, reads_ahead=reads_ahead
            )
            assistants = RedisAssistantRecords(client)
            crons = RedisCronRecords(client)
            await warn_if_evicting(client)
        else:
            lease = LocalTurnLease(wait_seconds=settings.turn.lease_wait_seconds)
            quotas = LocalQuotas(settings.quota)
            records = LocalRecordStore()
            assistants = LocalAssistantRecords()
            crons = LocalCronRecords()
        store = await stack.enter_async_context(open_store(settings, store_options or StoreOptions(), client))
        sessions: SessionStore
        session = settings.session
        if session.backend == "redis":
            await redis_client.ping(
                session.redis_url,
                backend="redis",
                sentinel_password=session.redis_sentinel_password,
                store="session store (REDIS_URL)",
            )
            sessions = RedisSessionStore(
                async_client(session.redis_url, sentinel_password=session.redis_sentinel_password),
                session.ttl_seconds,
                session.max_lifetime_seconds,
            )
        else:
            sessions = MemorySessionStore(session.ttl_seconds, session.max_lifetime_seconds)
        stack.push_async_callback(sessions.aclose)
        stores = cls(checkpointer, lease, sessions, quotas, records, store, assistants, crons)
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
            await self.records.ping()
            await self.sessions.ping()
