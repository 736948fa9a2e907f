"""The in-process quotas (backends without Redis): the same rules as the Redis ones."""

from __future__ import annotations

import pytest

from threadline.config import QuotaSettings
from threadline.quotas import LocalQuotas, QuotaExceeded

pytestmark = pytest.mark.unit


async def test_threads_per_principal():
    quotas = LocalQuotas(QuotaSettings(threads_per_principal=2))
    await quotas.reserve_thread("alice", "t1")
    await quotas.reserve_thread("alice", "t2")
    with pytest.raises(QuotaExceeded) as refused:
        await quotas.reserve_thread("alice", "t3")
    assert (refused.value.setting, refused.value.limit) == ("QUOTA_THREADS_PER_PRINCIPAL", 2)
    await quotas.reserve_thread("bob", "t4")
    await quotas.release_thread("alice", "t1")
    await quotas.reserve_thread("alice", "t3")


async def test_message_bytes_per_thread_count_nothing_when_refused():
    quotas = LocalQuotas(QuotaSettings(thread_bytes=100))
    await quotas.add_message_bytes("alice", "t1", 60)
    with pytest.raises(QuotaExceeded) as refused:
        await quotas.add_message_bytes("alice", "t1", 41)
    assert refused.value.setting == "QUOTA_THREAD_BYTES"
    await quotas.add_message_bytes("alice", "t1", 40)  # the refused 41 were not counted
    await quotas.release_thread("alice", "t1")
    await quotas.add_message_bytes("alice", "t1", 100)


async def test_zero_is_no_limit():
    quotas = LocalQuotas(QuotaSettings(threads_per_principal=0, thread_bytes=0))
    for n in range(50):
        await quotas.reserve_thread("alice", f"t{n}")
        await quotas.add_message_bytes("alice", "t0", 10**6)
