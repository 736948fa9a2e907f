"""When a run's events reach the store (ADR 0010): as they happen while a client streams the
run, on the executing replica or another one; otherwise with the run's end (or the quiet
window). Two runs layers ("replicas") in this process share one real Redis for records and
lease, and one saver; the graph waits at a gate between its two steps, so what the store
holds mid-run can be looked at."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncIterator
from typing import Annotated

import orjson
import pytest
import redis.asyncio as aioredis
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from runs_layers import runs_layer
from typing_extensions import TypedDict

from threadline.config import QuotaSettings
from threadline.lease import RedisTurnLease
from threadline.quotas import QuotaExceeded, RedisQuotas
from threadline.redis_client import async_client
from threadline.runs import events as events_module
from threadline.runs.assistants import Assistants
from threadline.runs.records_redis import RedisRecordStore
from threadline.runs.runs import Runs
from threadline.runs.threads import Threads

from servers import until

pytestmark = pytest.mark.integration

GATES: dict[str, asyncio.Event] = {}


class Gated(TypedDict, total=False):
    gate: str
    done: Annotated[list[str], operator.add]


def first(state: Gated) -> dict:
    return {"done": ["first"]}


async def second(state: Gated) -> dict:
    await GATES[state["gate"]].wait()
    return {"done": ["second"]}


def gated_graph(saver: InMemorySaver):
    builder = StateGraph(Gated)
    builder.add_node("first", first)
    builder.add_node("second", second)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    return builder.compile(checkpointer=saver)


@pytest.fixture
async def replicas(redis_server, monkeypatch) -> AsyncIterator[tuple[Runs, Runs, RedisRecordStore]]:
    # No quiet-window append during the test: what reaches the store mid-run is the watch's doing.
    monkeypatch.setattr(events_module, "EVENT_QUIET_FLUSH_SECONDS", 600.0)
    client = async_client(redis_server.url(9))
    await client.flushdb()
    graph = gated_graph(InMemorySaver())
    layers = [runs_layer(client, "gated", graph) for _ in range(2)]
    yield layers[0], layers[1], layers[0].records  # type: ignore[misc]
    for layer in layers:
        await layer.aclose()
    await client.aclose()


async def start_gated(executor: Runs, **options) -> tuple[str, str, asyncio.Event]:
    """A run on ``executor`` (created with ``options``) held at its gate, its first step done
    (one ``values`` event for the input, one after ``first``)."""
    tid = (await executor.threads.create("alice"))["thread_id"]
    gate = GATES.setdefault(tid, asyncio.Event())
    run = await executor.create("alice", tid, {"assistant_id": "gated", "input": {"gate": tid}, **options})

    async def first_done() -> bool:
        return (await executor.threads.state("alice", tid))["values"].get("done") == ["first"]

    await until(first_done, "the first step to run", interval=0.02)
    return tid, run.run_id, gate


async def stored_events(records: RedisRecordStore, tid: str, run_id: str) -> list[str]:
    return [e.event for e in await records.read_events(tid, run_id, None, 0)]


async def values_until(events: AsyncIterator, count: int) -> list:
    seen = []
    async for event in events:
        if event.event == "values":
            seen.append(orjson.loads(event.data))
            if len(seen) == count:
                return seen
    raise AssertionError(f"the stream ended after {len(seen)} values events")


@pytest.mark.parametrize("resumable", [False, True])
async def test_a_run_nobody_streams_holds_its_events_until_its_end(replicas, resumable: bool) -> None:
    """... and then keeps them only if it was created ``stream_resumable`` (issue 18: a run's
    events hold whole states, and nobody can ask for those of a plain run once it ended)."""
    a, _, records = replicas
    tid, run_id, gate = await start_gated(a, stream_resumable=resumable)
    await asyncio.sleep(0.5)  # two and a half cancel polls
    assert await stored_events(records, tid, run_id) == ["metadata"]
    gate.set()
    result = orjson.loads(await a.join("alice", tid, run_id))
    assert result["done"] == ["first", "second"]
    kept = ["metadata", "values", "values", "values", "__end__"] if resumable else []
    assert await stored_events(records, tid, run_id) == kept


async def test_a_client_on_another_replica_gets_the_events_while_the_run_waits(replicas) -> None:
    a, b, records = replicas
    tid, run_id, gate = await start_gated(a)
    stream = b.events("alice", tid, run_id)
    # The input's and the first step's values, while the run still waits at its gate: the
    # executor on `a` learnt of the client on `b` through the store and appended what it held.
    async with asyncio.timeout(10):
        head = await values_until(stream, 2)
    assert not gate.is_set() and head[-1]["done"] == ["first"]
    gate.set()
    async with asyncio.timeout(10):
        (last,) = await values_until(stream, 1)
    assert last["done"] == ["first", "second"]
    assert await stored_events(records, tid, run_id) == ["metadata", "values", "values", "values", "__end__"]


async def test_a_client_on_the_executing_replica_gets_the_events_while_the_run_waits(replicas) -> None:
    a, _, records = replicas
    tid, run_id, gate = await start_gated(a)
    async with asyncio.timeout(10):
        head = await values_until(a.events("alice", tid, run_id), 2)
    assert not gate.is_set() and head[-1]["done"] == ["first"]
    # Told in-process, and the store too: for an executor that takes the run over should `a`
    # die (its client then reconnects elsewhere, maybe after the run ended).
    assert await records._client.exists(f"tl:{{{tid}}}:run:{run_id}:w")
    gate.set()
    await a.join("alice", tid, run_id)
    assert (await stored_events(records, tid, run_id))[-1] == "__end__"  # kept for a reconnect


async def test_a_watch_is_seen_by_the_executors_poll_once(redis_server) -> None:
    client = async_client(redis_server.url(9))
    await client.flushdb()
    executor, reader = RedisRecordStore(client, ttl_seconds=60), RedisRecordStore(client, ttl_seconds=60)
    told: list[str] = []
    waiting = asyncio.create_task(executor.wait_cancel("t", "r", lambda: told.append("watched")))
    await asyncio.sleep(0.5)  # polls that find no watch say nothing
    assert told == []
    await reader.watch_events("t", "r", 10)
    await until(lambda: told, "the executor's poll to see the watch")
    await asyncio.sleep(0.5)  # later polls do not tell it again
    assert told == ["watched"]
    assert await reader.request_cancel("t", "r") is False  # no such run: the wait goes on
    waiting.cancel()
    await client.aclose()


async def test_runs_that_stop_waiting_during_a_poll_do_not_disturb_the_others(redis_server) -> None:
    """A poll in flight while some runs end (their waits go): each remaining run reads its own
    replies. Redis is paused for longer than a poll interval, so a poll is in flight."""
    client, admin = async_client(redis_server.url(9)), async_client(redis_server.url(9))
    await client.flushdb()
    store = RedisRecordStore(client, ttl_seconds=60)
    waits = [asyncio.create_task(store.wait_cancel("t", f"r{i}", lambda: None)) for i in range(10)]
    await asyncio.sleep(0.25)  # the waits poll
    await admin.execute_command("CLIENT", "PAUSE", 500, "ALL")
    await asyncio.sleep(0.25)  # past a poll interval: a poll is in flight, held by the pause
    for ending in waits[1::2]:
        ending.cancel()
    await asyncio.sleep(1.0)  # the paused poll answers, and two more polls
    assert not any(w.done() for w in waits[::2]), "a run that nobody cancelled was told to stop"
    for w in waits[::2]:
        w.cancel()
    await client.aclose()
    await admin.aclose()


async def test_a_sweep_reads_every_runs_heartbeat_in_one_round_trip(replicas, redis_server) -> None:
    """The orphan sweep of a replica looks at all active runs' heartbeats side by side, in one
    round trip however many runs are active (it was one per run: at concurrency 32, ~30 round
    trips twice a second on every replica)."""
    a, _b, _records = replicas
    started = [await start_gated(a) for _ in range(5)]
    sent: list[bytes] = []

    class Counted(aioredis.Connection):
        async def send_packed_command(self, command, check_health: bool = True) -> None:
            sent.append(b"".join(command) if isinstance(command, list) else bytes(command))
            await super().send_packed_command(command, check_health)

    pool = aioredis.ConnectionPool.from_url(redis_server.url(9), connection_class=Counted)
    client = aioredis.Redis(connection_pool=pool)
    records = RedisRecordStore(client, ttl_seconds=60)
    lease = RedisTurnLease(client, lease_seconds=10, wait_seconds=5, counter_ttl_seconds=60)
    sweeper = Runs(a.threads, a.assistants, records, lease, QuotaSettings(), heartbeat_seconds=10)
    try:
        assert await sweeper.sweep() == 0  # every run's executor beats
        heartbeat_reads = [packet for packet in sent if b"EXISTS" in packet]
        assert len(heartbeat_reads) == 1 and heartbeat_reads[0].count(b"EXISTS") == 5
    finally:
        for _tid, _run, gate in started:
            gate.set()
        await sweeper.aclose()
        await client.aclose()


@pytest.mark.parametrize("strategy", ["enqueue", "interrupt"])
async def test_a_run_past_the_thread_bytes_is_refused_whole_whatever_its_strategy(
    redis_server, strategy: str
) -> None:
    """The run's bytes are counted as it is stored (enqueue: in the creation's own step) or
    before anything else (interrupt: before the running run is cancelled for it). Refused, it
    stores nothing and the running run goes on."""
    client = async_client(redis_server.url(10))
    await client.flushdb()
    graph = gated_graph(InMemorySaver())
    records = RedisRecordStore(client, ttl_seconds=60)
    lease = RedisTurnLease(client, lease_seconds=10, wait_seconds=5, counter_ttl_seconds=60)
    quotas = RedisQuotas(client, QuotaSettings(thread_bytes=200), 60)
    assistants = Assistants({"gated": graph})
    threads = Threads(records, assistants, lease, graph.checkpointer, quotas)
    runs = Runs(threads, assistants, records, lease, QuotaSettings(), heartbeat_seconds=10)
    try:
        tid, running, gate = await start_gated(runs)
        big = {"assistant_id": "gated", "input": {"gate": "x" * 300}, "multitask_strategy": strategy}
        with pytest.raises(QuotaExceeded):
            await runs.create("alice", tid, big)
        assert [r.run_id for r in await records.runs_of(tid)] == [running]
        assert (await records.get_run(tid, running)).status == "running"
        assert await records.active_runs() == [(tid, running)]
        gate.set()
        assert (await runs.join("alice", tid, running)) is not None
        assert (await records.get_run(tid, running)).status == "success"
    finally:
        await runs.aclose()
        await client.aclose()
