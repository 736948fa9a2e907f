"""Where crons are kept, and the scheduler's claims on their ticks: in this process, or in the
checkpoint Redis where every replica sees them.

The records are JSON (:mod:`threadline.runs.crons` makes them); this module only keeps them,
with each cron's next tick beside its record (so a tick advances without rewriting the record)
and an index of the enabled ones by next tick (what the schedulers read):

* ``tl:{crons}:rec`` (HASH) cron id → record; ``tl:{crons}:next`` (HASH) cron id → next tick
  (epoch ms); ``tl:{crons}:due`` (ZSET) enabled cron ids by next tick;
* ``tl:{crons}:p:<P>`` (SET) principal ``P``'s cron ids (``QUOTA_CRONS_PER_PRINCIPAL``);
* ``tl:{crons}:claim:<C>`` (STRING, PEXPIREd) a scheduler's claim on cron ``C``'s due tick.

Every key shares the ``{crons}`` hash tag, so each change is one script, also on a Cluster
(crons are few: at most the quota per principal). A tick is fired by whoever :meth:`claim`\\s it
(``SET NX PX`` while the tick is still the cron's next); only the claimer may :meth:`advance`
the cron to its next tick, and only while the tick is still the next (a ``PATCH`` meanwhile
wins). A claimer that dies leaves its claim to expire: another replica claims the same tick.
"""

from __future__ import annotations

import time
from typing import Protocol

import redis.asyncio as aioredis

from threadline.redis_keys import cron_claim_key, cron_keys, principal_crons_key


class CronRecords(Protocol):
    async def get(self, cron_id: str) -> tuple[bytes, int | None] | None:
        """The record and its next tick (ms; None: none), or None."""

    async def of(self, owner: str) -> list[tuple[bytes, int | None]]:
        """Every cron of ``owner`` (at most the quota's count), as :meth:`get`."""

    async def create(
        self, owner: str, cron_id: str, record: bytes, next_ms: int, due: bool, quota: int
    ) -> int:
        """Store a new cron: 1 if stored, 0 if the id exists, -1 past ``quota`` (0: none).
        ``due``: index it for the schedulers (enabled, its next tick before its end)."""

    async def replace(
        self, cron_id: str, expected: bytes, record: bytes, next_ms: int | None, due: bool
    ) -> bool:
        """Make ``record`` current if ``expected`` still is, with next tick ``next_ms`` (None:
        unchanged), indexed for the schedulers if ``due``. False: changed or gone meanwhile."""

    async def delete(self, owner: str, cron_id: str) -> bool:
        """Delete ``owner``'s cron; False if there was none."""

    async def due(self, now_ms: int, limit: int) -> list[tuple[str, int]]:
        """At most ``limit`` ``(cron id, tick ms)`` of enabled crons whose next tick is due."""

    async def claim(self, cron_id: str, tick_ms: int, token: str, lease_ms: int) -> bool:
        """Claim ``tick_ms`` of the cron for ``lease_ms``: False if it is no longer the cron's
        next tick or another claim on it is alive."""

    async def release(self, cron_id: str, token: str) -> None:
        """Drop the claim ``token`` holds (a draining replica leaves the tick to others)."""

    async def advance(self, cron_id: str, tick_ms: int, token: str, next_ms: int, due: bool) -> bool:
        """As the claimer (``token``), move the cron from ``tick_ms`` to ``next_ms`` (indexed if
        ``due``) and drop the claim. False: the claim was lost (it expired and another took it)
        or the cron changed meanwhile (nothing moved)."""


