"""Auth sessions: a bearer token → the principal and the API key that minted it.

A session expires after ``SESSION_TTL_SECONDS`` without use (every successful lookup slides
it) and in any case ``SESSION_MAX_LIFETIME_SECONDS`` after it was minted, and ends at once on
logout (:meth:`SessionStore.revoke`). It remembers the SHA-256 of the API key that minted it,
so the caller can refuse it once that key is no longer configured (ADR 0006).

The store keeps only the SHA-256 of each token, so a dump of the store cannot be replayed. A
presented token that cannot be one of ours (not 43 characters of the URL-safe alphabet) is
refused without touching the store, so a flood of garbage tokens costs no Redis round trip.
``memory`` is process-local (one replica); ``redis`` (db 0, ``REDIS_URL``) is shared by every
replica. Times are wall-clock seconds from an injectable ``clock``, so tests need not sleep.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Callable
from typing import NamedTuple, Protocol

import redis.asyncio as aioredis

from threadline.redis_keys import session_key

# What new_token() makes: 32 random bytes, URL-safe base64 without padding.
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")

Clock = Callable[[], float]


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def plausible_token(token: str) -> bool:
    """Whether ``token`` has the shape of a token :func:`new_token` makes."""
    return TOKEN_SHAPE.fullmatch(token) is not None


class Session(NamedTuple):
    principal: str
    key_digest: str  # SHA-256 hex of the API key that minted the session


class SessionStore(Protocol):
    async def create(self, principal: str, key_digest: str) -> str: ...

    async def lookup(self, token: str) -> Session | None: ...

    async def revoke(self, token: str) -> bool: ...

    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...


class MemorySessionStore:
    """Sessions in a dict; expired ones are swept at most once per ``SWEEP_SECONDS`` on
    :meth:`create`, so tokens nobody presents again do not pile up."""

    SWEEP_SECONDS = 60.0

    def __init__(self, ttl_seconds: int, max_lifetime_seconds: int, clock: Clock = time.time) -> None:
        self.ttl = ttl_seconds
        self.max_lifetime = max_lifetime_seconds
        self._clock = clock
        # digest → (session, idle deadline, absolute deadline)
        self._sessions: dict[str, tuple[Session, float, float]] = {}
        self._next_sweep = clock() + self.SWEEP_SECONDS

    def __len__(self) -> int:
        return len(self._sessions)

    async def create(self, principal: str, key_digest: str) -> str:
        now = self._clock()
        if now >= self._next_sweep:
            self._sessions = {d: s for d, s in self._sessions.items() if min(s[1], s[2]) > now}
            self._next_sweep = now + self.SWEEP_SECONDS
        token = new_token()
        self._sessions[_digest(token)] = (
            Session(principal, key_digest),
            now + self.ttl,
            now + self.max_lifetime,
        )
        return token

    async def lookup(self, token: str) -> Session | None:
        if not plausible_token(token):
            return None
        key = _digest(token)
        found = self._sessions.get(key)
        if found is None:
            return None
        now = self._clock()
        session, idle_until, until = found
        if min(idle_until, until) <= now:
            del self._sessions[key]
            return None
        self._sessions[key] = (session, now + self.ttl, until)
        return session

    async def revoke(self, token: str) -> bool:
        return plausible_token(token) and self._sessions.pop(_digest(token), None) is not None

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        self._sessions.clear()


class RedisSessionStore:
    """Sessions as ``tl:session:<sha256(token)>`` hashes (principal, key digest, absolute
    deadline) whose TTL is the idle time left, capped by the absolute deadline."""

    # KEYS[1] session; ARGV[1] idle ttl s, ARGV[2] now (s). Returns {principal, key digest}
    # and slides the TTL (never past the absolute deadline), or false when absent or past it.
    LOOKUP = """
    if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then return false end  -- absent, or pre-0006
    local v = redis.call('HMGET', KEYS[1], 'principal', 'key', 'until')
    if not v[1] then return false end
    local left = tonumber(v[3]) - tonumber(ARGV[2])
    if left <= 0 then redis.call('DEL', KEYS[1]) return false end
    redis.call('EXPIRE', KEYS[1], math.max(1, math.ceil(math.min(tonumber(ARGV[1]), left))))
    return {v[1], v[2]}
    """

    def __init__(
        self, client: aioredis.Redis, ttl_seconds: int, max_lifetime_seconds: int, clock: Clock = time.time
    ) -> None:
        self.ttl = ttl_seconds
        self.max_lifetime = max_lifetime_seconds
        self._client = client
        self._clock = clock
        self._lookup = client.register_script(self.LOOKUP)

    async def create(self, principal: str, key_digest: str) -> str:
        token = new_token()
        fields = {"principal": principal, "key": key_digest, "until": self._clock() + self.max_lifetime}
        key = session_key(_digest(token))
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=fields)
            pipe.expire(key, min(self.ttl, self.max_lifetime))
            await pipe.execute()
        return token

    async def lookup(self, token: str) -> Session | None:
        if not plausible_token(token):
            return None
        found = await self._lookup(keys=[session_key(_digest(token))], args=[self.ttl, self._clock()])
        return Session(found[0].decode(), found[1].decode()) if found else None

    async def revoke(self, token: str) -> bool:
        return plausible_token(token) and bool(await self._client.delete(session_key(_digest(token))))

    async def ping(self) -> None:
        await self._client.ping()

    async def aclose(self) -> None:
        await self._client.aclose()
