"""Script calls batched per loop iteration (checkpoint/redis/pipelining.py), on their own
against a real ``redis-server``: scripts of this file, not the saver's, so each outcome is the
batcher's. The saver's use of it is tested in test_redis_saver.py ("calls made together").

Round trips are counted where redis-py writes to the socket (a connection subclass: one send
is one round trip, a pipeline included), the side effects in Redis itself. Warm-ups load
their scripts with SCRIPT LOAD: the batch sends raw EVALSHA, which a script Redis does not
hold yet fails with NOSCRIPT (the reload path, tested on its own below).
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import DataError, ResponseError

from threadline import redis_client
from threadline.checkpoint.redis.pipelining import ScriptPipelining

from servers import RedisServer

pytestmark = pytest.mark.integration

DB = 13  # this file's own db of the session's Redis

# KEYS[1] a counter; ARGV[1] a tag. Counts its runs and answers {tag, run number}.
COUNT = "local n = redis.call('INCR', KEYS[1]) return {ARGV[1], n}"
# The same, by another script (another sha).
COUNT_TOO = "local n = redis.call('INCRBY', KEYS[1], 1) return {ARGV[1], n}"
# Refuses every call, as a fenced put does.
REFUSE = "return redis.error_reply('REFUSED ' .. ARGV[1])"
# Echoes its keys and arguments as Redis received them.
ECHO = """
local out = {}
for _, k in ipairs(KEYS) do out[#out + 1] = k end
for _, a in ipairs(ARGV) do out[#out + 1] = a end
return out
"""


class Counted:
    """An async client whose connections count their sends (one send is one round trip)."""

    def __init__(self, url: str) -> None:
        counter = self

        class Connection(aioredis.Connection):
            async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
                counter.sends += 1
                await super().send_packed_command(command, check_health)

        self.sends = 0
        self.client = aioredis.Redis(
            connection_pool=aioredis.ConnectionPool.from_url(url, connection_class=Connection)
        )

    async def trips(self, awaitable: Any) -> tuple[int, Any]:
        before = self.sends
        result = await awaitable
        return self.sends - before, result


class Batcher(ScriptPipelining):
    """A batcher with this file's scripts, run by name."""

    def __init__(self, client: aioredis.Redis) -> None:
        super().__init__(client)
        self.scripts = {name: client.register_script(lua) for name, lua in SCRIPTS.items()}

    async def call(self, name: str, keys: list[Any], args: list[Any]) -> Any:
        return await self.run(self.scripts[name], keys, args)


SCRIPTS = {"count": COUNT, "count_too": COUNT_TOO, "refuse": REFUSE, "echo": ECHO}


def _admin(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(server.url(DB))
    for lua in SCRIPTS.values():
        client.script_load(lua)  # so EVALSHA works from the first batch
    yield client
    client.close()


async def _counted(server: RedisServer) -> AsyncIterator[Counted]:
    counted = Counted(server.url(DB))
    await counted.client.ping()  # connect now: the connection's handshake is no round trip of a call
    yield counted
    await counted.client.aclose()


@pytest.fixture
def admin(redis_server: RedisServer) -> Iterator[redis.Redis]:
    yield from _admin(redis_server)


@pytest.fixture
async def counted(redis_server: RedisServer, admin: redis.Redis) -> AsyncIterator[Counted]:
    async for counted in _counted(redis_server):
        yield counted


# Tests that flush Redis' scripts do it on a Redis of their own, not the session's.
@pytest.fixture
def own_admin(fresh_redis: RedisServer) -> Iterator[redis.Redis]:
    yield from _admin(fresh_redis)


@pytest.fixture
async def own_counted(fresh_redis: RedisServer, own_admin: redis.Redis) -> AsyncIterator[Counted]:
    async for counted in _counted(fresh_redis):
        yield counted


def key() -> str:
    return f"pipelining:{uuid.uuid4()}"


async def test_commands_and_scripts_of_any_user_of_a_client_share_its_one_batcher(counted: Counted) -> None:
    """Issue 24: the record store's reads and scripts and the quotas' counts of concurrent
    runs go in one round trip: one batcher per client (``shared``), plain commands with
    scripts, each reply as ``execute_command`` gives it (HGETALL a dict)."""
    from threadline.checkpoint.redis.pipelining import shared

    one = shared(counted.client)
    assert one is shared(counted.client) is not None
    record = key()
    await counted.client.hset(record, mapping={"owner": "alice"})
    script = counted.client.register_script(ECHO)
    calls = [one.command("HGETALL", record), one.run(script, [record], ["x"]), one.command("HGETALL", key())]
    n, replies = await counted.trips(asyncio.gather(*calls))
    assert n == 1
    assert replies == [{b"owner": b"alice"}, [record.encode(), b"x"], {}]
    n, alone = await counted.trips(one.command("HGETALL", record))
    assert n == 1 and alone == {b"owner": b"alice"}  # a call alone in its iteration goes alone
    await one.aclose()


async def test_calls_of_one_iteration_share_one_round_trip_each_with_its_reply(counted: Counted) -> None:
    p = Batcher(counted.client)
    keys = [key() for _ in range(20)]
    calls = [p.call("echo", [k], [f"arg-{i}", i, b"\x00raw"]) for i, k in enumerate(keys)]
    n, replies = await counted.trips(asyncio.gather(*calls))
    assert n == 1, "20 calls made in one loop iteration"
    assert replies == [
        [k.encode(), f"arg-{i}".encode(), str(i).encode(), b"\x00raw"] for i, k in enumerate(keys)
    ]
    await p.aclose()


async def test_a_call_alone_goes_alone(counted: Counted) -> None:
    p = Batcher(counted.client)
    counter = key()
    for run in (1, 2, 3):  # one after another: each in an iteration of its own
        n, reply = await counted.trips(p.call("count", [counter], ["solo"]))
        assert (n, reply) == (1, [b"solo", run])


async def test_calls_of_later_iterations_are_later_batches(counted: Counted, admin: redis.Redis) -> None:
    p = Batcher(counted.client)
    counter = key()

    async def late(delay: float, tag: str) -> Any:
        await asyncio.sleep(delay)  # 0: the next iteration; 0.2: long after the first batch
        return await p.call("count", [counter], [tag])

    n, replies = await counted.trips(
        asyncio.gather(late(0, "a"), late(0, "b"), late(0.2, "c"), late(0.2, "d"))
    )
    assert n == 2, "two iterations, two batches"
    assert sorted(tag for tag, _n in replies) == [b"a", b"b", b"c", b"d"]
    assert int(admin.get(counter)) == 4, "each call ran once"


async def test_calls_made_while_a_batch_is_on_its_way_go_together_as_the_next(
    fresh_redis: RedisServer,
) -> None:
    """One batch on its way at a time, on the batcher's own connection: calls of many later
    iterations wait for it and then share one round trip."""
    counted = Counted(fresh_redis.url(0))
    try:
        await counted.client.ping()
        for lua in SCRIPTS.values():
            await counted.client.script_load(lua)
        p = Batcher(counted.client)
        counter = key()
        sent = counted.sends
        assert fresh_redis.proc is not None
        fresh_redis.proc.send_signal(signal.SIGSTOP)  # the first batch is sent; its reply waits
        try:
            first = asyncio.ensure_future(p.call("count", [counter], ["first"]))
            later = []
            for i in range(5):  # five later iterations, each with a call of its own
                await asyncio.sleep(0.01)
                later.append(asyncio.ensure_future(p.call("count", [counter], [f"later-{i}"])))
            await asyncio.sleep(0.05)
            assert counted.sends - sent == 1, "the first batch, alone"
        finally:
            fresh_redis.proc.send_signal(signal.SIGCONT)
        replies = await asyncio.gather(first, *later)
        assert counted.sends - sent == 2, "then the five later calls in one round trip"
        assert [n for _tag, n in replies] == [1, 2, 3, 4, 5, 6], "in the order they were called"
        await p.aclose()
    finally:
        await counted.client.aclose()


async def test_a_batch_after_redis_restarted_reconnects_its_connection(fresh_redis: RedisServer) -> None:
    """The batcher's own connection, closed by a Redis restart while idle, is opened again by
    the next batch (the one retry of threadline's clients), which lands whole."""
    client = redis_client.async_client(fresh_redis.url(0))
    try:
        p = Batcher(client)
        counter = key()
        for lua in SCRIPTS.values():
            await client.script_load(lua)
        assert await p.call("count", [counter], ["before"]) == [b"before", 1]
        fresh_redis.restart()  # AOF: the counter survives; the scripts do not
        replies = await asyncio.gather(*(p.call("count", [counter], [f"after-{i}"]) for i in range(3)))
        assert sorted(n for _tag, n in replies) == [2, 3, 4], "each call ran once, after the restart"
        await p.aclose()
    finally:
        await client.aclose()


async def test_a_refused_call_fails_alone_in_its_batch(counted: Counted) -> None:
    p = Batcher(counted.client)
    counter = key()
    outcomes = await asyncio.gather(
        p.call("count", [counter], ["first"]),
        p.call("refuse", [key()], ["this one"]),
        p.call("count", [counter], ["last"]),
        return_exceptions=True,
    )
    assert outcomes[0] == [b"first", 1] and outcomes[2] == [b"last", 2]
    assert isinstance(outcomes[1], ResponseError) and str(outcomes[1]) == "REFUSED this one"


async def test_an_argument_redis_cannot_take_fails_its_call_alone(counted: Counted) -> None:
    """Packed as it is queued: the other calls of its iteration still go, in one round trip."""
    p = Batcher(counted.client)
    counter = key()
    n, outcomes = await counted.trips(
        asyncio.gather(
            p.call("count", [counter], ["first"]),
            p.call("count", [counter], [{"not": "sendable"}]),
            p.call("count", [counter], ["last"]),
            return_exceptions=True,
        )
    )
    assert n == 1 and outcomes[0] == [b"first", 1] and outcomes[2] == [b"last", 2]
    assert isinstance(outcomes[1], DataError)


async def test_a_lone_refused_call_raises_its_error(counted: Counted) -> None:
    p = Batcher(counted.client)
    with pytest.raises(ResponseError, match="REFUSED alone"):
        await p.call("refuse", [key()], ["alone"])


async def test_scripts_redis_lost_are_loaded_and_only_their_calls_sent_again(
    own_counted: Counted, own_admin: redis.Redis
) -> None:
    counted, admin = own_counted, own_admin
    p = Batcher(counted.client)
    admin.script_flush()  # as after a Redis restart: no script cached
    admin.script_load(COUNT_TOO)  # ... but one loaded again already
    counter = key()
    calls = [p.call(name, [counter], [f"{name}-{i}"]) for i in range(3) for name in ("count", "count_too")]
    n, replies = await counted.trips(asyncio.gather(*calls))
    assert n == 2, "the batch, then SCRIPT LOAD of the one script missing with its calls again"
    assert sorted(tag for tag, _n in replies) == sorted(
        f"{name}-{i}".encode() for i in range(3) for name in ("count", "count_too")
    )
    # A call whose script was there ran once, not again with the resent ones.
    assert int(admin.get(counter)) == 6 and sorted(n for _tag, n in replies) == [1, 2, 3, 4, 5, 6]
    assert admin.script_exists(p.scripts["count"].sha) == [True]
    # Loaded now: the next batch is one round trip again.
    n, _ = await counted.trips(asyncio.gather(*(p.call("count", [counter], ["again"]) for _ in range(4))))
    assert n == 1


async def test_a_lone_call_of_a_lost_script_loads_it(own_counted: Counted, own_admin: redis.Redis) -> None:
    counted, admin = own_counted, own_admin
    p = Batcher(counted.client)
    admin.script_flush()
    counter = key()
    assert await p.call("count", [counter], ["solo"]) == [b"solo", 1]
    assert int(admin.get(counter)) == 1


async def test_a_caller_cancelled_after_its_call_was_queued_does_not_stop_it(
    counted: Counted, admin: redis.Redis
) -> None:
    p = Batcher(counted.client)
    counter = key()
    jobs = [asyncio.ensure_future(p.call("count", [counter], [f"job-{i}"])) for i in range(5)]
    await asyncio.sleep(0)  # every job has queued its call
    jobs[0].cancel()
    outcomes = await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), timeout=10)
    assert isinstance(outcomes[0], asyncio.CancelledError)
    assert [tag for tag, _n in outcomes[1:]] == [f"job-{i}".encode() for i in range(1, 5)]
    await p.aclose()
    assert int(admin.get(counter)) == 5, "the cancelled caller's script ran too"


async def test_aclose_waits_for_the_batches_on_their_way(counted: Counted, admin: redis.Redis) -> None:
    p = Batcher(counted.client)
    counter = key()
    callers = [asyncio.ensure_future(p.call("count", [counter], [f"fire-{i}"])) for i in range(3)]
    await asyncio.sleep(0)  # the calls are queued ...
    await asyncio.sleep(0)  # ... and their batch is on its way
    await p.aclose()
    assert int(admin.get(counter) or 0) == 3
    assert sorted(n for _tag, n in await asyncio.gather(*callers)) == [1, 2, 3]


async def test_aclose_with_nothing_sent_returns_at_once(counted: Counted) -> None:
    await asyncio.wait_for(Batcher(counted.client).aclose(), timeout=1)


async def test_a_batch_on_a_stopped_redis_fails_every_call(fresh_redis: RedisServer) -> None:
    client = aioredis.Redis.from_url(fresh_redis.url(0), socket_timeout=5)
    try:
        p = Batcher(client)
        for lua in SCRIPTS.values():
            await client.script_load(lua)
        fresh_redis.stop()
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(p.call("count", [key()], ["x"]) for _ in range(5)), return_exceptions=True),
            timeout=20,  # a hang fails the test
        )
        assert all(isinstance(o, redis.ConnectionError) for o in outcomes), outcomes
    finally:
        await client.aclose()


