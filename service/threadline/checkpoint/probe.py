"""Reachability checks run at open, so a down or misaddressed store fails there, not mid-turn."""

from __future__ import annotations

import redis.asyncio
import redis.exceptions

from threadline import urls
from threadline.checkpoint.errors import StoreUnavailable

# Seconds to wait for a TCP connection (and the reply) before reporting StoreUnavailable.
REDIS_TIMEOUT = 5.0


async def ping_redis(url: str, *, backend: str) -> None:
    """One ``PING`` on a short-lived connection (which also checks the password).

    Raises:
        StoreUnavailable: no connection, a refused password, or a timeout; the message holds
            the redacted URL and the error's class name, never the password.
    """
    client = redis.asyncio.Redis.from_url(
        url, socket_connect_timeout=REDIS_TIMEOUT, socket_timeout=REDIS_TIMEOUT
    )
    try:
        await client.ping()
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        raise StoreUnavailable(backend, f"{urls.redact(url)}: {type(exc).__name__}") from exc
    finally:
        await client.aclose()
