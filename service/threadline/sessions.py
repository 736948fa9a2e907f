"""Auth sessions: a bearer token → principal, expiring after ``SESSION_TTL_SECONDS`` idle.

The store keeps only the SHA-256 of each token, so a dump of the store cannot be replayed.
``memory`` is process-local (one replica); ``redis`` (db 0, ``REDIS_URL``) is shared by every
replica. Expiry slides: every successful lookup extends the session.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Protocol

import redis.asyncio as aioredis

from threadline.redis_keys import session_key


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


class SessionStore(Protocol):
    async def create(self, principal: str) -> str: ...

    async def principal(self, token: str) -> str | None: ...

    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...


class MemorySessionStore:
    def __init__(self, ttl_seconds: int) -> None:
        self.ttl = ttl_seconds
        self._sessions: dict[str, tuple[str, float]] = {}

    async def create(self, principal: str) -> str:
        token = new_token()
        self._sessions[_digest(token)] = (principal, time.monotonic() + self.ttl)
        return token

    async def principal(self, token: str) -> str | None:
        key = _digest(token)
        found = self._sessions.get(key)
        if found is None:
            return None
        if found[1] <= time.monotonic():
            del self._sessions[key]
            return None
        self._sessions[key] = (found[0], time.monotonic() + self.ttl)
        return found[0]

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        self._sessions.clear()


class RedisSessionStore:
    """Sessions as ``tl:session:<sha256(token)>`` strings with a TTL, refreshed by GETEX."""

    def __init__(self, client: aioredis.Redis, ttl_seconds: int) -> None:
        self.ttl = ttl_seconds
        self._client = client

    async def create(self, principal: str) -> str:
        token = new_token()
        await self._client.set(session_key(_digest(token)), principal, ex=self.ttl)
        return token

    async def principal(self, token: str) -> str | None:
        found = await self._client.getex(session_key(_digest(token)), ex=self.ttl)
        return found.decode() if found is not None else None

    async def ping(self) -> None:
        await self._client.ping()

    async def aclose(self) -> None:
        await self._client.aclose()