async def test_a_batch_whose_replies_miss_the_socket_timeout_fails_every_call(
    fresh_redis: RedisServer,
) -> None:
    """One deadline covers a batch's replies: a Redis that stops answering fails every call of
    the batch with redis-py's TimeoutError (a store failure, retried by the client's policy
    first), and the next batch, once it answers again, goes through."""
    client = aioredis.Redis.from_url(fresh_redis.url(0), socket_timeout=0.3)
    try:
        p = Batcher(client)
        for lua in SCRIPTS.values():
            await client.script_load(lua)
        assert fresh_redis.proc is not None
        fresh_redis.proc.send_signal(signal.SIGSTOP)
        try:
            outcomes = await asyncio.wait_for(
                asyncio.gather(*(p.call("count", [key()], ["x"]) for _ in range(3)), return_exceptions=True),
                timeout=20,  # a hang fails the test
            )
        finally:
            fresh_redis.proc.send_signal(signal.SIGCONT)
        assert all(isinstance(o, redis.TimeoutError) for o in outcomes), outcomes
        assert await p.call("count", [key()], ["after"]) == [b"after", 1]
        await p.aclose()
    finally:
        await client.aclose()


async def test_a_batch_cancelled_on_its_way_cancels_its_callers(fresh_redis: RedisServer) -> None:
    """When the process stops, its tasks are cancelled: the batch's callers are cancelled with
    it instead of waiting for replies nobody will read."""
    client = aioredis.Redis.from_url(fresh_redis.url(0), socket_timeout=30)
    try:
        p = Batcher(client)
        for lua in SCRIPTS.values():
            await client.script_load(lua)
        assert fresh_redis.proc is not None
        fresh_redis.proc.send_signal(signal.SIGSTOP)  # the batch is sent; no reply comes
        try:
            jobs = [asyncio.ensure_future(p.call("count", [key()], ["x"])) for _ in range(3)]
            for _ in range(20):
                await asyncio.sleep(0.01)
            batches = [t for t in asyncio.all_tasks() if t.get_name() == "redis-script-batch"]
            assert len(batches) == 1
            batches[0].cancel()
            outcomes = await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), timeout=5)
            assert all(isinstance(o, asyncio.CancelledError) for o in outcomes), outcomes
        finally:
            fresh_redis.proc.send_signal(signal.SIGCONT)
    finally:
        await client.aclose()