class LocalCronRecords:
    """In this process, for the single-process backends (as :class:`LocalRecordStore`)."""

    def __init__(self) -> None:
        self._records: dict[str, bytes] = {}
        self._owners: dict[str, set[str]] = {}
        self._next: dict[str, int] = {}
        self._due: dict[str, int] = {}
        self._claims: dict[str, tuple[str, float]] = {}  # cron id → (token, expiry, monotonic)

    async def get(self, cron_id: str) -> tuple[bytes, int | None] | None:
        record = self._records.get(cron_id)
        return None if record is None else (record, self._next.get(cron_id))

    async def of(self, owner: str) -> list[tuple[bytes, int | None]]:
        return [(self._records[c], self._next.get(c)) for c in self._owners.get(owner, ())]

    async def create(
        self, owner: str, cron_id: str, record: bytes, next_ms: int, due: bool, quota: int
    ) -> int:
        if cron_id in self._records:
            return 0
        mine = self._owners.setdefault(owner, set())
        if quota and len(mine) >= quota:
            return -1
        mine.add(cron_id)
        self._records[cron_id], self._next[cron_id] = record, next_ms
        if due:
            self._due[cron_id] = next_ms
        return 1

    async def replace(
        self, cron_id: str, expected: bytes, record: bytes, next_ms: int | None, due: bool
    ) -> bool:
        if self._records.get(cron_id) != expected:
            return False
        self._records[cron_id] = record
        if next_ms is not None:
            self._next[cron_id] = next_ms
        if due:
            self._due[cron_id] = self._next[cron_id]
        else:
            self._due.pop(cron_id, None)
        return True

    async def delete(self, owner: str, cron_id: str) -> bool:
        if cron_id not in self._owners.get(owner, ()):
            return False
        self._owners[owner].discard(cron_id)
        for held in (self._records, self._next, self._due, self._claims):
            held.pop(cron_id, None)
        return True

    async def due(self, now_ms: int, limit: int) -> list[tuple[str, int]]:
        found = sorted((tick, c) for c, tick in self._due.items() if tick <= now_ms)
        return [(c, tick) for tick, c in found[:limit]]

    async def claim(self, cron_id: str, tick_ms: int, token: str, lease_ms: int) -> bool:
        held = self._claims.get(cron_id)
        if self._due.get(cron_id) != tick_ms or (held is not None and held[1] > time.monotonic()):
            return False
        self._claims[cron_id] = (token, time.monotonic() + lease_ms / 1000)
        return True

    async def release(self, cron_id: str, token: str) -> None:
        if self._claims.get(cron_id, ("",))[0] == token:
            del self._claims[cron_id]

    async def advance(self, cron_id: str, tick_ms: int, token: str, next_ms: int, due: bool) -> bool:
        if self._claims.get(cron_id, ("",))[0] != token:
            return False
        del self._claims[cron_id]
        if self._next.get(cron_id) != tick_ms:
            return False
        self._next[cron_id] = next_ms
        if due and cron_id in self._due:
            self._due[cron_id] = next_ms
        else:
            self._due.pop(cron_id, None)
        return True


# KEYS[1] records, KEYS[2] next, KEYS[3] due, KEYS[4] the owner's set; ARGV[1] id, ARGV[2]
# record, ARGV[3] next ms, ARGV[4] '1' to index it as due, ARGV[5] quota (0: none).
# Reply as LocalCronRecords.create.
_CREATE = """
    if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
    local quota = tonumber(ARGV[5])
    if quota > 0 and redis.call('SCARD', KEYS[4]) >= quota then return -1 end
    redis.call('SADD', KEYS[4], ARGV[1])
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
    if ARGV[4] == '1' then redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1]) end
    return 1
    """
# KEYS[1..3] as _CREATE; ARGV[1] id, ARGV[2] expected record, ARGV[3] record, ARGV[4] next ms
# ('' : unchanged), ARGV[5] '1' to index it as due. Returns 1 if replaced.
_REPLACE = """
    if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
    if ARGV[4] ~= '' then redis.call('HSET', KEYS[2], ARGV[1], ARGV[4]) end
    if ARGV[5] == '1' then
      redis.call('ZADD', KEYS[3], redis.call('HGET', KEYS[2], ARGV[1]), ARGV[1])
    else
      redis.call('ZREM', KEYS[3], ARGV[1])
    end
    return 1
    """
# KEYS[1..4] as _CREATE, KEYS[5] the cron's claim; ARGV[1] id. Returns 1 if there was one.
_DELETE = """
    if redis.call('SREM', KEYS[4], ARGV[1]) == 0 then return 0 end
    redis.call('HDEL', KEYS[1], ARGV[1])
    redis.call('HDEL', KEYS[2], ARGV[1])
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('DEL', KEYS[5])
    return 1
    """
