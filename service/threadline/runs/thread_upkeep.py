"""Thread upkeep: a thread's time to live and its sweep, pruning, supersteps applied at
creation, and what its checkpoints occupy (storage). :class:`~threadline.runs.threads.Threads`
owns the records and state; :class:`ThreadUpkeep` (built beside it in ``runtime.py``) and the
functions here work through it.

A thread may have a time to live (``ttl``): its record says when it expires and what then
happens (``delete``, or ``keep_latest``: pruned to its latest checkpoint), and the record store
indexes it by that time. Each replica sweeps the index every ``THREAD_TTL_SWEEP_SECONDS``; a
sweep claims what is due (one replica per thread: RecordStore.expired_threads) and carries it
out as its owner would.

What the functions here need of ``Threads`` is :class:`ThreadsView`, so this module sits below
``threads.py`` (which calls it) and does not import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import InvalidUpdateError
from langgraph.types import StateUpdate

from threadline.lease import LeaseBusy, TurnLease
from threadline.runs.assistants import Assistant, Assistants
from threadline.runs.errors import Conflict, Invalid, NotFound
from threadline.runs.records import RecordStore, ThreadRecord
from threadline.runs.thread_checkpoints import OWNER_KEY, thread_config, thread_status_of

log = logging.getLogger(__name__)

# Expired threads one sweep claims at once; a claimed thread the sweep could not carry out (a
# run holds it, the store failed, the replica died) is taken again this long after.
TTL_SWEEP_BATCH = 100
TTL_RETRY_SECONDS = 30.0


class ThreadsView(Protocol):
    """What thread upkeep uses of :class:`~threadline.runs.threads.Threads`."""

    records: RecordStore
    assistants: Assistants
    lease: TurnLease
    checkpointer: BaseCheckpointSaver

    def assistant_of(self, record: ThreadRecord) -> Assistant: ...

    async def record(self, principal: str, thread_id: str) -> ThreadRecord: ...

    async def delete(self, principal: str, thread_id: str) -> None: ...


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def record_ttl(threads: ThreadsView, ttl: dict[str, Any] | None) -> dict[str, Any] | None:
    """The record's ``ttl`` for a request's ``{"strategy", "ttl"}`` (minutes from now)."""
    if ttl is None:
        return None
    strategy = ttl.get("strategy") or "delete"
    if strategy == "keep_latest":
        check_prune(threads, "ttl.strategy")
    expires = time.time() + float(ttl["ttl"]) * 60
    return {
        "strategy": strategy,
        "ttl_minutes": ttl["ttl"],
        "expires_at": datetime.fromtimestamp(expires, UTC).isoformat(),
    }


def check_prune(threads: ThreadsView, field: str) -> None:
    """Raises Invalid: the checkpointer cannot prune a thread to its latest checkpoint."""
    if type(threads.checkpointer).aprune is BaseCheckpointSaver.aprune:
        raise Invalid(
            f"{field}: keep_latest needs a checkpointer that prunes checkpoints (CHECKPOINT_BACKEND "
            "redis); use delete"
        )


def check_supersteps(threads: ThreadsView, record: ThreadRecord, supersteps: list[dict[str, Any]]) -> None:
    """Raises Invalid: the thread names no graph, or an update names no node of it."""
    if "graph_id" not in record.metadata:
        raise Invalid(
            "supersteps: the thread needs a graph to apply them through: set `graph_id` in its metadata",
            status=400,
        )
    if str(record.metadata["graph_id"]) not in threads.assistants.graph_ids():
        raise Invalid(f"supersteps: metadata.graph_id {record.metadata['graph_id']!r} is no graph")
    graph = threads.assistant_of(record).graph
    for step in supersteps:
        for update in step["updates"]:
            if update["as_node"] not in graph.nodes:  # 400, as langgraph-api answers it
                raise Invalid(
                    f"supersteps: as_node {update['as_node']!r} is not a node of the graph", status=400
                )


async def apply_supersteps(
    threads: ThreadsView, record: ThreadRecord, supersteps: list[dict[str, Any]]
) -> None:
    """Apply ``supersteps`` to the new thread ``record`` under its lease, one checkpoint per
    superstep (LangGraph's ``bulk_update_state``); a refusal deletes the thread.

    Raises:
        Invalid: an update does not fit the graph (nothing is left of the thread).
    """
    # Imported here: graph_io imports threads, which imports this module.
    from threadline.runs.graph_io import graph_input

    graph = threads.assistant_of(record).graph
    steps = [
        [
            StateUpdate(
                graph_input({"command": u["command"]}) if u.get("command") else u.get("values"),
                u["as_node"],
            )
            for u in step["updates"]
        ]
        for step in supersteps
    ]
    try:
        async with threads.lease.hold(record.thread_id) as held:
            config = thread_config(record.thread_id, None, held.token)
            config["metadata"] = {OWNER_KEY: record.owner, "graph_id": threads.assistant_of(record).graph_id}
            try:
                await graph.abulk_update_state(config, steps)
            except (ValueError, TypeError, KeyError, InvalidUpdateError) as exc:
                raise Invalid(f"supersteps do not fit the graph: {exc}") from None
            state = await graph.aget_state(thread_config(record.thread_id))
        await threads.records.update_thread(record.thread_id, status=thread_status_of(state))
    except BaseException:
        with contextlib.suppress(Exception):
            await asyncio.shield(threads.delete(record.owner, record.thread_id))
        raise


class ThreadUpkeep:
    """Prune threads, sweep expired ones (every replica, until :meth:`aclose`), and measure a
    thread's storage, through ``threads``."""

    def __init__(self, threads: ThreadsView) -> None:
        self.threads = threads
        self._sweeper: asyncio.Task | None = None

    async def prune(
        self, principal: str, thread_ids: Sequence[str], strategy: str = "delete", strict: bool = False
    ) -> int:
        """Delete the principal's threads among ``thread_ids`` (``delete``), or drop all but
        their latest checkpoint (``keep_latest``); returns how many. Another principal's thread,
        or an unknown one, is skipped as absent; with ``strict`` it is a NotFound, before any is
        pruned.

        Raises:
            Invalid: ``keep_latest`` on a checkpointer that cannot prune.
            NotFound: ``strict`` and a thread is not the principal's (or the request's filter
                excludes it): nothing pruned.
        """
        if strategy == "keep_latest":
            check_prune(self.threads, "strategy")
        mine: list[str] = []
        for thread_id in dict.fromkeys(thread_ids):
            try:
                await self.threads.record(principal, thread_id)
            except NotFound:
                if strict:
                    raise
                continue
            mine.append(thread_id)
        pruned = 0
        for thread_id in mine:
            with contextlib.suppress(NotFound):  # deleted meanwhile
                await self._prune_one(principal, thread_id, strategy)
                pruned += 1
        return pruned

    async def _prune_one(self, principal: str, thread_id: str, strategy: str) -> None:
        if strategy == "delete":
            await self.threads.delete(principal, thread_id)
            return
        async with self.threads.lease.hold(thread_id):
            await self.threads.checkpointer.aprune([thread_id], strategy="keep_latest")

    def start_ttl_sweep(self, seconds: float) -> None:
        """Sweep expired threads every ``seconds`` (jittered ±50 %) until :meth:`aclose`."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(seconds), name="threads-ttl-sweep")

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def _sweep_forever(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds * random.uniform(0.5, 1.5))
            try:
                await self.sweep_expired()
            except Exception as exc:  # the store is away: the next sweep may get through
                log.warning("thread TTL sweep failed", extra={"error": type(exc).__name__})

    async def sweep_expired(self) -> int:
        """Carry out the TTL of every thread due now that this replica claims; returns how
        many. A thread whose TTL was set again meanwhile is indexed at its new time."""
        done = 0
        now = time.time()
        for thread_id in await self.threads.records.expired_threads(now, TTL_SWEEP_BATCH, TTL_RETRY_SECONDS):
            record = await self.threads.records.get_thread(thread_id)
            if record is None or record.ttl is None:
                await self.threads.records.expire_thread(thread_id, None)
                continue
            if (at := epoch(record.ttl["expires_at"])) > now:
                await self.threads.records.expire_thread(thread_id, at)
                continue
            try:
                await self._prune_one(record.owner, thread_id, record.ttl["strategy"])
            except (LeaseBusy, Conflict, NotFound, Invalid) as exc:  # a run holds it: taken again later
                log.info("thread TTL deferred", extra={"thread_id": thread_id, "error": type(exc).__name__})
                continue
            if record.ttl["strategy"] != "delete":  # pruned once: its TTL is spent
                await self.threads.records.update_thread(thread_id, ttl=None)
                await self.threads.records.expire_thread(thread_id, None)
            done += 1
        return done

    # -- storage --

    async def storage(self, principal: str, thread_id: str) -> dict[str, Any]:
        """What the thread's checkpoints occupy, in langgraph-api's ``ThreadStorage`` shape:
        checkpoints (with their metadata), channel values (each version once, per channel) and
        pending writes, in bytes as the saver's serializer encodes them. Reads the history one
        checkpoint at a time.

        Raises:
            NotFound: no such thread of the principal.
        """
        await self.threads.record(principal, thread_id)
        serde = self.threads.checkpointer.serde

        def size(value: Any) -> int:
            return len(serde.dumps_typed(value)[1])

        checkpoints = {"count": 0, "bytes": 0}
        writes = {"count": 0, "bytes": 0}
        by_channel: dict[str, dict[str, int]] = {}
        seen: set[tuple[str, str, Any]] = set()
        async for item in self.threads.checkpointer.alist({"configurable": {"thread_id": thread_id}}):
            checkpoint, ns = item.checkpoint, item.config["configurable"].get("checkpoint_ns", "")
            checkpoints["count"] += 1
            checkpoints["bytes"] += size({k: v for k, v in checkpoint.items() if k != "channel_values"})
            checkpoints["bytes"] += size(item.metadata)
            versions = checkpoint.get("channel_versions", {})
            for channel, value in checkpoint.get("channel_values", {}).items():
                if (key := (ns, channel, versions.get(channel))) in seen:
                    continue
                seen.add(key)
                entry = by_channel.setdefault(channel, {"versions": 0, "bytes": 0})
                entry["versions"] += 1
                entry["bytes"] += size(value)
            for _task, _channel, value in item.pending_writes or []:
                writes["count"] += 1
                writes["bytes"] += size(value)
        channel_bytes = sum(entry["bytes"] for entry in by_channel.values())
        return {
            "thread_id": thread_id,
            "total_bytes": checkpoints["bytes"] + channel_bytes + writes["bytes"],
            "checkpoints": checkpoints,
            "channel_values": {
                "count": sum(entry["versions"] for entry in by_channel.values()),
                "bytes": channel_bytes,
                "by_channel": by_channel,
            },
            "pending_writes": writes,
        }
