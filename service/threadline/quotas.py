"""Per-tenant quotas on what is stored (ADR 0006): live threads per principal
(``QUOTA_THREADS_PER_PRINCIPAL``) and bytes clients make the server store on one thread
(``QUOTA_THREAD_BYTES``: messages, a run's input, command, config, context and metadata, state
updates, thread metadata; a copy starts with its source's count). A limit of 0 is no limit.
The other per-tenant limits are checked where the thing is stored: queued runs per thread
(``QUOTA_QUEUED_RUNS_PER_THREAD``, in the record store's queueing step), events per run and
the recursion ceiling (``MAX_EVENTS_PER_RUN``, ``MAX_RECURSION_LIMIT``, by the runs layer).

One shared Redis holds every tenant's conversations, so without these one tenant can fill it
(issue 10: 40 turns of 32 KB on one thread grew Redis by 123 MiB) and, depending on the Redis,
either get it OOM-killed or have it evict other tenants' threads, sessions and fence counters.

Callers (the ``/v1`` turns, and the LangGraph API's threads and runs) call:

* :meth:`Quotas.reserve_thread` before a thread is created;
* :meth:`Quotas.add_message_bytes` before a client's message is stored (not again for a
  retried message id the thread already holds), or :meth:`Quotas.run_charge` to have a
  LangGraph API run's bytes counted in the step that stores the run (:class:`RunCharge`);
* :meth:`Quotas.release_thread` after a thread is deleted, or when its creation failed;
* :meth:`Quotas.used_bytes` to start a copy's count at its source's;
* :meth:`Quotas.reserve_store_item` before a store item is written (through the API or by a
  graph its runs run) and :meth:`Quotas.release_store_item` after one is deleted
  (``QUOTA_STORE_ITEMS_PER_PRINCIPAL``; an item's size is bounded by ``QUOTA_STORE_ITEM_BYTES``
  where it is written, :mod:`threadline.store.tenant`).

With Redis checkpoints the counters live in the checkpoint Redis, shared by every replica
(:mod:`threadline.redis_keys`): a principal's threads are a ZSET scored by last activity, so a
thread that expired with its checkpoint TTL stops counting without anyone deleting it; a
thread's bytes are a counter with the thread's TTL. Other backends count in-process (those
deployments run one replica; the turn lease is process-local there too).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import redis.asyncio as aioredis

from threadline.checkpoint.redis import pipelining
from threadline.config import QuotaSettings, env_name
from threadline.redis_client import is_cluster
from threadline.redis_keys import principal_store_items_key, principal_threads_key, thread_bytes_key


class QuotaExceeded(Exception):
    """A quota would be exceeded; ``setting`` is the environment variable of the limit."""

    def __init__(self, setting: str, limit: int) -> None:
        super().__init__(setting)
        self.setting, self.limit = setting, limit


THREADS = env_name(QuotaSettings, "threads_per_principal")
THREAD_BYTES = env_name(QuotaSettings, "thread_bytes")
QUEUED_RUNS = env_name(QuotaSettings, "queued_runs_per_thread")
EVENTS_PER_RUN = env_name(QuotaSettings, "max_events_per_run")
STORE_ITEMS = env_name(QuotaSettings, "store_items_per_principal")
STORE_ITEM_BYTES = env_name(QuotaSettings, "store_item_bytes")
ASSISTANTS = env_name(QuotaSettings, "assistants_per_principal")
ASSISTANT_BYTES = env_name(QuotaSettings, "assistant_bytes")
CRONS = env_name(QuotaSettings, "crons_per_principal")


@dataclass(frozen=True, slots=True)
class RunCharge:
    """A run's bytes toward its thread's ``QUOTA_THREAD_BYTES``, for the record store to count in
    the step that stores the run (:data:`RedisQuotas.CHARGE_FUNCTION`): one round trip and one
    script call less per run than counting first (issue 24). Only Redis quotas off a Cluster
    make them (one node holds both keys), and only the Redis record store takes them."""

    keys: tuple[str, str]  # the thread's bytes, the principal's threads
    args: tuple[int | str, ...]  # n, limit, ttl s, thread id, now ms, ttl ms
    limit: int


class Quotas(Protocol):
    # Whether a run's bytes are counted in the step that stores it (run_charge gives charges).
    defers_run_charges: bool

    async def reserve_thread(self, principal: str, thread_id: str) -> None:
        """Count a new thread of ``principal``. Raises :class:`QuotaExceeded`."""

    async def add_message_bytes(self, principal: str, thread_id: str, n: int) -> None:
        """Count ``n`` more message bytes on the thread (and mark it active). Raises
        :class:`QuotaExceeded`, counting nothing."""

    def run_charge(self, principal: str, thread_id: str, n: int) -> RunCharge | None:
        """``n`` bytes of a run, for the record store to count as it stores the run; None
        where it cannot (then :meth:`add_message_bytes` counts them first)."""

    async def release_thread(self, principal: str, thread_id: str) -> None:
        """Forget a deleted thread."""

    async def used_bytes(self, thread_id: str) -> int:
        """The bytes counted on the thread so far."""

    async def reserve_store_item(self, principal: str, item: str, expires_at: float | None) -> None:
        """Count store item ``item`` (a digest) of ``principal`` until ``expires_at`` (epoch
        seconds; None: until deleted); one already counted is just renewed. Raises
        :class:`QuotaExceeded`."""

    async def release_store_item(self, principal: str, item: str) -> None:
        """Forget a deleted store item."""


class RedisQuotas:
    """Quotas counted in Redis, shared by every replica.

    Args:
        client: the checkpoint Redis.
        settings: the limits.
        ttl_seconds: the checkpoint TTL: a thread idle this long is gone and stops counting.
        clock: wall-clock seconds (injectable for tests).
    """

    # KEYS[1] principal's threads; ARGV[1] thread id, ARGV[2] now ms, ARGV[3] ttl ms, ARGV[4]
    # limit. Returns 1 (counted) or 0 (at the limit).
    RESERVE = """
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[2]) - tonumber(ARGV[3]))
    local limit = tonumber(ARGV[4])
    if limit > 0 and redis.call('ZCARD', KEYS[1]) >= limit then return 0 end
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return 1
    """
    # charge(bytes key, principal's threads key, n, limit, ttl s, thread id, now ms, ttl ms):
    # the activity mark (even when the bytes are refused: the thread exists (XX) and its
    # client just used it), then the new total, or -1 (nothing counted) when it would pass the
    # limit. Both keys on one node (not on Redis Cluster). Also for the record store's run
    # creation (RunCharge): one definition of the count.
    CHARGE_FUNCTION = """
    local function charge(bytes, threads, n, limit, ttl, thread_id, now_ms, ttl_ms)
      redis.call('ZADD', threads, 'XX', now_ms, thread_id)
      redis.call('PEXPIRE', threads, ttl_ms)
      local total = tonumber(redis.call('GET', bytes) or '0') + tonumber(n)
      limit = tonumber(limit)
      if limit > 0 and total > limit then return -1 end
      redis.call('SET', bytes, total, 'EX', ttl)
      return total
    end
    """
    # KEYS[1] thread's bytes; ARGV[1] n, ARGV[2] limit, ARGV[3] ttl s. Returns the new total,
    # or -1 (nothing counted) when it would pass the limit (on Redis Cluster, beside the mark).
    ADD_BYTES = """
    local total = tonumber(redis.call('GET', KEYS[1]) or '0') + tonumber(ARGV[1])
    local limit = tonumber(ARGV[2])
    if limit > 0 and total > limit then return -1 end
    redis.call('SET', KEYS[1], total, 'EX', ARGV[3])
    return total
    """
    # The charge as a script of its own: KEYS[1] thread's bytes, KEYS[2] principal's threads;
    # ARGV[1..6] as the function's n .. ttl ms.
    CHARGE = CHARGE_FUNCTION + "return charge(KEYS[1], KEYS[2], unpack(ARGV))"

    # KEYS[1] principal's store items; ARGV[1] item, ARGV[2] now ms, ARGV[3] expiry ms (or
    # +inf), ARGV[4] limit. Expired items stop counting first. Returns 1 (counted) or 0.
    RESERVE_ITEM = """
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
    local limit = tonumber(ARGV[4])
    if limit > 0 and not redis.call('ZSCORE', KEYS[1], ARGV[1])
        and redis.call('ZCARD', KEYS[1]) >= limit then return 0 end
    redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
    return 1
    """

    def __init__(
        self,
        client: aioredis.Redis,
        settings: QuotaSettings,
        ttl_seconds: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._settings = settings
        self._ttl = ttl_seconds
        self._clock = clock
        self._reserve = client.register_script(self.RESERVE)
        self._add_bytes = client.register_script(self.ADD_BYTES)
        self._charge = client.register_script(self.CHARGE)
        self._reserve_item = client.register_script(self.RESERVE_ITEM)
        self._cluster = is_cluster(client)
        # A run's count shares a round trip with the other calls of its event-loop iteration
        # (concurrent runs' records, counts): checkpoint/redis/pipelining.py.
        self._pipelining = pipelining.shared(client)
        self.defers_run_charges = self._pipelining is not None

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def reserve_thread(self, principal: str, thread_id: str) -> None:
        limit = self._settings.threads_per_principal
        args = [thread_id, self._now_ms(), self._ttl * 1000, limit]
        if not await self._reserve(keys=[principal_threads_key(principal)], args=args):
            raise QuotaExceeded(THREADS, limit)

    async def add_message_bytes(self, principal: str, thread_id: str, n: int) -> None:
        # One round trip (a LangGraph API run calls this once per run, or hands it to its
        # creation as a RunCharge): the count, and the thread is active now, so it counts until
        # ttl after this (its checkpoints live that long). Two slots on Redis Cluster, so not
        # one script there; and redis-py's cluster pipeline refuses scripts, so the two are
        # sent side by side.
        charge = self.run_charge(principal, thread_id, n)
        if charge is not None and self._pipelining is not None:
            total = await self._pipelining.run(self._charge, [*charge.keys], [*charge.args])
        else:
            limit = self._settings.thread_bytes
            total, _ = await asyncio.gather(
                self._add_bytes(keys=[thread_bytes_key(thread_id)], args=[n, limit, self._ttl]),
                self._mark_active(principal_threads_key(principal), thread_id),
            )
        if total < 0:
            raise QuotaExceeded(THREAD_BYTES, self._settings.thread_bytes)

    def run_charge(self, principal: str, thread_id: str, n: int) -> RunCharge | None:
        if self._pipelining is None:  # a Cluster: the two keys are on two nodes
            return None
        limit = self._settings.thread_bytes
        keys = (thread_bytes_key(thread_id), principal_threads_key(principal))
        args = (n, limit, self._ttl, thread_id, self._now_ms(), self._ttl * 1000)
        return RunCharge(keys, args, limit)

    async def _mark_active(self, key: str, thread_id: str) -> None:
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.zadd(key, {thread_id: self._now_ms()}, xx=True)
            pipe.pexpire(key, self._ttl * 1000)
            await pipe.execute()

    async def release_thread(self, principal: str, thread_id: str) -> None:
        await self._client.zrem(principal_threads_key(principal), thread_id)
        await self._client.delete(thread_bytes_key(thread_id))

    async def used_bytes(self, thread_id: str) -> int:
        return int(await self._client.get(thread_bytes_key(thread_id)) or 0)

    async def reserve_store_item(self, principal: str, item: str, expires_at: float | None) -> None:
        limit = self._settings.store_items_per_principal
        expiry = "+inf" if expires_at is None else int(expires_at * 1000)
        args = [item, self._now_ms(), expiry, limit]
        if not await self._reserve_item(keys=[principal_store_items_key(principal)], args=args):
            raise QuotaExceeded(STORE_ITEMS, limit)

    async def release_store_item(self, principal: str, item: str) -> None:
        await self._client.zrem(principal_store_items_key(principal), item)


class LocalQuotas:
    """Quotas counted in this process (backends without Redis: one replica)."""

    defers_run_charges = False

    def __init__(self, settings: QuotaSettings, clock: Callable[[], float] = time.time) -> None:
        self._settings = settings
        self._clock = clock
        self._threads: dict[str, set[str]] = {}
        self._bytes: dict[str, int] = {}
        self._items: dict[str, dict[str, float]] = {}  # principal → item → expiry (inf: none)

    async def reserve_thread(self, principal: str, thread_id: str) -> None:
        threads = self._threads.setdefault(principal, set())
        limit = self._settings.threads_per_principal
        if limit and len(threads) >= limit:
            raise QuotaExceeded(THREADS, limit)
        threads.add(thread_id)

    async def add_message_bytes(self, principal: str, thread_id: str, n: int) -> None:
        total = self._bytes.get(thread_id, 0) + n
        limit = self._settings.thread_bytes
        if limit and total > limit:
            raise QuotaExceeded(THREAD_BYTES, limit)
        self._bytes[thread_id] = total

    def run_charge(self, principal: str, thread_id: str, n: int) -> RunCharge | None:
        return None  # counted by add_message_bytes: the local record store takes no charge

    async def release_thread(self, principal: str, thread_id: str) -> None:
        self._threads.get(principal, set()).discard(thread_id)
        self._bytes.pop(thread_id, None)

    async def used_bytes(self, thread_id: str) -> int:
        return self._bytes.get(thread_id, 0)

    async def reserve_store_item(self, principal: str, item: str, expires_at: float | None) -> None:
        items = self._items.setdefault(principal, {})
        limit = self._settings.store_items_per_principal
        if limit and item not in items and len(items) >= limit:
            now = self._clock()  # at the limit: expired items stop counting first
            for expired in [i for i, at in items.items() if at <= now]:
                del items[expired]
            if len(items) >= limit:
                raise QuotaExceeded(STORE_ITEMS, limit)
        items[item] = float("inf") if expires_at is None else expires_at

    async def release_store_item(self, principal: str, item: str) -> None:
        self._items.get(principal, {}).pop(item, None)
