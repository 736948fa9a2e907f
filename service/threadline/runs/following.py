"""Following runs from any replica: a run's result once it ends (:meth:`Following.join`), its
events as they come (:meth:`Following.events`), and a thread's runs one after another
(:meth:`Following.thread_events`). A part of :class:`threadline.runs.runs.Runs`, which it is
mixed into; a follower of a run executing elsewhere says so in the store, and takes the run
over should its executor be gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from threadline.runs.errors import NotFound
from threadline.runs.graph_io import values_result
from threadline.runs.records import ACTIVE_RUN_STATUSES, END_EVENT, RunEvent, RunRecord, now_iso
from threadline.runs.thread_checkpoints import thread_config

# Between two looks for the next run of a thread whose stream a client follows while it is idle.
THREAD_STREAM_POLL_SECONDS = 0.5
# A client streaming a run that another replica executes says so in the store for this long,
# renewed every third of it; the executor notices within CANCEL_POLL_SECONDS (0.2 s). So does a
# client following a thread's runs, and one waiting for a run's result (once per wait).
WATCH_SECONDS = 10.0
# A joiner (or streamer) of a run executing elsewhere looks again at least this often (the run
# may be an orphan by then); under WATCH_SECONDS, so its announcement never lapses meanwhile.
MAX_JOIN_WAIT_SECONDS = 4.0


class Following:
    """:class:`~threadline.runs.runs.Runs`' reads of runs as they go. Uses its ``get``,
    records, executor, threads and assistants."""

    async def join(self, principal: str, thread_id: str, run_id: str, check: bool = True) -> bytes:
        """Wait for the run to end; its result (final values, ``__interrupt__``, ``__error__``).
        ``check=False`` skips the owner check, for the caller that just created the run.

        A run that had ended before is answered from its thread, as langgraph-api does: its
        values then (and interrupts), or the run's error if it failed (its result is not
        kept: RecordStore.finish_run)."""
        if check:
            await self.get(principal, thread_id, run_id)
        local = self.executor.result(run_id)
        if local is not None:  # executed here: its result arrives without a store read
            # Shielded: a joiner that goes away must not cancel the future of the others.
            result = await asyncio.shield(local)
            if result is not None:
                return result
        while True:
            # Announced before the status is read: a run that ends after this look leaves its
            # result for this joiner; one that ended before it is answered from the thread.
            await self.records.watch_result(thread_id, run_id, WATCH_SECONDS)
            run = await self.records.get_run(thread_id, run_id)
            if run is None:  # its thread was deleted
                raise NotFound("run")
            ended = run.status not in ACTIVE_RUN_STATUSES
            result = await self.records.result(thread_id, run_id, 0 if ended else MAX_JOIN_WAIT_SECONDS)
            if result is not None:
                return result
            if ended:
                return await self._ended_result(run)
            await self.executor.adopt_if_orphan(thread_id, run_id)

    async def _ended_result(self, run: RunRecord) -> bytes:
        """What a join of ``run``, ended before, answers: its error if it failed, else its
        thread's values (and interrupts) now."""
        if run.result is not None:
            return run.result
        state = await self.assistants.graph_of(run).aget_state(thread_config(run.thread_id))
        return values_result(state)

    async def events(
        self,
        principal: str,
        thread_id: str,
        run_id: str,
        after: str | None = None,
        stream_modes: list[str] | None = None,
        check: bool = True,
    ) -> AsyncIterator[RunEvent]:
        """The run's events after id ``after`` (from the first when None) until it ends, as
        they come; only the modes in ``stream_modes`` (and errors) when given: no ``metadata``
        then, as langgraph-api filters a join."""
        if check:
            await self.get(principal, thread_id, run_id)
        wanted = set(stream_modes or ())
        if "messages" in wanted:
            wanted |= {"messages/partial", "messages/complete", "messages/metadata"}
        renew_at = 0.0
        wait = 0.0  # the first look does not block: a stream of an ended run ends at once
        while True:
            renew_at = await self._watch(thread_id, run_id, renew_at)
            events = await self.records.read_events(thread_id, run_id, after, wait)
            if not events:
                run = await self.records.get_run(thread_id, run_id)
                if run is None:  # its thread was deleted
                    return
                if run.status in ACTIVE_RUN_STATUSES:
                    if wait:  # nothing for a whole wait: is its executor still there?
                        await self.executor.adopt_if_orphan(thread_id, run_id)
                    wait = MAX_JOIN_WAIT_SECONDS
                else:
                    # Ended: its events were all written before its status, so one more look
                    # finds what is left; none when ``after`` is past its end (issue 18: such
                    # streams blocked on one read after another, forever).
                    events = await self.records.read_events(thread_id, run_id, after, 0)
                    if not events:
                        return
            for event in events:
                if event.event == END_EVENT:
                    return
                after = event.id
                mode = event.event.split("|", 1)[0]
                if not wanted or mode in wanted or mode == "error":
                    yield event

    async def _watch(self, thread_id: str, run_id: str, renew_at: float) -> float:
        """Tell the run's executor that a client streams it: directly when it runs here, and
        through the store, renewed from ``renew_at`` (monotonic) on — for an executor on
        another replica, or one that takes the run over should this replica die (the client
        then reconnects elsewhere, maybe after the run ended: its events must still be there).
        Returns the next renewal."""
        self.executor.watched(run_id)
        if (now := time.monotonic()) < renew_at:
            return renew_at
        await self.records.watch_events(thread_id, run_id, WATCH_SECONDS)
        return now + WATCH_SECONDS / 3

    async def thread_events(
        self, principal: str, thread_id: str, after: tuple[str, str] | None = None
    ) -> AsyncIterator[tuple[str, RunEvent]]:
        """After checking the thread is the principal's: ``(run id, event)`` of the thread's
        runs as they execute, one run after another (the SDK's ``threads.join_stream``): the run
        active now from its first event (or, with ``after`` = ``(run id, event id)``, after that
        event of that run), then every later run. It never ends by itself: the caller stops when
        its client goes away.

        Raises:
            NotFound: no such thread of the principal.
        """
        await self.threads.record(principal, thread_id)
        return self._follow_thread(principal, thread_id, after)

    async def _keep_watching_thread(self, thread_id: str) -> None:
        """Tell every replica, for as long as this task lives, that a client follows the
        thread's runs: a short run that ends between two looks of the follower keeps its
        events for it."""
        while True:
            with contextlib.suppress(Exception):  # the store is away: the follower sees it too
                await self.records.watch_thread(thread_id, WATCH_SECONDS)
            await asyncio.sleep(WATCH_SECONDS / 3)

    async def _follow_thread(
        self, principal: str, thread_id: str, after: tuple[str, str] | None
    ) -> AsyncIterator[tuple[str, RunEvent]]:
        self.executor.followed_threads[thread_id] += 1
        watching = asyncio.create_task(self._keep_watching_thread(thread_id), name=f"watch-{thread_id}")
        try:
            async for item in self._thread_runs_events(principal, thread_id, after):
                yield item
        finally:
            watching.cancel()
            self.executor.followed_threads[thread_id] -= 1
            if not self.executor.followed_threads[thread_id]:
                del self.executor.followed_threads[thread_id]

    async def _thread_runs_events(
        self, principal: str, thread_id: str, after: tuple[str, str] | None
    ) -> AsyncIterator[tuple[str, RunEvent]]:
        # Runs are found by creation time, not by the queue: a short run may start and end
        # between two looks, and its events are kept for this follower (_follow_thread). Run
        # creation times come from the replicas' clocks (kept in sync by NTP).
        since = now_iso()
        todo: list[RunRecord] = []
        start: str | None = None
        seen: set[str] = set()
        if after is not None and (run := await self.records.get_run(thread_id, after[0])) is not None:
            todo, start = [run], after[1]
        elif (head := await self.records.first_active_run(thread_id)) is not None:
            todo = [run] if (run := await self.records.get_run(thread_id, head)) is not None else []
        while True:
            for run in todo:
                if run.run_id in seen:
                    continue
                seen.add(run.run_id)
                async for event in self.events(principal, thread_id, run.run_id, start, check=False):
                    yield run.run_id, event
                start = None
                if not run.kwargs.get("after_seconds"):  # a delayed run's created_at is ahead
                    since = max(since, run.created_at)
            todo = await self.records.runs_since(thread_id, since)
            if not todo:
                if await self.records.get_thread(thread_id) is None:
                    return  # deleted
                await asyncio.sleep(THREAD_STREAM_POLL_SECONDS)
