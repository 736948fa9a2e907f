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

import redis.exceptions
from langgraph.checkpoint.redis.aio import AsyncRedisSaver

from threadline import urls
from threadline.checkpoint.errors import StoreUnavailable
from threadline.config import CheckpointSettings

# Seconds to wait for a TCP connection before reporting StoreUnavailable.
CONNECT_TIMEOUT = 5.0


def ttl_config(ttl_seconds: int) -> dict[str, object]:
    """The library's ``ttl`` argument for ``CHECKPOINT_REDIS_TTL`` seconds."""
    return {"default_ttl": math.ceil(ttl_seconds / 60), "refresh_on_read": False}


@asynccontextmanager
async def open_saver(settings: CheckpointSettings) -> AsyncIterator[AsyncRedisSaver]:
    """Connect, create the RediSearch indexes (``asetup``), yield the saver.

    Raises:
        StoreUnavailable: Redis cannot be reached, refuses the credentials, or lacks the
            RedisJSON / RediSearch modules.
    """
    target = urls.redact(settings.redis_url)
    saver = AsyncRedisSaver(
        redis_url=settings.redis_url,
        connection_args={"socket_connect_timeout": CONNECT_TIMEOUT},
        ttl=ttl_config(settings.redis_ttl),
    )
    try:
        # What `async with AsyncRedisSaver(...)` does on enter; done by hand so a failure here
        # becomes StoreUnavailable and still closes the client.
        await saver.asetup()
        await saver.aset_client_info()
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        await _close(saver)
        raise StoreUnavailable("redis-stack", f"{target}: {type(exc).__name__}") from exc
    except redis.exceptions.ResponseError as exc:
        await _close(saver)
        raise StoreUnavailable(
            "redis-stack",
            f"{target} lacks RedisJSON/RediSearch ({type(exc).__name__}); use Redis 8 or "
            "Redis Stack, or CHECKPOINT_BACKEND=redis",
        ) from exc
    try:
        yield saver
    finally:
        await _close(saver)


async def _close(saver: AsyncRedisSaver) -> None:
    await saver.__aexit__(None, None, None)
