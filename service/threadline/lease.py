"""One turn at a time per thread: a turn lease with a fencing token.

With Redis checkpoints the lease lives in the checkpoint Redis, next to the thread's keys (same
``{thread_id}`` hash tag). Taking it draws a fresh token from a per-thread counter (``INCR``);
the turn passes that token to every checkpoint write, and the Redis saver refuses a write whose
token is no longer the lease's (see ``checkpoint/redis/``). So a replica that was paused or cut
off past its lease cannot fork the thread, even though it still believes it holds the lease.

The lease is renewed in the background while the turn runs and expires on its own when its
holder dies; :class:`LocalTurnLease` is the single-process fallback for the other backends
(multi-replica deployments need Redis).

Across a failover (Sentinel or Cluster promoting a replica; ADR 0008). Replication is
asynchronous, so the promoted replica may lack the last ``INCR`` of the counter and the last
lease: its counter can go *backwards* and hand out a number a live, stale holder already has.
A token is therefore ``<counter>.<suffix>``, the suffix 48 random bits (12 hex digits) the
acquirer draws for each lease it takes: a token minted after a failover equals one minted
before it only if the counter went back to that number *and* the suffix repeats (2^-48), so
the saver's ``GET lease == token`` check refuses the stale holder. Fencing compares tokens for
equality only; nothing orders them. With ``wait_replicas`` the suffix is instead the *epoch*,
the first 12 hex digits of the primary's ``master_replid`` read inside the acquire script (a
promoted replica always has a new replid), which the confirmation below compares; without
it, no ``INFO`` runs on a lease's way (issue 24: one per turn, on the hot path of every run).
Releases before issue 24 minted every token with the epoch; both kinds live side by side in
a rolling update, since nothing but the holder that minted a token reads its suffix.

No acknowledged turn lost: with ``wait_replicas`` > 0, :meth:`RedisTurnLease.hold` confirms,
after its body ends normally and before it releases the lease, that everything written under
the lease has reached that many replicas: one script that checks the lease is still this
token's *and* that the primary is still the one the token was minted on (same epoch), then
renews the lease (a write, so it has a replication offset), and ``WAIT`` on the same
connection. Anything short of that raises :class:`NotReplicated` (a 503 with Retry-After): a
turn whose final checkpoint may be lost is never acknowledged, and the client's retry with the
same message id finds or redoes it (exactly-once, see :mod:`threadline.turns`).
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

from threadline import metrics, redis_client
from threadline.errors import StoreUnavailable
from threadline.redis_keys import fence_counter_key, lease_key
from threadline.retry import delays

log = logging.getLogger(__name__)


class LeaseBusy(Exception):
    """The thread's lease was not free within the wait; another turn is running."""


class NotReplicated(StoreUnavailable):
    """What a turn wrote could not be confirmed on ``wait_replicas`` replicas in time (or the
    primary changed under it): the turn must not be acknowledged. Answered 503 + Retry-After."""

    def __init__(self, thread_id: str, detail: str) -> None:
        super().__init__("redis", f"thread {thread_id}: {detail}")


@dataclass
class HeldLease:
    """A lease this process holds. ``token`` is the fencing token (None: not fenced).

    ``handed_off``: the body ended normally under ``hold(…, hand_off=True)`` and the lease is
    still held, for its new owner to release (:meth:`RedisTurnLease.release`, or a store
    script that deletes it in the same step as its own writes, which then sets ``released``).
    """

    thread_id: str
    token: str | None
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    handed_off: bool = False
    released: bool = False

    def token_to_release(self) -> str:
        """The token a store script may delete the lease by, in the same step as its own
        writes ("" when the lease is unfenced or released already); the script's caller then
        says so with :meth:`released_by_store`."""
        return self.token if self.token and not self.released else ""

    def released_by_store(self) -> None:
        """A store script deleted the lease (by :meth:`token_to_release`): nothing to release."""
        self.released = True


class TurnLease(Protocol):
    #: Lifetime of a lease in ms, for a store script that takes the lease itself (0: none can;
    #: a process-local lease).
    lease_ms: int

    def hold(
        self, thread_id: str, *, acquired: str | None = None, hand_off: bool = False
    ) -> contextlib.AbstractAsyncContextManager[HeldLease]: ...

    def token_suffix(self) -> str:
        """What a store script taking the lease ends its token with ('': its own choice)."""
        ...

    async def release(self, held: HeldLease) -> None: ...

    async def ping(self) -> None: ...


