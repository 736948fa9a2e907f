"""The metrics wrapper and the SQLite bridge, without servers (in-memory savers only)."""

from __future__ import annotations

import asyncio
import copy
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    create_checkpoint,
    empty_checkpoint,
)
from langgraph.checkpoint.conformance.capabilities import DetectedCapabilities
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from prometheus_client import REGISTRY

from threadline.checkpoint.instrumented import InstrumentedSaver, instrument
from threadline.checkpoint.read_ahead import read_ahead
from threadline.checkpoint.sqlite import ThreadedSqliteSaver, _bridge

from servers import until

pytestmark = pytest.mark.unit

CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def sqlite_saver() -> Iterator[ThreadedSqliteSaver]:
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    yield ThreadedSqliteSaver(conn)
    conn.close()


class CopyOnly(InMemorySaver):
    """A saver with one extended capability."""

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        raise RuntimeError("store down")


class Failing(InMemorySaver):
    def __init__(self) -> None:
        super().__init__()
        self.put_started = asyncio.Event()

    async def aget_tuple(self, config: Any) -> None:
        raise ConnectionError("store down")

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        self.put_started.set()
        await asyncio.sleep(10)  # a put that hangs until cancelled


@pytest.mark.parametrize("inner_type", [InMemorySaver, CopyOnly, ThreadedSqliteSaver])
def test_wrapper_reports_exactly_the_inner_capabilities(inner_type: type) -> None:
    inner = (
        inner_type(sqlite3.connect(":memory:", check_same_thread=False))
        if inner_type is ThreadedSqliteSaver
        else inner_type()
    )
    wrapped = instrument(inner, "test")
    assert DetectedCapabilities.from_instance(wrapped) == DetectedCapabilities.from_instance(inner)
    assert isinstance(wrapped, InstrumentedSaver) and isinstance(wrapped, BaseCheckpointSaver)
    assert instrument(wrapped, "other") is wrapped  # wrapped once


class Versioned(InMemorySaver):
    def get_next_version(self, current: Any, channel: None) -> str:
        return f"v{current}+"

    @property
    def config_specs(self) -> list:
        return ["spec"]


def test_wrapper_delegates_what_the_runtime_uses() -> None:
    inner = Versioned()
    wrapped = instrument(inner, "test")
    assert wrapped.serde is inner.serde
    assert wrapped.config_specs == ["spec"]
    assert wrapped.get_next_version("1", None) == "v1+"
    assert wrapped.inner is inner
    # Same serde back from the inner saver → the same wrapper; a clone → a wrapped clone.
    assert wrapped.with_allowlist({("my.module", "MyType")}) is wrapped
    inner.with_allowlist = lambda extra: copy.copy(inner)  # type: ignore[method-assign]
    narrowed = wrapped.with_allowlist({("my.module", "MyType")})
    assert isinstance(narrowed, InstrumentedSaver) and narrowed.backend == "test"
    assert narrowed.inner is not inner and narrowed.inner.storage is inner.storage


async def test_metrics_count_operations_errors_and_durations() -> None:
    backend = "unit-metrics"
    wrapped = instrument(InMemorySaver(), backend)
    checkpoint = create_checkpoint(empty_checkpoint(), None, 1)
    before = sample("threadline_checkpoint_write_duration_seconds_count", backend=backend)
    stored = await wrapped.aput(CONFIG, checkpoint, {"step": 1}, {})
    await wrapped.aput_writes(stored, [("a", 1)], "task")
    assert (await wrapped.aget_tuple(CONFIG)).checkpoint["id"] == checkpoint["id"]
    assert [t async for t in wrapped.alist(CONFIG)]
    assert wrapped.get_tuple(CONFIG) is not None  # the sync twin is timed too
    assert sample("threadline_checkpoint_operations_total", backend=backend, op="put") == 1
    assert sample("threadline_checkpoint_operations_total", backend=backend, op="put_writes") == 1
    assert sample("threadline_checkpoint_operations_total", backend=backend, op="get_tuple") == 2
    assert sample("threadline_checkpoint_operations_total", backend=backend, op="list") == 1
    assert sample("threadline_checkpoint_read_duration_seconds_count", backend=backend) == 3
    after = sample("threadline_checkpoint_write_duration_seconds_count", backend=backend)
    assert after - before == 2


class Slow(InMemorySaver):
    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.2)  # a slow store: the busy time under test
        return await super().aput(*args, **kwargs)


async def test_busy_time_counts_overlapping_operations_once() -> None:
    backend = "unit-busy"
    wrapped = instrument(Slow(), backend)
    checkpoints = [create_checkpoint(empty_checkpoint(), None, step) for step in (1, 2)]
    # Two puts in flight at once, as LangGraph's background writes overlap the next put.
    await asyncio.gather(*(wrapped.aput(CONFIG, cp, {}, {}) for cp in checkpoints))
    summed = sample("threadline_checkpoint_write_duration_seconds_sum", backend=backend)
    busy = sample("threadline_checkpoint_busy_seconds_total", backend=backend)
    assert summed >= 0.4
    assert 0.2 <= busy < 0.75 * summed
    await wrapped.aput(CONFIG, create_checkpoint(empty_checkpoint(), None, 3), {}, {})
    assert sample("threadline_checkpoint_busy_seconds_total", backend=backend) >= busy + 0.2


