"""threadline.retry: doubling waits up to a cap, jittered within the fraction asked for."""

from __future__ import annotations

import itertools

import pytest

from threadline.retry import delays

pytestmark = pytest.mark.unit


def test_waits_double_up_to_the_cap_and_stay_there() -> None:
    assert list(itertools.islice(delays(0.1, 1.0), 7)) == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


def test_jitter_spreads_each_wait_within_its_fraction() -> None:
    waits = list(itertools.islice(delays(0.01, 0.1, jitter=0.5), 2000))
    plain = list(itertools.islice(delays(0.01, 0.1), 2000))
    assert all(0.5 * p <= w <= 1.5 * p for w, p in zip(waits, plain, strict=True))
    assert len({round(w, 9) for w in waits[10:]}) > 100  # spread, not one value