# KEYS[1] due, KEYS[2] the cron's claim; ARGV[1] id, ARGV[2] tick ms, ARGV[3] token,
# ARGV[4] lease ms. Returns 1 if claimed.
_CLAIM = """
    local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
    if not due or tonumber(due) ~= tonumber(ARGV[2]) then return 0 end
    if redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[4]) then return 1 end
    return 0
    """
# KEYS[1] next, KEYS[2] due, KEYS[3] the cron's claim; ARGV[1] id, ARGV[2] tick ms, ARGV[3]
# token, ARGV[4] next ms, ARGV[5] '1' to keep it indexed as due. Returns 1 if advanced.
_ADVANCE = """
    if redis.call('GET', KEYS[3]) ~= ARGV[3] then return 0 end
    redis.call('DEL', KEYS[3])
    local current = redis.call('HGET', KEYS[1], ARGV[1])
    if not current or tonumber(current) ~= tonumber(ARGV[2]) then return 0 end
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
    if ARGV[5] == '1' and redis.call('ZSCORE', KEYS[2], ARGV[1]) then
      redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
    else
      redis.call('ZREM', KEYS[2], ARGV[1])
    end
    return 1
    """


# KEYS[1] the cron's claim; ARGV[1] token.
_RELEASE = """
    if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
    return 0
    """


class RedisCronRecords:
    """On the checkpoint Redis, so every replica sees every cron and claim at once."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._keys = cron_keys()
        self._create = client.register_script(_CREATE)
        self._replace = client.register_script(_REPLACE)
        self._delete = client.register_script(_DELETE)
        self._claim = client.register_script(_CLAIM)
        self._advance = client.register_script(_ADVANCE)
        self._release = client.register_script(_RELEASE)

    async def get(self, cron_id: str) -> tuple[bytes, int | None] | None:
        record = await self._client.hget(self._keys.records, cron_id)
        if record is None:
            return None
        next_ms = await self._client.hget(self._keys.next, cron_id)
        return record, None if next_ms is None else int(next_ms)

    async def of(self, owner: str) -> list[tuple[bytes, int | None]]:
        ids = sorted(m.decode() for m in await self._client.smembers(principal_crons_key(owner)))
        if not ids:
            return []
        records = await self._client.hmget(self._keys.records, ids)
        ticks = await self._client.hmget(self._keys.next, ids)
        return [
            (r, None if t is None else int(t)) for r, t in zip(records, ticks, strict=True) if r is not None
        ]

    async def create(
        self, owner: str, cron_id: str, record: bytes, next_ms: int, due: bool, quota: int
    ) -> int:
        keys = [*self._keys, principal_crons_key(owner)]
        return int(await self._create(keys=keys, args=[cron_id, record, next_ms, int(due), quota]))

    async def replace(
        self, cron_id: str, expected: bytes, record: bytes, next_ms: int | None, due: bool
    ) -> bool:
        args = [cron_id, expected, record, "" if next_ms is None else next_ms, int(due)]
        return bool(await self._replace(keys=list(self._keys), args=args))

    async def delete(self, owner: str, cron_id: str) -> bool:
        keys = [*self._keys, principal_crons_key(owner), cron_claim_key(cron_id)]
        return bool(await self._delete(keys=keys, args=[cron_id]))

    async def due(self, now_ms: int, limit: int) -> list[tuple[str, int]]:
        found = await self._client.zrangebyscore(
            self._keys.due, "-inf", now_ms, start=0, num=limit, withscores=True
        )
        return [(member.decode(), int(score)) for member, score in found]

    async def claim(self, cron_id: str, tick_ms: int, token: str, lease_ms: int) -> bool:
        keys = [self._keys.due, cron_claim_key(cron_id)]
        return bool(await self._claim(keys=keys, args=[cron_id, tick_ms, token, lease_ms]))

    async def release(self, cron_id: str, token: str) -> None:
        await self._release(keys=[cron_claim_key(cron_id)], args=[token])

    async def advance(self, cron_id: str, tick_ms: int, token: str, next_ms: int, due: bool) -> bool:
        keys = [self._keys.next, self._keys.due, cron_claim_key(cron_id)]
        return bool(await self._advance(keys=keys, args=[cron_id, tick_ms, token, next_ms, int(due)]))
