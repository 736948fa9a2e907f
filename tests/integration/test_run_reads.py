"""What a run reads before its graph runs (issue 24: two round trips of a run's seven).

- A run on a thread its replica knows skips reading the thread's record; storing the run
  checks the thread instead. Two runs layers ("replicas") in this process share one real Redis
  for records and lease, and one saver.
- A run's first checkpoint read goes in the round trip that creates it, where the records and
  the ``redis`` saver share a client (the service's ``redis`` backend), and is used only when
  that creation took the thread's lease."""

from __future__ import annotations

import asyncio
import hashlib
import operator
from collections.abc import AsyncIterator
from typing import Annotated

import orjson
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from runs_layers import runs_layer
from typing_extensions import TypedDict

from threadline.checkpoint.instrumented import instrument
from threadline.checkpoint.redis import RedisCheckpointSaver
from threadline.checkpoint.redis.pipelining import ScriptPipelining
from threadline.checkpoint.redis.scripts import SCRIPTS as SAVER
from threadline.redis_client import async_client
from threadline.runs.errors import NotFound
from threadline.runs.records_redis_scripts import SCRIPTS as RECORDS
from threadline.runs.runs import Runs

pytestmark = pytest.mark.integration


class Counted(TypedDict, total=False):
    done: Annotated[list[str], operator.add]


def counted_graph(saver: InMemorySaver):
    builder = StateGraph(Counted)
    builder.add_node("step", lambda state: {"done": ["step"]})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


@pytest.fixture
async def replicas(redis_server) -> AsyncIterator[tuple[Runs, Runs]]:
    client = async_client(redis_server.url(10))
    await client.flushdb()
    graph = counted_graph(InMemorySaver())
    layers = [runs_layer(client, "counted", graph) for _ in range(2)]
    yield layers[0], layers[1]
    for layer in layers:
        await layer.aclose()
    await client.aclose()


