"""The record store in this process's memory, for the single-process backends (``memory``,
``sqlite``, ``postgres``): their turn lease is process-local too, so they serve from one
replica, and a run never outlives its process there (ADR 0009). The contract is
:class:`threadline.runs.records.RecordStore`; tests/integration/test_record_stores.py holds
this store and the Redis one to it alike.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from threadline import access
from threadline.access import Filters
from threadline.runs.records import (
    ACTIVE_RUN_STATUSES,
    END_EVENT,
    EVENTS_PAGE,
    FAILED_RUN_STATUSES,
    FINISHED_EVENTS_TTL_SECONDS,
    CancelRequested,
    QueueFull,
    RunEvent,
    RunExists,
    RunRecord,
    RunRejected,
    ThreadRecord,
    now_iso,
)

if TYPE_CHECKING:
    from threadline.lease import HeldLease
    from threadline.quotas import RunCharge


class LocalRecordStore:
    """Records in this process's memory (single-process backends; see the module docstring)."""

    shared = False
    reads_ahead = False

    def __init__(self) -> None:
        self._threads: dict[str, ThreadRecord] = {}
        self._runs: dict[str, dict[str, RunRecord]] = {}  # thread → run id → run, in order
        self._queues: dict[str, list[str]] = {}
        self._events: dict[str, list[RunEvent]] = {}
        self._changed: dict[str, asyncio.Condition] = {}
        self._cancels: dict[str, asyncio.Event] = {}
        self._cancel_actions: dict[str, str] = {}
        # Ended runs whose events are kept, oldest first: (monotonic deadline, run id).
        self._kept: collections.deque[tuple[float, str]] = collections.deque()
        self._expiry: dict[str, float] = {}  # thread → when it expires (epoch seconds)

    async def ping(self) -> None:
        return None

    async def create_thread(self, record: ThreadRecord) -> bool:
        if record.thread_id in self._threads:
            return False
        self._threads[record.thread_id] = replace(record, metadata=dict(record.metadata))
        return True

    async def get_thread(self, thread_id: str, filters: Filters | None = None) -> ThreadRecord | None:
        record = self._threads.get(thread_id)
        if record is None or not access.matches(record.metadata, filters):
            return None
        return replace(record, metadata=dict(record.metadata))

    async def update_thread(self, thread_id: str, **fields: Any) -> None:
        if (record := self._threads.get(thread_id)) is not None:
            self._threads[thread_id] = replace(record, updated_at=now_iso(), **fields)

    async def delete_thread(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)
        self._expiry.pop(thread_id, None)
        self._queues.pop(thread_id, None)
        for run_id in self._runs.pop(thread_id, {}):
            self._events.pop(run_id, None)
            self._changed.pop(run_id, None)
            self._cancels.pop(run_id, None)
            self._cancel_actions.pop(run_id, None)

    async def threads_of(self, owner: str, filters: Filters | None = None) -> list[ThreadRecord]:
        mine = [
            replace(t, metadata=dict(t.metadata))
            for t in self._threads.values()
            if t.owner == owner and access.matches(t.metadata, filters)
        ]
        return sorted(mine, key=lambda t: t.created_at, reverse=True)

    async def expire_thread(self, thread_id: str, at: float | None) -> None:
        if at is None:
            self._expiry.pop(thread_id, None)
        else:
            self._expiry[thread_id] = at

    async def expired_threads(self, now: float, limit: int, retry_seconds: float) -> list[str]:
        due = [thread_id for thread_id, at in self._expiry.items() if at <= now][:limit]
        for thread_id in due:
            self._expiry[thread_id] = now + retry_seconds
        return due

    async def create_and_start_run(
        self,
        run: RunRecord,
        reject_if_busy: bool,
        alive_seconds: float | None = None,
        executor: str = "",
        lease_ms: int = 0,
        event: tuple[str, bytes] = ("", b""),
        max_queued: int = 0,
        token_suffix: str = "",
        charge: RunCharge | None = None,
        thread_made_at: str = "",
    ) -> tuple[bool, str | None]:
        if charge is not None:  # local quotas count on their own (LocalQuotas.run_charge)
            raise ValueError("the local record store takes no RunCharge")
        # The process-local lease is not this store's to take (lease_ms is 0 with it).
        thread = self._threads.get(run.thread_id)
        if thread is None or thread.owner != run.owner or thread_made_at not in ("", thread.created_at):
            raise KeyError(run.thread_id)
        if run.run_id in self._runs.get(run.thread_id, {}):
            raise RunExists(run.run_id)
        queue = self._queues.setdefault(run.thread_id, [])
        if reject_if_busy and queue:
            raise RunRejected(run.thread_id)
        if max_queued and len(queue) >= max_queued:
            raise QueueFull(run.thread_id)
        queue.append(run.run_id)
        self._runs.setdefault(run.thread_id, {})[run.run_id] = run
        self._events[run.run_id] = []
        self._threads[run.thread_id] = replace(thread, status="busy", updated_at=now_iso())
        return queue[0] == run.run_id, None

    async def get_run(self, thread_id: str, run_id: str) -> RunRecord | None:
        run = self._runs.get(thread_id, {}).get(run_id)
        return replace(run) if run else None

    async def runs_of(self, thread_id: str, start: int = 0, count: int | None = None) -> list[RunRecord]:
        newest_first = list(reversed(self._runs.get(thread_id, {}).values()))
        return [replace(r) for r in newest_first[start : None if count is None else start + count]]

    async def runs_since(self, thread_id: str, created_after: str) -> list[RunRecord]:
        after = datetime.fromisoformat(created_after)
        runs = self._runs.get(thread_id, {}).values()
        return [replace(r) for r in runs if datetime.fromisoformat(r.created_at) > after]

    async def first_active_run(self, thread_id: str) -> str | None:
        queue = self._queues.get(thread_id)
        return queue[0] if queue else None

    async def set_run_status(
        self, thread_id: str, run_id: str, status: str, event: tuple[str, bytes] | None = None
    ) -> str | None:
        if (run := self._runs.get(thread_id, {}).get(run_id)) is None:
            raise KeyError(run_id)
        run.status, run.updated_at = status, now_iso()
        return await self.append_event(thread_id, run_id, *event) if event is not None else None

    async def finish_run(
        self,
        thread_id: str,
        run_id: str,
        status: str,
        thread_status: str,
        result: bytes,
        executor: str | None = None,
        unless_cancelled: bool = False,
        *,
        events: Collection[tuple[str, bytes]] | None = None,
        lease: HeldLease | None = None,
        keep_events: bool = False,
    ) -> bool:
        run = self._runs.get(thread_id, {}).get(run_id)
        if run is None or run.status not in ACTIVE_RUN_STATUSES:
            return False  # deleted with its thread, or already ended: left as it is
        if events:
            await self.append_events(thread_id, run_id, events)
        if unless_cancelled and run_id in self._cancel_actions:
            raise CancelRequested(self._cancel_actions[run_id])
        await self.set_run_status(thread_id, run_id, status)
        if status in FAILED_RUN_STATUSES:
            run.result = result
        queue = self._queues.get(thread_id, [])
        with contextlib.suppress(ValueError):
            queue.remove(run_id)
        if not queue:
            await self.update_thread(thread_id, status=thread_status)
        # One process: every joiner of the run has its result from the executor already.
        await self.append_event(thread_id, run_id, END_EVENT, b"")
        for done in (self._changed, self._cancels, self._cancel_actions):
            done.pop(run_id, None)
        now = time.monotonic()
        while self._kept and self._kept[0][0] <= now:
            self._events.pop(self._kept.popleft()[1], None)
        if keep_events:
            self._kept.append((now + FINISHED_EVENTS_TTL_SECONDS, run_id))
        else:
            self._events.pop(run_id, None)
        return True

    async def delete_run(self, thread_id: str, run_id: str) -> None:
        self._runs.get(thread_id, {}).pop(run_id, None)
        self._events.pop(run_id, None)

    def _condition(self, run_id: str) -> asyncio.Condition:
        return self._changed.setdefault(run_id, asyncio.Condition())

    async def append_event(self, thread_id: str, run_id: str, event: str, data: bytes) -> str:
        events = self._events.setdefault(run_id, [])
        entry = RunEvent(f"{len(events) + 1}-0", event, data)
        events.append(entry)
        condition = self._condition(run_id)
        async with condition:
            condition.notify_all()
        return entry.id

    async def append_events(self, thread_id: str, run_id: str, events: list[tuple[str, bytes]]) -> None:
        for event, data in events:
            await self.append_event(thread_id, run_id, event, data)

    async def read_events(
        self, thread_id: str, run_id: str, after: str | None, wait_seconds: float
    ) -> list[RunEvent]:
        start = _local_index(after)
        events = self._events.get(run_id, [])
        if len(events) <= start and wait_seconds > 0:
            condition = self._condition(run_id)
            async with condition:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        condition.wait_for(lambda: len(self._events.get(run_id, [])) > start), wait_seconds
                    )
            events = self._events.get(run_id, [])
        return events[start : start + EVENTS_PAGE]

    async def beat(self, thread_id: str, run_id: str, ttl_seconds: float, executor: str = "") -> bool:
        return True

    async def claim(self, thread_id: str, run_id: str, ttl_seconds: float, executor: str) -> int:
        return 0  # one process: no executor dies without the records

    async def active_runs(self) -> list[tuple[str, str]]:
        return []

    async def forget_active(self, thread_id: str, run_id: str) -> None:
        return None

    async def alive(self, thread_id: str, run_id: str) -> bool:
        # One process: an executor lives exactly as long as the records it would update.
        return True

    async def result(self, thread_id: str, run_id: str, wait_seconds: float) -> bytes | None:
        # One process: a run's joiners are handed its result by its executor. This waits for
        # the end of a run that has none here (never the case but for a moment at its end).
        def ended() -> bool:
            run = self._runs.get(thread_id, {}).get(run_id)
            return run is None or run.status not in ACTIVE_RUN_STATUSES

        if not ended() and wait_seconds > 0:
            condition = self._condition(run_id)
            async with condition:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(condition.wait_for(ended), wait_seconds)
        return None

    async def watch_result(self, thread_id: str, run_id: str, ttl_seconds: float) -> None:
        return None

    async def request_cancel(self, thread_id: str, run_id: str, action: str = "interrupt") -> bool:
        run = self._runs.get(thread_id, {}).get(run_id)
        if run is None or run.status not in ACTIVE_RUN_STATUSES:
            return False
        self._cancel_actions.setdefault(run_id, action)
        run.cancel = self._cancel_actions[run_id]
        self._cancels.setdefault(run_id, asyncio.Event()).set()
        return True

    async def wait_cancel(
        self, thread_id: str, run_id: str, on_watched: Callable[[], None] | None = None
    ) -> str:
        # One process: its executors append every event as it happens (no one to tell).
        await self._cancels.setdefault(run_id, asyncio.Event()).wait()
        return self._cancel_actions.get(run_id, "interrupt")

    async def watch_events(self, thread_id: str, run_id: str, ttl_seconds: float) -> None:
        return None

    async def watch_thread(self, thread_id: str, ttl_seconds: float) -> None:
        return None


def _local_index(after: str | None) -> int:
    """The number of events up to and including id ``after`` (ids are ``<n>-0``)."""
    if not after:
        return 0
    head = after.split("-", 1)[0]
    return int(head) if head.isdigit() else 0
