"""Every Redis client threadline opens, built here with one timeout and retry policy.

The policy: connect within 2 s, a command answers within 5 s, one retry after 50 ms (for a
pooled connection Redis dropped; every command threadline sends is safe to repeat), a health
check on connections idle for 15 s. So a stopped Redis is an error within about a second and a
paused one within ~10 s, never a hang; the callers turn those errors into 503 / not-ready.

Every client has a pool of at most ``MAX_CONNECTIONS`` that *waits* up to ``POOL_TIMEOUT`` for
a free connection instead of failing: redis-py's default async pool raised
``MaxConnectionsError`` at 100, so a burst of 300 bogus session lookups made a valid user's
requests fail 3 times out of 5 (issue 10). A wait that runs out is a ``ConnectionError``
(503 with Retry-After).
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
# Connections per client (per process). A session lookup holds one for ~0.1 ms on loopback, so
# 64 serve tens of thousands of lookups a second; a burst past that queues for a moment.
MAX_CONNECTIONS = 64
POOL_TIMEOUT = COMMAND_TIMEOUT


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
    """An asyncio client for ``url`` under the policy above; connects lazily. Closing it
    closes its pool."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=MAX_CONNECTIONS,
        timeout=POOL_TIMEOUT,
        retry=AsyncRetry(_backoff(), retries=RETRIES),
        **_options(),
    )
    return aioredis.Redis.from_pool(pool)


def sync_client(url: str) -> redis.Redis:
    """A blocking client for ``url`` (the saver's sync driver) under the same policy."""
    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=MAX_CONNECTIONS,
        timeout=POOL_TIMEOUT,
        retry=Retry(_backoff(), retries=RETRIES),
        **_options(),
    )
    return redis.Redis.from_pool(pool)


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
