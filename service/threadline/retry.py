"""Exponential back-off with jitter: the one way threadline waits before trying again; and
waiting out a failing store (Redis restarting), which runs do rather than fail."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# First wait before a run whose store failed runs again (doubling up to 1 s): a Redis restart
# with AOF takes ~0.3 s here.
STORE_RETRY_SECONDS = 0.1
# ... at most this many times in a row (about a minute), then the run ends as an error.
STORE_RETRIES = 60


def delays(first: float, cap: float, jitter: float = 0.0) -> Iterator[float]:
    """Waits doubling from ``first`` up to ``cap``, each spread by ``±jitter`` (a fraction) so
    that replicas retrying the same thing do not retry in step. Endless: the caller decides
    when to give up."""
    delay = first
    while True:
        yield delay * random.uniform(1 - jitter, 1 + jitter) if jitter else delay
        delay = min(delay * 2, cap)


def store_failures() -> tuple[type[Exception], ...]:
    from threadline.checkpoint import store_errors  # the backends loaded by now

    """A store failing right now (:func:`threadline.checkpoint.store_errors`, of the backends
    loaded by now); not the builtin ConnectionError / TimeoutError that a graph's own code
    raises (a model provider timing out), which end the run as an error."""
    return tuple(e for e in store_errors() if e not in (ConnectionError, TimeoutError))


async def through_store_failures(run_id: str, doing: str, attempt: Callable[[int], Awaitable[_T]]) -> _T:
    """``attempt(retry)`` until it returns, waiting out a failing store (Redis restarting)
    with back-off from STORE_RETRY_SECONDS up to 1 s, at most STORE_RETRIES times."""
    waits = delays(STORE_RETRY_SECONDS, 1.0)
    for retry in range(STORE_RETRIES):
        try:
            return await attempt(retry)
        except store_failures() as exc:
            log.warning(f"store failed {doing}", extra={"run_id": run_id, "error": type(exc).__name__})
            await asyncio.sleep(next(waits))
    return await attempt(STORE_RETRIES)
