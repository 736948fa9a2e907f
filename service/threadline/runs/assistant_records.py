"""Where the assistants clients create are kept: one current record and its versions per
assistant, per principal, in this process or in the checkpoint Redis.

The records are JSON (the API's shapes, :mod:`threadline.runs.assistants` makes them); this
module only keeps them, atomically per principal:

* ``tl:p:{P}:assistants`` (HASH): assistant id → the current record, one field per assistant
  of principal ``P`` (its ``HLEN`` is ``QUOTA_ASSISTANTS_PER_PRINCIPAL``'s count);
* ``tl:p:{P}:assistant:<A>`` (HASH): version number → that version's record, and ``n`` → the
  highest number given; only the last ``QUOTA_ASSISTANT_VERSIONS`` numbers are kept.

Both keys share the principal's hash tag, so each change is one script, also on a Cluster.
A change is a compare-and-set on the current record (:meth:`replace`): the caller read it,
built the next one, and retries when another replica changed it meanwhile. Assistants have
no TTL: they are configuration, bounded by the quotas, not by time.
"""

from __future__ import annotations

from typing import Protocol

import redis.asyncio as aioredis

from threadline.redis_keys import principal_assistant_versions_key, principal_assistants_key

# Version-hash field holding the highest version number given.
LAST = "n"


class AssistantRecords(Protocol):
    async def current(self, owner: str, assistant_id: str) -> bytes | None:
        """The current record, or None."""

    async def all(self, owner: str) -> list[bytes]:
        """Every current record of ``owner`` (at most the quota's count)."""

    async def version(self, owner: str, assistant_id: str, number: int) -> bytes | None:
        """One kept version, or None."""

    async def versions(self, owner: str, assistant_id: str) -> tuple[int, dict[int, bytes]]:
        """The highest version number given (0: no such assistant) and the kept versions."""

    async def create(self, owner: str, assistant_id: str, record: bytes, version: bytes, quota: int) -> int:
        """Store a new assistant at version 1: 1 if stored, 0 if it exists, -1 past ``quota``
        (0: none)."""

    async def replace(
        self,
        owner: str,
        assistant_id: str,
        expected: bytes,
        record: bytes,
        version: tuple[int, bytes, int] | None = None,
    ) -> bool:
        """Make ``record`` current if ``expected`` still is; ``version`` ``(number, record,
        kept)`` also stores a new version, dropping the one ``kept`` numbers older. False:
        the record changed or went meanwhile (nothing stored)."""

    async def delete(self, owner: str, assistant_id: str) -> bool:
        """Delete the assistant and its versions; False if there was none."""


class LocalAssistantRecords:
    """In this process, for the single-process backends (as :class:`LocalRecordStore`)."""

    def __init__(self) -> None:
        self._current: dict[str, dict[str, bytes]] = {}
        self._versions: dict[tuple[str, str], dict[int, bytes]] = {}

    async def current(self, owner: str, assistant_id: str) -> bytes | None:
        return self._current.get(owner, {}).get(assistant_id)

    async def all(self, owner: str) -> list[bytes]:
        return list(self._current.get(owner, {}).values())

    async def version(self, owner: str, assistant_id: str, number: int) -> bytes | None:
        return self._versions.get((owner, assistant_id), {}).get(number)

    async def versions(self, owner: str, assistant_id: str) -> tuple[int, dict[int, bytes]]:
        kept = self._versions.get((owner, assistant_id), {})
        return (max(kept) if kept else 0), dict(kept)

    async def create(self, owner: str, assistant_id: str, record: bytes, version: bytes, quota: int) -> int:
        mine = self._current.setdefault(owner, {})
        if assistant_id in mine:
            return 0
        if quota and len(mine) >= quota:
            return -1
        mine[assistant_id] = record
        self._versions[(owner, assistant_id)] = {1: version}
        return 1

    async def replace(
        self,
        owner: str,
        assistant_id: str,
        expected: bytes,
        record: bytes,
        version: tuple[int, bytes, int] | None = None,
    ) -> bool:
        mine = self._current.get(owner, {})
        if mine.get(assistant_id) != expected:
            return False
        mine[assistant_id] = record
        if version is not None:
            number, body, kept = version
            versions = self._versions.setdefault((owner, assistant_id), {})
            versions[number] = body
            versions.pop(number - kept, None)
        return True

    async def delete(self, owner: str, assistant_id: str) -> bool:
        self._versions.pop((owner, assistant_id), None)
        return self._current.get(owner, {}).pop(assistant_id, None) is not None


