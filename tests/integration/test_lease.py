"""The turn lease on a real Redis: exclusive, renewed, expiring, fenced, released on cancel."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from threadline.lease import LeaseBusy, LocalTurnLease, RedisTurnLease
from threadline.redis_keys import lease_key

pytestmark = pytest.mark.integration


@pytest.fixture
async def client(redis_server):
    client = aioredis.Redis.from_url(redis_server.url(1))
    yield client
    await client.aclose()


def make_lease(client, lease_seconds=1.0, wait_seconds=0.2) -> RedisTurnLease:
    return RedisTurnLease(
        client, lease_seconds=lease_seconds, wait_seconds=wait_seconds, counter_ttl_seconds=60
    )


async def test_one_holder_at_a_time_and_tokens_increase(client):
    a, b = make_lease(client), make_lease(client)
    async with a.hold("t-excl") as first:
        with pytest.raises(LeaseBusy):
            async with b.hold("t-excl"):
                pass
    async with b.hold("t-excl") as second:
        # "<counter>.<suffix>": the counter goes up, the suffix is drawn for each lease
        assert int(second.token.split(".")[0]) > int(first.token.split(".")[0])
        assert len(second.token.split(".")[1]) == 12
        assert second.token.split(".")[1] != first.token.split(".")[1]
    assert await client.exists(lease_key("t-excl")) == 0


async def test_taking_a_lease_runs_no_info(client):
    """Issue 24: the token's suffix is drawn by the acquirer; the primary's epoch (INFO
    replication, in the script) is read only with wait_replicas, which confirms by it."""

    async def info_calls() -> int:
        return int((await client.info("commandstats")).get("cmdstat_info", {}).get("calls", 0))

    before = await info_calls()
    async with make_lease(client).hold("t-no-info"):
        pass
    assert await info_calls() - before == 1  # the first look's own INFO
    epoch = RedisTurnLease(
        client, lease_seconds=1, wait_seconds=0.2, counter_ttl_seconds=60, wait_replicas=1
    ).token_suffix()
    assert epoch == ""  # the script's: INFO replication


async def test_waiter_gets_the_lease_when_it_is_released(client):
    a, b = make_lease(client), make_lease(client, wait_seconds=3)
    order: list[str] = []
    held = asyncio.Event()

    async def holder():
        async with a.hold("t-wait"):
            order.append("a")
            held.set()
            await asyncio.sleep(0.3)  # the turn, while b waits

    async def waiter():
        await held.wait()
        async with b.hold("t-wait"):
            order.append("b")

    await asyncio.gather(holder(), waiter())
    assert order == ["a", "b"]


async def test_renewal_keeps_a_long_turn_exclusive(client):
    a, b = make_lease(client, lease_seconds=0.3), make_lease(client)
    async with a.hold("t-renew") as held:
        await asyncio.sleep(1.0)  # > 3 lease lifetimes
        assert not held.lost.is_set()
        with pytest.raises(LeaseBusy):
            async with b.hold("t-renew"):
                pass


async def test_a_lost_lease_is_noticed(client):
    a = make_lease(client, lease_seconds=0.3)
    async with a.hold("t-lost") as held:
        await client.set(lease_key("t-lost"), "someone-else")  # as if it expired and was taken
        await asyncio.wait_for(held.lost.wait(), 1.0)
    assert await client.get(lease_key("t-lost")) == b"someone-else"  # not released: not ours


async def test_a_dead_holders_lease_expires(client):
    await client.set(lease_key("t-dead"), "999", px=300)  # a holder that died holding it
    b = make_lease(client, wait_seconds=2)
    async with b.hold("t-dead") as held:
        assert held.token != "999"


async def test_cancelled_holder_releases(client):
    a = make_lease(client)
    entered = asyncio.Event()

    async def turn():
        async with a.hold("t-cancel"):
            entered.set()
            await asyncio.sleep(10)  # a turn, until it is cancelled

    task = asyncio.create_task(turn())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await client.exists(lease_key("t-cancel")) == 0


async def test_local_lease_serializes_within_a_process():
    lease = LocalTurnLease(wait_seconds=0.1)
    async with lease.hold("t") as held:
        assert held.token is None
        with pytest.raises(LeaseBusy):
            async with lease.hold("t"):
                pass
    async with lease.hold("t"):
        pass


def renewers(thread_id: str) -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if t.get_name() == f"lease-renew-{thread_id}"]


async def test_the_renewer_has_ended_when_the_lease_is_released(client):
    """A background task is cancelled *and awaited*: once ``hold`` returns (normally or by
    cancellation) its renewer is over, so no renewal can land after the release."""
    a = make_lease(client)
    async with a.hold("t-join"):
        (renewer,) = renewers("t-join")
    assert renewer.done() and not renewers("t-join")

    entered = asyncio.Event()

    async def turn():
        async with a.hold("t-join"):
            entered.set()
            await asyncio.sleep(10)  # a turn, until it is cancelled

    task = asyncio.create_task(turn())
    await entered.wait()
    (renewer,) = renewers("t-join")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert renewer.done()
    assert await client.exists(lease_key("t-join")) == 0
