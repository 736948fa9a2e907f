"""Exponential back-off with jitter: the one way threadline waits before trying again."""

from __future__ import annotations

import random
from collections.abc import Iterator


def delays(first: float, cap: float, jitter: float = 0.0) -> Iterator[float]:
    """Waits doubling from ``first`` up to ``cap``, each spread by ``±jitter`` (a fraction) so
    that replicas retrying the same thing do not retry in step. Endless: the caller decides
    when to give up."""
    delay = first
    while True:
        yield delay * random.uniform(1 - jitter, 1 + jitter) if jitter else delay
        delay = min(delay * 2, cap)
