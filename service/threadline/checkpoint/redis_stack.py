"""The ``redis-stack`` backend: ``langgraph-checkpoint-redis``'s ``AsyncRedisSaver``.

For users on Redis 8 / Redis Stack. It needs RedisJSON and RediSearch, and RediSearch creates
indexes only in db 0: the db-0 rule lives in :class:`threadline.config.CheckpointSettings`
(one place), so a ``CHECKPOINT_REDIS_URL`` naming another db never gets here.

TTL: the library counts minutes. ``CHECKPOINT_REDIS_TTL`` (seconds after the last write) is
rounded *up* to whole minutes, so data never expires earlier than configured. Refresh-on-read
stays off: the contract is "after its last write", and refreshing would add a ``TTL`` round
trip plus ``EXPIRE`` calls to every read.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio
import redis.exceptions
from langgraph.checkpoint.redis.aio import AsyncRedisSaver
from redisvl.exceptions import RedisVLError

from threadline import redis_client, urls
from threadline.config import CheckpointSettings
from threadline.errors import StoreUnavailable


def ttl_config(ttl_seconds: int) -> dict[str, object]:
    """The library's ``ttl`` argument for ``CHECKPOINT_REDIS_TTL`` seconds."""
    return {"default_ttl": math.ceil(ttl_seconds / 60), "refresh_on_read": False}


@asynccontextmanager
async def open_saver(settings: CheckpointSettings) -> AsyncIterator[AsyncRedisSaver]:
    """Connect, create the RediSearch indexes (``asetup``), yield the saver.

    Raises:
        StoreUnavailable: Redis cannot be reached, refuses the credentials, or its index setup
            fails (no RedisJSON / RediSearch).
    """
    await redis_client.ping(settings.redis_url, backend="redis-stack")
    # Our own client (closed by us): the library's URL path builds one through a redisvl
    # factory that warns on every call, and this way the timeouts are ours too.
    client = redis_client.async_client(settings.redis_url)
    saver = AsyncRedisSaver(redis_client=client, ttl=ttl_config(settings.redis_ttl))
    try:
        # What `async with AsyncRedisSaver(...)` does on enter; done by hand so a failure here
        # becomes StoreUnavailable and still closes the client.
        await saver.asetup()
        await saver.aset_client_info()
    except (RedisVLError, redis.exceptions.RedisError) as exc:
        await _close(saver, client)
        # Reachable a moment ago (the ping), so this is almost always plain Redis without the
        # modules ("unknown command 'FT.INFO'"); the class name says if it was not.
        raise StoreUnavailable(
            "redis-stack",
            f"{urls.redact(settings.redis_url)}: index setup failed ({type(exc).__name__}); "
            "the server needs RedisJSON and RediSearch (Redis 8 or Redis Stack), otherwise "
            "use CHECKPOINT_BACKEND=redis",
        ) from exc
    try:
        yield saver
    finally:
        await _close(saver, client)


async def _close(saver: AsyncRedisSaver, client: redis.asyncio.Redis) -> None:
    try:
        await saver.__aexit__(None, None, None)  # releases the indexes' hold on the client
    finally:
        await client.aclose()