async def test_errors_are_counted_and_cancellation_is_not() -> None:
    backend = "unit-errors"
    inner = Failing()
    wrapped = instrument(inner, backend)
    with pytest.raises(ConnectionError):
        await wrapped.aget_tuple(CONFIG)
    task = asyncio.create_task(wrapped.aput(CONFIG, create_checkpoint(empty_checkpoint(), None, 1), {}, {}))
    await until(inner.put_started.is_set, "the put to reach the inner saver")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sample("threadline_checkpoint_errors_total", backend=backend, op="get_tuple") == 1
    assert sample("threadline_checkpoint_errors_total", backend=backend, op="put") == 0
    assert sample("threadline_checkpoint_operations_total", backend=backend, op="put") == 1


async def test_an_abandoned_alist_is_observed_once() -> None:
    backend = "unit-alist"
    wrapped = instrument(InMemorySaver(), backend)
    for step in range(3):
        checkpoint = create_checkpoint(empty_checkpoint(), None, step)
        await wrapped.aput(CONFIG, checkpoint, {"step": step}, {})
    items = wrapped.alist(CONFIG)
    assert await anext(items) is not None
    await items.aclose()
    assert sample("threadline_checkpoint_read_duration_seconds_count", backend=backend) == 1
    assert sample("threadline_checkpoint_operations_total", backend=backend, op="list") == 1


def test_sqlite_bridge_covers_exactly_what_the_sync_saver_implements() -> None:
    capability_methods = [
        "get_tuple",
        "list",
        "put",
        "put_writes",
        "delete_thread",
        "delete_for_runs",
        "copy_thread",
        "prune",
        "get_delta_channel_history",
    ]
    implemented = {
        name
        for name in capability_methods
        if getattr(SqliteSaver, name) is not getattr(BaseCheckpointSaver, name)
    }
    bridged = {
        name
        for name in capability_methods
        if getattr(ThreadedSqliteSaver, f"a{name}") is not getattr(BaseCheckpointSaver, f"a{name}")
    }
    # delete_for_runs is the bridge's own (SQL on the saver's tables, for rollback).
    assert bridged == implemented | {"delete_for_runs"}
    assert "delete_for_runs" not in implemented
    assert "copy_thread" not in bridged and "prune" not in bridged
    with pytest.raises(TypeError, match="does not implement copy_thread"):
        _bridge("copy_thread")


async def test_sqlite_bridge_runs_in_worker_threads(
    sqlite_saver: ThreadedSqliteSaver,
) -> None:
    checkpoint = create_checkpoint(empty_checkpoint(), None, 1)
    stored = await sqlite_saver.aput(CONFIG, checkpoint, {"step": 1}, {})
    await sqlite_saver.aput_writes(stored, [("a", 1)], "task")
    got = await sqlite_saver.aget_tuple(CONFIG)
    assert got is not None and got.pending_writes == [("task", "a", 1)]
    # alist materialises inside the worker: the lock is free while we hold the items.
    items = sqlite_saver.alist(CONFIG)
    assert (await anext(items)).checkpoint["id"] == checkpoint["id"]
    assert sqlite_saver.lock.acquire(blocking=False)
    sqlite_saver.lock.release()
    await items.aclose()
    await sqlite_saver.adelete_thread("t")
    assert await sqlite_saver.aget_tuple(CONFIG) is None


# -- a run's first read, made ahead (threadline.checkpoint.read_ahead) ---------------------------


async def _saved_thread() -> InstrumentedSaver:
    saver = instrument(InMemorySaver(), "memory")
    await saver.aput(CONFIG, create_checkpoint(empty_checkpoint(), {}, 1), {"step": 1}, {})
    return saver


async def test_the_first_read_takes_what_was_read_ahead_and_no_read_after_it() -> None:
    saver = await _saved_thread()
    before = sample("threadline_checkpoint_operations_total", backend="memory", op="get_tuple")
    with read_ahead("t", None):  # as if read before the checkpoint was there
        assert await saver.aget_tuple(CONFIG) is None  # taken: the saver is not asked
        assert await saver.aget_tuple(CONFIG) is not None  # the next read reads
    assert sample("threadline_checkpoint_operations_total", backend="memory", op="get_tuple") == before + 1


@pytest.mark.parametrize(
    "config",
    [
        {"configurable": {"thread_id": "other", "checkpoint_ns": ""}},
        {"configurable": {"thread_id": "t", "checkpoint_ns": "child:1"}},
        {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "x"}},
    ],
    ids=["another thread", "a subgraph", "a given checkpoint"],
)
async def test_a_first_read_of_something_else_drops_what_was_read_ahead(config: dict) -> None:
    saver = await _saved_thread()
    with read_ahead("t", None):
        await saver.aget_tuple(config)
        assert await saver.aget_tuple(CONFIG) is not None  # read, not the dropped None


async def test_what_was_read_ahead_is_taken_once_across_copied_contexts() -> None:
    """LangGraph runs steps in tasks of their own (each a copy of the context): a read in one
    takes it for all."""
    saver = await _saved_thread()
    with read_ahead("t", None):
        assert await asyncio.create_task(saver.aget_tuple(CONFIG)) is None
        assert await saver.aget_tuple(CONFIG) is not None
    assert await saver.aget_tuple(CONFIG) is not None  # outside: nothing to take
