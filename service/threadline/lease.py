"""One turn at a time per thread: a turn lease with a fencing token.

With Redis checkpoints the lease lives in the checkpoint Redis, next to the thread's keys (same
``{thread_id}`` hash tag). Taking it draws a fresh token from a per-thread counter (``INCR``);
the turn passes that token to every checkpoint write, and the Redis saver refuses a write whose
token is no longer the lease's (see ``checkpoint/redis/``). So a replica that was paused or cut
off past its lease cannot fork the thread, even though it still believes it holds the lease.

The lease is renewed in the background while the turn runs and expires on its own when its
holder dies; :class:`LocalTurnLease` is the single-process fallback for the other backends
(multi-replica deployments need Redis).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

import redis.asyncio as aioredis

from threadline import metrics
from threadline.redis_keys import fence_counter_key, lease_key

log = logging.getLogger(__name__)


class LeaseBusy(Exception):
    """The thread's lease was not free within the wait; another turn is running."""


@dataclass
class HeldLease:
    """A lease this process holds. ``token`` is the fencing token (None: not fenced)."""

    thread_id: str
    token: str | None
    lost: asyncio.Event = field(default_factory=asyncio.Event)


class TurnLease(Protocol):
    def hold(self, thread_id: str) -> contextlib.AbstractAsyncContextManager[HeldLease]: ...

    async def ping(self) -> None: ...


class RedisTurnLease:
    """A per-thread lease in Redis with a monotonic fencing token.

    Args:
        client: the checkpoint Redis (db 1).
        lease_seconds: lifetime of a lease; renewed every third of it while held.
        wait_seconds: how long :meth:`hold` waits for a busy thread before :class:`LeaseBusy`.
        counter_ttl_seconds: TTL of the fence counter (the thread's checkpoint TTL).
    """

    # KEYS[1] lease, KEYS[2] fence counter; ARGV[1] lease ms, ARGV[2] counter ttl s.
    # Returns the new token, or false when the lease is held.
    ACQUIRE = """
    if redis.call('EXISTS', KEYS[1]) == 1 then return false end
    local token = redis.call('INCR', KEYS[2])
    redis.call('EXPIRE', KEYS[2], ARGV[2])
    redis.call('SET', KEYS[1], token, 'PX', ARGV[1])
    return tostring(token)
    """
    # KEYS[1] lease; ARGV[1] token, ARGV[2] lease ms. Returns 1 if still ours and extended.
    RENEW = """
    if redis.call('GET', KEYS[1]) == ARGV[1] then
      return redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    return 0
    """
    # KEYS[1] lease; ARGV[1] token. Returns 1 if it was ours and is now deleted.
    RELEASE = """
    if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
    return 0
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        lease_seconds: float,
        wait_seconds: float,
        counter_ttl_seconds: int,
    ) -> None:
        self._client = client
        self._lease_ms = int(lease_seconds * 1000)
        self._wait = wait_seconds
        self._counter_ttl = counter_ttl_seconds
        self._acquire = client.register_script(self.ACQUIRE)
        self._renew = client.register_script(self.RENEW)
        self._release = client.register_script(self.RELEASE)

    async def ping(self) -> None:
        await self._client.ping()

    async def _try_acquire(self, thread_id: str) -> str | None:
        keys = [lease_key(thread_id), fence_counter_key(thread_id)]
        token = await self._acquire(keys=keys, args=[self._lease_ms, self._counter_ttl])
        return token.decode() if isinstance(token, bytes) else token

    @contextlib.asynccontextmanager
    async def hold(self, thread_id: str) -> AsyncIterator[HeldLease]:
        """Hold the thread's lease for the body; renewed in the background, released after.

        Raises:
            LeaseBusy: not free within ``wait_seconds``.
        """
        started = time.monotonic()
        delay = 0.01
        while (token := await self._try_acquire(thread_id)) is None:
            if time.monotonic() - started >= self._wait:
                metrics.LEASE_CONFLICTS.inc()
                raise LeaseBusy(thread_id)
            # Jittered backoff up to 100 ms: a lease is released within a few ms of a turn's
            # end, and a dead holder's lease expires after lease_seconds.
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 0.1)
        metrics.LEASE_WAIT_SECONDS.observe(time.monotonic() - started)
        held = HeldLease(thread_id, token)
        renewer = asyncio.create_task(self._keep_renewed(held), name=f"lease-renew-{thread_id}")
        try:
            yield held
        finally:
            renewer.cancel()
            # The body may be ending because it was cancelled (client gone): release anyway, in
            # a task of its own that the cancellation cannot reach, or the next turn waits for
            # the lease to expire.
            await asyncio.shield(asyncio.ensure_future(self._release_quietly(held)))

    async def _release_quietly(self, held: HeldLease) -> None:
        try:
            await self._release(keys=[lease_key(held.thread_id)], args=[held.token])
        except Exception as exc:  # the lease expires by itself; a log line is enough
            log.warning(
                "lease release failed", extra={"thread_id": held.thread_id, "error": type(exc).__name__}
            )

    async def _keep_renewed(self, held: HeldLease) -> None:
        interval = self._lease_ms / 3000
        while True:
            await asyncio.sleep(interval)
            try:
                ours = await self._renew(keys=[lease_key(held.thread_id)], args=[held.token, self._lease_ms])
            except Exception as exc:  # Redis away: keep trying; fencing keeps writes safe
                log.warning(
                    "lease renewal failed", extra={"thread_id": held.thread_id, "error": type(exc).__name__}
                )
                continue
            if not ours:
                metrics.LEASE_LOST.inc()
                log.warning("lease lost", extra={"thread_id": held.thread_id})
                held.lost.set()
                return


class LocalTurnLease:
    """A process-local lock per thread, for backends without Redis. Not fenced."""

    def __init__(self, *, wait_seconds: float) -> None:
        self._wait = wait_seconds
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    async def ping(self) -> None:
        return None

    @contextlib.asynccontextmanager
    async def hold(self, thread_id: str) -> AsyncIterator[HeldLease]:
        lock, users = self._locks.get(thread_id, (asyncio.Lock(), 0))
        self._locks[thread_id] = (lock, users + 1)
        started = time.monotonic()
        try:
            try:
                await asyncio.wait_for(lock.acquire(), timeout=self._wait)
            except TimeoutError:
                metrics.LEASE_CONFLICTS.inc()
                raise LeaseBusy(thread_id) from None
            metrics.LEASE_WAIT_SECONDS.observe(time.monotonic() - started)
            try:
                yield HeldLease(thread_id, None)
            finally:
                lock.release()
        finally:
            lock, users = self._locks[thread_id]
            if users == 1:
                del self._locks[thread_id]
            else:
                self._locks[thread_id] = (lock, users - 1)