class RedisTurnLease:
    """A per-thread lease in Redis with a fencing token (a per-thread counter and the primary's
    epoch, see the module docstring).

    Args:
        client: the checkpoint Redis (db 1), any topology (:mod:`threadline.redis_client`).
        lease_seconds: lifetime of a lease; renewed every third of it while held.
        wait_seconds: how long :meth:`hold` waits for a busy thread before :class:`LeaseBusy`.
        counter_ttl_seconds: TTL of the fence counter (the thread's checkpoint TTL).
        wait_replicas: replicas that must confirm the body's writes before :meth:`hold`
            returns (``CHECKPOINT_REDIS_WAIT_REPLICAS``); 0 confirms nothing.
        wait_timeout_ms: how long to wait for them (``CHECKPOINT_REDIS_WAIT_TIMEOUT_MS``).
    """

    # The primary's replication id; a promoted replica gets a new one (see module docstring).
    _EPOCH = """
    local function epoch()
      local id = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
      return string.sub(id or '', 1, 12)
    end
    """
    # acquire_lease(lease key, fence counter key, lease ms, counter ttl s, suffix): the new
    # token "<counter>.<suffix>" ('' or nil: the epoch), or false when the lease is held. Also
    # for scripts of other modules that take the lease in the same step as their own writes
    # (the LangGraph API's run creation, :mod:`threadline.runs.records_redis_scripts`): one
    # definition of a token.
    ACQUIRE_FUNCTION = (
        _EPOCH
        + """
    local function acquire_lease(lease, counter, lease_ms, counter_ttl, suffix)
      if redis.call('EXISTS', lease) == 1 then return false end
      if not suffix or suffix == '' then suffix = epoch() end
      local token = redis.call('INCR', counter) .. '.' .. suffix
      redis.call('EXPIRE', counter, counter_ttl)
      redis.call('SET', lease, token, 'PX', lease_ms)
      return token
    end
    """
    )
    # KEYS[1] lease, KEYS[2] fence counter; ARGV[1] lease ms, ARGV[2] counter ttl s, ARGV[3]
    # the token's suffix ('': the epoch). Returns the new token "<counter>.<suffix>", or false
    # when the lease is held.
    ACQUIRE = ACQUIRE_FUNCTION + "return acquire_lease(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])"
    # KEYS[1] lease; ARGV[1] token, ARGV[2] lease ms, ARGV[3] the token's epoch.
    # Returns 1 (renewed: a write to WAIT for), 0 (not our lease), -1 (another primary).
    CONFIRM = (
        _EPOCH
        + """
    if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
    if epoch() ~= ARGV[3] then return -1 end
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
    """
    )
    # KEYS[1] lease; ARGV[1] token, ARGV[2] lease ms. Returns 1 if still ours and extended.
    RENEW = """
    if redis.call('GET', KEYS[1]) == ARGV[1] then
      return redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    return 0
    """
    # release_lease(lease key, token): deletes the lease if it is still the token's. Also for
    # scripts of other modules that release it in the same step as their own writes.
    RELEASE_FUNCTION = """
    local function release_lease(lease, token)
      if redis.call('GET', lease) == token then return redis.call('DEL', lease) end
      return 0
    end
    """
    # KEYS[1] lease; ARGV[1] token. Returns 1 if it was ours and is now deleted.
    RELEASE = RELEASE_FUNCTION + "return release_lease(KEYS[1], ARGV[1])"

    def __init__(
        self,
        client: redis_client.AsyncClient,
        *,
        lease_seconds: float,
        wait_seconds: float,
        counter_ttl_seconds: int,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
    ) -> None:
        self._client = client
        self._lease_ms = self.lease_ms = int(lease_seconds * 1000)
        self._wait = wait_seconds
        self._counter_ttl = counter_ttl_seconds
        self._wait_replicas = wait_replicas
        self._wait_timeout_ms = wait_timeout_ms
        self._acquire = client.register_script(self.ACQUIRE)
        self._renew = client.register_script(self.RENEW)
        self._release = client.register_script(self.RELEASE)

    async def ping(self) -> None:
        await self._client.ping()

    def token_suffix(self) -> str:
        """The suffix of the next token this lease takes (see the module docstring): 48 random
        bits; '' with ``wait_replicas``, for the acquire script to use the primary's epoch."""
        return "" if self._wait_replicas else f"{random.getrandbits(48):012x}"

    async def _try_acquire(self, thread_id: str) -> str | None:
        keys = [lease_key(thread_id), fence_counter_key(thread_id)]
        token = await self._acquire(keys=keys, args=[self._lease_ms, self._counter_ttl, self.token_suffix()])
        return token.decode() if isinstance(token, bytes) else token

    @contextlib.asynccontextmanager
    async def hold(
        self, thread_id: str, *, acquired: str | None = None, hand_off: bool = False
    ) -> AsyncIterator[HeldLease]:
        """Hold the thread's lease for the body; renewed in the background, released after.

        Args:
            acquired: the token of a lease already taken for this body by a store script
                (:attr:`ACQUIRE_FUNCTION`): held from there, nothing is taken.
            hand_off: when the body ends normally, stop renewing but do not release: the lease
                is ``handed_off`` to the caller, who releases it (:meth:`release`, or a store
                script in the same step as its own writes: one round trip less). A body that
                raises releases it as usual.

        Raises:
            LeaseBusy: not free within ``wait_seconds``.
        """
        started = time.monotonic()
        # Jittered, up to 100 ms: a lease is released within a few ms of a turn's end, and a
        # dead holder's lease expires after lease_seconds.
        waits = delays(0.01, 0.1, jitter=0.5)
        token = acquired
        while token is None and (token := await self._try_acquire(thread_id)) is None:
            if time.monotonic() - started >= self._wait:
                metrics.LEASE_CONFLICTS.inc()
                raise LeaseBusy(thread_id)
            await asyncio.sleep(next(waits))
        metrics.LEASE_WAIT_SECONDS.observe(time.monotonic() - started)
        held = HeldLease(thread_id, token)
        renewer = asyncio.create_task(self._keep_renewed(held), name=f"lease-renew-{thread_id}")
        handing_off = False
        try:
            yield held
            if self._wait_replicas:
                await self._confirm_replicated(held)
            handing_off = hand_off
        finally:
            renewer.cancel()
            if handing_off:
                # Still held; the renewer stops first, so no renewal lands after the new
                # owner's release.
                held.handed_off = True
                await asyncio.shield(asyncio.ensure_future(asyncio.wait([renewer])))
            else:
                # The body may be ending because it was cancelled (client gone): stop the
                # renewer and release anyway, in a task of its own that the cancellation
                # cannot reach, or the next turn waits for the lease to expire.
                await asyncio.shield(asyncio.ensure_future(self._stop_and_release(renewer, held)))

    async def release(self, held: HeldLease) -> None:
        """Release a lease handed off by :meth:`hold` (nothing if it was released already);
        a failure is logged, and the lease expires by itself."""
        if not held.released:
            await self._release_quietly(held)

    async def _stop_and_release(self, renewer: asyncio.Task[None], held: HeldLease) -> None:
        """Wait for the cancelled renewer to end (so no renewal lands after the release), then
        release the lease."""
        await asyncio.wait([renewer])
        await self._release_quietly(held)

    async def _confirm_replicated(self, held: HeldLease) -> None:
        """Return once ``wait_replicas`` replicas have every write made under ``held``.

        Raises:
            NotReplicated: the lease is no longer ours, the primary changed since it was taken,
                or too few replicas confirmed within ``wait_timeout_ms``.
        """
        assert held.token is not None
        key = lease_key(held.thread_id)
        script = ("EVAL", self.CONFIRM, 1, key, held.token, self._lease_ms, held.token.partition(".")[2])
        wait = ("WAIT", self._wait_replicas, self._wait_timeout_ms)
        # One connection: WAIT waits for the replication of that connection's last write, and
        # the script's PEXPIRE comes after every write of the turn on this same primary.
        status, acked = await redis_client.on_one_connection(self._client, key, script, wait)
        for reply in (status, acked):
            if isinstance(reply, Exception):
                raise reply
        problem = {0: "the lease was lost", -1: "the Redis primary changed during the turn"}.get(status)
        if problem is None and acked < self._wait_replicas:
            problem = f"{acked} of {self._wait_replicas} replicas confirmed within {self._wait_timeout_ms} ms"
        if problem is not None:
            metrics.NOT_REPLICATED.inc()
            log.warning(
                "turn not confirmed by replicas", extra={"thread_id": held.thread_id, "reason": problem}
            )
            raise NotReplicated(held.thread_id, problem)

    async def _release_quietly(self, held: HeldLease) -> None:
        try:
            await self._release(keys=[lease_key(held.thread_id)], args=[held.token])
            held.released = True
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

    # No store script can take or release it.
    lease_ms = 0

    def token_suffix(self) -> str:
        return ""

    def __init__(self, *, wait_seconds: float) -> None:
        self._wait = wait_seconds
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    async def ping(self) -> None:
        return None

    async def release(self, held: HeldLease) -> None:
        return None  # released when its hold ended: a local release costs nothing to defer

    @contextlib.asynccontextmanager
    async def hold(
        self, thread_id: str, *, acquired: str | None = None, hand_off: bool = False
    ) -> AsyncIterator[HeldLease]:
        """Hold the thread's lock for the body. ``acquired`` must be None (nothing takes this
        lease but this method); ``hand_off`` is ignored: the lock is released when the body
        ends, as releasing it later would save nothing."""
        assert acquired is None, "a process-local lease cannot be taken by a store"
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
            held = HeldLease(thread_id, None)
            try:
                yield held
            finally:
                lock.release()
                held.released = True
        finally:
            lock, users = self._locks[thread_id]
            if users == 1:
                del self._locks[thread_id]
            else:
                self._locks[thread_id] = (lock, users - 1)