# KEYS[1] current records, KEYS[2] versions; ARGV[1] id, ARGV[2] record, ARGV[3] version 1,
# ARGV[4] quota (0: none). Reply as LocalAssistantRecords.create.
_CREATE = f"""
    if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
    local quota = tonumber(ARGV[4])
    if quota > 0 and redis.call('HLEN', KEYS[1]) >= quota then return -1 end
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
    redis.call('DEL', KEYS[2])
    redis.call('HSET', KEYS[2], '1', ARGV[3], '{LAST}', 1)
    return 1
    """
# KEYS as _CREATE; ARGV[1] id, ARGV[2] expected record, ARGV[3] record, then optionally
# ARGV[4] version number, ARGV[5] its record, ARGV[6] versions kept. Returns 1 if replaced.
_REPLACE = f"""
    if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
    if ARGV[4] then
        redis.call('HSET', KEYS[2], ARGV[4], ARGV[5], '{LAST}', ARGV[4])
        redis.call('HDEL', KEYS[2], tostring(tonumber(ARGV[4]) - tonumber(ARGV[6])))
    end
    return 1
    """
# KEYS as _CREATE; ARGV[1] id. Returns 1 if there was one.
_DELETE = """
    redis.call('DEL', KEYS[2])
    return redis.call('HDEL', KEYS[1], ARGV[1])
    """


class RedisAssistantRecords:
    """On the checkpoint Redis, so every replica sees every assistant at once."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._create = client.register_script(_CREATE)
        self._replace = client.register_script(_REPLACE)
        self._delete = client.register_script(_DELETE)

    @staticmethod
    def _keys(owner: str, assistant_id: str) -> list[str]:
        return [principal_assistants_key(owner), principal_assistant_versions_key(owner, assistant_id)]

    async def current(self, owner: str, assistant_id: str) -> bytes | None:
        return await self._client.hget(principal_assistants_key(owner), assistant_id)

    async def all(self, owner: str) -> list[bytes]:
        return await self._client.hvals(principal_assistants_key(owner))

    async def version(self, owner: str, assistant_id: str, number: int) -> bytes | None:
        return await self._client.hget(principal_assistant_versions_key(owner, assistant_id), str(number))

    async def versions(self, owner: str, assistant_id: str) -> tuple[int, dict[int, bytes]]:
        fields = await self._client.hgetall(principal_assistant_versions_key(owner, assistant_id))
        last = int(fields.pop(LAST.encode(), 0))
        return last, {int(number): body for number, body in fields.items()}

    async def create(self, owner: str, assistant_id: str, record: bytes, version: bytes, quota: int) -> int:
        keys = self._keys(owner, assistant_id)
        return int(await self._create(keys=keys, args=[assistant_id, record, version, quota]))

    async def replace(
        self,
        owner: str,
        assistant_id: str,
        expected: bytes,
        record: bytes,
        version: tuple[int, bytes, int] | None = None,
    ) -> bool:
        args: list[bytes | str | int] = [assistant_id, expected, record, *(version or ())]
        return bool(await self._replace(keys=self._keys(owner, assistant_id), args=args))

    async def delete(self, owner: str, assistant_id: str) -> bool:
        return bool(await self._delete(keys=self._keys(owner, assistant_id), args=[assistant_id]))
