"""Every Redis client threadline opens, built here with one timeout and retry policy.

The policy: connect within 2 s, a command answers within 5 s, one retry after 50 ms (for a
pooled connection Redis dropped; every command threadline sends is safe to repeat), a health
check on connections idle for 15 s. So a stopped Redis is an error within about a second and a
paused one within ~10 s, never a hang; the callers turn those errors into 503 / not-ready.
"""

from __future__ import annotations

import redis
import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from threadline import urls
from threadline.checkpoint.errors import StoreUnavailable

CONNECT_TIMEOUT = 2.0
COMMAND_TIMEOUT = 5.0
HEALTH_CHECK_INTERVAL = 15
RETRIES = 1


def _options() -> dict[str, object]:
    return {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": COMMAND_TIMEOUT,
        "health_check_interval": HEALTH_CHECK_INTERVAL,
        "decode_responses": False,
    }


def _backoff() -> ExponentialBackoff:
    return ExponentialBackoff(cap=0.25, base=0.05)


def async_client(url: str) -> aioredis.Redis:
    """An asyncio client for ``url`` under the policy above; connects lazily."""
    return aioredis.Redis.from_url(url, retry=AsyncRetry(_backoff(), retries=RETRIES), **_options())


def sync_client(url: str) -> redis.Redis:
    """A blocking client for ``url`` (the saver's sync driver) under the same policy."""
    return redis.Redis.from_url(url, retry=Retry(_backoff(), retries=RETRIES), **_options())


async def ping(url: str, *, backend: str) -> None:
    """One ``PING`` on a short-lived connection (which also checks the password), so a down or
    misaddressed Redis fails at open, not mid-turn.

    Raises:
        StoreUnavailable: no connection, a refused password, or a timeout; the message holds
            the redacted URL and the error's class name, never the password.
    """
    client = aioredis.Redis.from_url(
        url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=COMMAND_TIMEOUT
    )
    try:
        await client.ping()
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        raise StoreUnavailable(backend, f"{urls.redact(url)}: {type(exc).__name__}") from exc
    finally:
        await client.aclose()