def count_thread_reads(layer: Runs, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread ids ``layer`` reads records of (the real read goes on)."""
    reads: list[str] = []
    read = layer.records.get_thread

    async def counted(thread_id: str, *args, **kwargs):
        reads.append(thread_id)
        return await read(thread_id, *args, **kwargs)

    monkeypatch.setattr(layer.records, "get_thread", counted)
    return reads


async def start(layer: Runs, principal: str, thread_id: str) -> str:
    return (await layer.create(principal, thread_id, {"assistant_id": "counted", "input": {}})).run_id


async def done(layer: Runs, principal: str, thread_id: str, run_id: str) -> list[str]:
    """The thread's ``done`` once the run ended."""
    return orjson.loads(await layer.join(principal, thread_id, run_id))["done"]


async def run(layer: Runs, principal: str, thread_id: str) -> list[str]:
    return await done(layer, principal, thread_id, await start(layer, principal, thread_id))


# -- the thread's record --------------------------------------------------------------------


async def test_a_second_run_on_a_thread_reads_no_record_of_it(replicas, monkeypatch) -> None:
    a, _ = replicas
    tid = (await a.threads.create("alice"))["thread_id"]
    reads = count_thread_reads(a, monkeypatch)
    first = await start(a, "alice", tid)
    assert reads == [tid]  # the first run reads it (and stamps its graph on it)
    assert await done(a, "alice", tid, first) == ["step"]
    reads.clear()
    second = await start(a, "alice", tid)
    assert reads == []
    assert await done(a, "alice", tid, second) == ["step", "step"]
    record = await a.records.get_thread(tid)
    assert record is not None and record.metadata["graph_id"] == "counted" and record.status == "idle"


async def test_a_known_thread_deleted_on_another_replica_is_not_found(replicas) -> None:
    a, b = replicas
    tid = (await a.threads.create("alice"))["thread_id"]
    await run(a, "alice", tid)
    await b.threads.delete("alice", tid)
    with pytest.raises(NotFound) as gone:
        await run(a, "alice", tid)
    assert gone.value.code == "thread_not_found"
    assert await a.records.get_thread(tid) is None and await a.records.runs_of(tid) == []


async def test_a_known_thread_recreated_by_another_principal_is_not_found_and_untouched(replicas) -> None:
    """A client-chosen thread id deleted and made again by someone else: the replica that
    knew it as alice's neither runs on bob's thread nor lets alice see it."""
    a, b = replicas
    tid = (await a.threads.create("alice"))["thread_id"]
    await run(a, "alice", tid)
    await b.threads.delete("alice", tid)
    await b.threads.create("bob", tid)
    with pytest.raises(NotFound):
        await run(a, "alice", tid)
    assert await b.records.runs_of(tid) == []
    record = await b.records.get_thread(tid)
    assert record is not None and record.owner == "bob" and record.status == "idle"
    assert await run(b, "bob", tid) == ["step"]


async def test_a_known_thread_deleted_and_made_again_by_its_owner_runs(replicas, monkeypatch) -> None:
    """... after one more read of it: the first attempt is refused, the second reads the new
    record (and stamps its graph on it)."""
    a, b = replicas
    tid = (await a.threads.create("alice"))["thread_id"]
    await run(a, "alice", tid)
    await b.threads.delete("alice", tid)
    await b.threads.create("alice", tid)
    reads = count_thread_reads(a, monkeypatch)
    again = await start(a, "alice", tid)
    assert reads == [tid]
    assert await done(a, "alice", tid, again) == ["step"]  # a new thread's state
    record = await a.records.get_thread(tid)
    assert record is not None and record.metadata["graph_id"] == "counted"


# -- the first checkpoint read ---------------------------------------------------------------

GATES: dict[str, asyncio.Event] = {}


async def gated_step(state: Counted, config: RunnableConfig) -> dict:
    if gate := GATES.get(config["configurable"]["thread_id"]):
        await gate.wait()
    return {"done": ["step"]}


@pytest.fixture
async def on_redis_saver(redis_server) -> AsyncIterator[Runs]:
    """A runs layer as the service opens it on ``CHECKPOINT_BACKEND=redis``: records, lease and
    saver on one client (Stores.open)."""
    client = async_client(redis_server.url(11))
    await client.flushdb()
    saver = instrument(RedisCheckpointSaver(client, ttl_seconds=60), "redis")
    builder = StateGraph(Counted)
    builder.add_node("step", gated_step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    layer = runs_layer(client, "counted", builder.compile(checkpointer=saver), reads_ahead=True)
    yield layer
    await layer.aclose()
    await saver.inner.aclose()
    await client.aclose()


def batches(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The script names (or command names) of each batch the batchers send, as they go."""
    shas = {hashlib.sha1(text.encode()).hexdigest(): name for name, text in {**SAVER, **RECORDS}.items()}
    sent: list[list[str]] = []
    send = ScriptPipelining._send

    async def recorded(self, batch):
        sent.append([shas[script.sha] if script else packed[0] for script, packed, _ in batch])
        return await send(self, batch)

    monkeypatch.setattr(ScriptPipelining, "_send", recorded)
    return sent


async def test_a_runs_first_checkpoint_read_goes_with_its_creation(on_redis_saver, monkeypatch) -> None:
    runs = on_redis_saver
    tid = (await runs.threads.create("alice"))["thread_id"]
    assert await run(runs, "alice", tid) == ["step"]
    sent = batches(monkeypatch)
    assert await run(runs, "alice", tid) == ["step", "step"]
    assert sent[0] == ["create_run", "load"], sent


async def test_a_run_queued_behind_another_reads_the_thread_when_its_turn_comes(on_redis_saver) -> None:
    """Its creation's read came before the run ahead of it wrote: not the thread it runs on."""
    runs = on_redis_saver
    tid = (await runs.threads.create("alice"))["thread_id"]
    gate = GATES[tid] = asyncio.Event()
    ahead = await start(runs, "alice", tid)
    behind = await start(runs, "alice", tid)  # queued: its read sees no checkpoint yet
    gate.set()
    assert await done(runs, "alice", tid, ahead) == ["step"]
    assert await done(runs, "alice", tid, behind) == ["step", "step"]
