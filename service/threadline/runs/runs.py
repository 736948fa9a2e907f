"""Runs of the LangGraph API: created on any replica, executed under the thread's turn lease,
their events in the record store so any replica streams or joins them.

A run's life: :meth:`Runs.create` checks the assistant, the thread and the input, stores the
run (pending, queued on its thread; refused at once with ``multitask_strategy=reject`` when the
thread has an active run) and hands it to this replica's :class:`~threadline.runs.executor.Executor`,
which runs it under the thread's lease and records its end. The rest reads what the records
hold: a run's status, its result (:meth:`Runs.join`), its events as they come
(:meth:`Runs.events`, :meth:`Runs.thread_events`; these in ``following.py``). A cancel
(:meth:`Runs.cancel`) is a request in the store that the run's executor, on whichever replica,
carries out; it is accepted only while the run is active.

Where each stage lives: the executor (attempt, lease, heartbeat, finish, settle) in
``executor.py`` (its takeover sweep in ``takeover.py``), the event log and the SDK's event
shapes in ``events.py``, input and command translation, the graph's stream, one attempt's graph
run, the settling of a stopped run and tool-call repair in ``graph_io.py``, the records in
``records.py`` (with ``records_redis.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import datetime, timedelta
from typing import Any

from threadline.access import Filters
from threadline.checkpoint import delete_for_runs
from threadline.config import QuotaSettings
from threadline.lease import TurnLease
from threadline.quotas import QUEUED_RUNS, QuotaExceeded
from threadline.runs.assistants import ASSISTANT_KWARG, Assistant, Assistants
from threadline.runs.errors import Conflict, Invalid, NotFound
from threadline.runs.executor import SWEEP_SECONDS, Executor
from threadline.runs.following import Following
from threadline.runs.graph_io import AUTH_KWARG, CRON_KWARG, can_delete_for_runs, check_input
from threadline.runs.records import (
    ACTIVE_RUN_STATUSES,
    QueueFull,
    RecordStore,
    RunRecord,
    RunRejected,
    now_iso,
    shown_status,
)
from threadline.runs.thread_checkpoints import thread_config
from threadline.runs.threads import Threads
from threadline.store.tenant import Tenancy

# Run records read per round trip when a run listing filters by status.
RUNS_PAGE = 100


class Runs(Following):
    """Create, join, stream, cancel and list runs; this replica's :class:`Executor` runs them.

    Args:
        threads: the threads layer (owner checks, state).
        assistants: the served graphs.
        records: the record store.
        lease: the turn lease shared with ``/v1`` turns.
        quota: the per-tenant limits a run meets (queued runs per thread, events per run,
            the recursion ceiling; ADR 0006), from the settings.
        heartbeat_seconds, timeout_seconds, sweep_seconds, tenancy: the executor's (see there).
    """

    def __init__(
        self,
        threads: Threads,
        assistants: Assistants,
        records: RecordStore,
        lease: TurnLease,
        quota: QuotaSettings,
        heartbeat_seconds: float = 10.0,
        timeout_seconds: float | None = None,
        sweep_seconds: float = SWEEP_SECONDS,
        tenancy: Tenancy | None = None,
    ) -> None:
        self.threads = threads
        self.assistants = assistants
        self.records = records
        self.executor = Executor(
            threads,
            assistants,
            records,
            lease,
            quota,
            heartbeat_seconds,
            timeout_seconds,
            sweep_seconds,
            tenancy,
        )
        self.quota = self.executor.quota
        self.idle = self.executor.idle  # set while no run executes here; a drain waits on it

    def start_sweep(self) -> None:
        """Start this replica's orphan sweep (stopped by :meth:`aclose`)."""
        self.executor.start_sweep()

    async def sweep(self) -> int:
        """Take over every orphaned run; returns how many this replica took."""
        return await self.executor.sweep()

    async def aclose(self) -> None:
        """Stop the sweep and the executors still running (at shutdown, after the drain)."""
        await self.executor.aclose()

    # -- create --

    async def create(
        self,
        principal: str,
        thread_id: str | None,
        payload: dict[str, Any],
        streamed: bool = False,
        run_id: str | None = None,
        new_thread_id: str | None = None,
    ) -> RunRecord:
        """Store a run and start executing it; returns its record (``pending``).

        ``payload`` holds the body fields of the SDK's ``runs.create/stream/wait`` (already
        type-checked by the API). ``thread_id`` None makes a stateless run on a fresh thread.
        ``streamed``: the caller streams the run's events from its start (``runs.stream``).
        ``run_id`` and ``new_thread_id`` (a stateless run's thread, reused if it exists): ids a
        cron derives from its tick, so a tick fired again after its claimer died is the same run
        (RunExists if it was created meanwhile: nothing stored).

        Raises:
            NotFound: assistant (a UUID), thread (``if_not_exists=reject``) or checkpoint.
            Invalid: an assistant id that is no UUID nor graph id, input that does not fit
                the graph, input and command together.
            Conflict: busy thread with ``multitask_strategy=reject``; ``command.resume`` on a
                thread with no interrupt.
        """
        assistant = await self.assistants.get(principal, payload["assistant_id"])
        payload = self.assistants.run_payload(assistant, payload)
        check_input(assistant, payload)
        if payload.get("multitask_strategy") == "rollback":
            self._check_rollback("multitask_strategy")
        stateless = thread_id is None
        created = False  # a thread made for this run: deleted again if the run is refused
        made_at: str | None = None  # a known thread's created_at: its record is not read
        if stateless:
            thread_id = new_thread_id or str(uuid.uuid4())
            # The run's metadata too, as langgraph-api: what a custom auth handler stamped on the
            # run (its owner) holds for the thread its filter reads.
            metadata = {
                "graph_id": assistant.graph_id,
                "assistant_id": assistant.assistant_id,
                **(payload.get("metadata") or {}),
            }
            # A cron tick's thread, left by a claimer that died before its run: reused, and
            # not deleted should this run be refused (it may hold that claimer's run).
            reused = new_thread_id is not None and await self.threads.exists(thread_id)
            if not reused:
                await self.threads.create(principal, thread_id, metadata)
            created = not reused
        else:
            # A plain run on a thread this replica knows skips reading its record (one round
            # trip of a run's seven): storing the run checks that the thread is still the
            # principal's. Resumes read its state and interrupt/rollback cancel its runs first.
            if (payload.get("multitask_strategy") or "enqueue") not in ("interrupt", "rollback") and not (
                payload.get("command") or payload.get("checkpoint_id") or payload.get("checkpoint")
            ):
                made_at = self.threads.known(principal, thread_id)
            if made_at is None:
                created = await self._thread_for_run(principal, thread_id, payload, assistant)
        try:
            if not stateless:
                await self._check_resume(assistant, thread_id, payload)
            try:
                run = await self._store_run(
                    principal, thread_id, payload, assistant, stateless, streamed, run_id, made_at or ""
                )
            except NotFound as gone:
                if made_at is None or gone.code != "thread_not_found":
                    raise
                # Deleted, or made again, since this replica read it: as a first run would.
                self.threads.forget(thread_id)
                created = await self._thread_for_run(principal, thread_id, payload, assistant)
                run = await self._store_run(
                    principal, thread_id, payload, assistant, stateless, streamed, run_id
                )
        except BaseException:
            if created:  # its quota slot back, no empty thread left behind (issue 18)
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.threads.delete(principal, thread_id))
            raise
        return run

    async def _thread_for_run(
        self, principal: str, thread_id: str, payload: dict[str, Any], assistant: Assistant
    ) -> bool:
        """Read the thread a run is for (made first with ``if_not_exists=create``; returns
        whether it was) and stamp its graph on it.

        Raises:
            NotFound: no such thread of the principal's.
        """
        created = False
        try:
            record = await self.threads.record(principal, thread_id)
        except NotFound:
            if payload.get("if_not_exists") != "create":
                raise
            await self.threads.create(principal, thread_id, dict(payload.get("metadata") or {}))
            created = True
            record = await self.threads.record(principal, thread_id)
        if "graph_id" not in record.metadata:
            record.metadata.update(graph_id=assistant.graph_id, assistant_id=assistant.assistant_id)
            await self.records.update_thread(thread_id, metadata=record.metadata)
        self.threads.remember(record)
        return created

    async def check(self, principal: str, payload: dict[str, Any]) -> None:
        """What :meth:`create` checks of ``payload`` before it stores anything (assistant,
        input), without storing: a batch checks every run so first.

        Raises:
            NotFound, Invalid: as :meth:`create`.
        """
        assistant = await self.assistants.get(principal, payload["assistant_id"])
        check_input(assistant, self.assistants.run_payload(assistant, payload))

    async def _store_run(
        self,
        principal: str,
        thread_id: str,
        payload: dict[str, Any],
        assistant: Assistant,
        stateless: bool,
        streamed: bool,
        run_id: str | None = None,
        thread_made_at: str = "",
    ) -> RunRecord:
        """The second half of :meth:`create`: count, store, start (on the thread made at
        ``thread_made_at``, if not '': see ``create_and_start_run``)."""
        strategy = payload.get("multitask_strategy") or "enqueue"
        # Counted as the run is stored, in its step (one round trip less), unless runs are
        # cancelled for it first: a refused count must come before those cancels.
        deferred = strategy not in ("interrupt", "rollback")
        charge = await self.threads.count_run(principal, thread_id, payload, deferred=deferred)
        now = now_iso()
        run = RunRecord(
            run_id=run_id or str(uuid.uuid4()),
            thread_id=thread_id,
            owner=principal,
            assistant_id=assistant.assistant_id,
            # A delayed run's not-before time, as langgraph-api's (executor.due_in).
            created_at=_later(now, payload.get("after_seconds")),
            updated_at=now,
            status="pending",
            metadata=dict(payload.get("metadata") or {}),
            multitask_strategy=strategy,
            kwargs={k: v for k, v in payload.items() if k not in ("metadata", "assistant_id")}
            | {"stateless": stateless},
        )
        if strategy in ("interrupt", "rollback"):
            # Cancel what runs now; this run queues behind it and starts once it has stopped
            # (and, for rollback, once what it wrote is deleted).
            for other in await self.records.runs_of(thread_id):
                if other.status in ACTIVE_RUN_STATUSES:
                    await self.records.request_cancel(thread_id, other.run_id, strategy)
        try:
            await self.executor.submit(
                run,
                assistant,
                reject_if_busy=strategy == "reject",
                streamed=streamed,
                charge=charge,
                thread_made_at=thread_made_at,
            )
        except (RunRejected, QueueFull, KeyError) as refused:
            with contextlib.suppress(Exception):  # else dropped by the next sweep
                await self.records.forget_active(thread_id, run.run_id)
            if isinstance(refused, RunRejected):
                raise Conflict(
                    "thread_busy", "the thread has a pending or running run (multitask_strategy=reject)"
                ) from None
            if isinstance(refused, QueueFull):
                raise QuotaExceeded(QUEUED_RUNS, self.quota.queued_runs_per_thread) from None
            raise NotFound("thread") from None
        return run

    def _check_rollback(self, field: str) -> None:
        """Raises Invalid: the checkpointer cannot delete a run's checkpoints."""
        if not can_delete_for_runs(self.threads.checkpointer):
            raise Invalid(
                f"{field}: rollback needs a checkpointer that deletes a run's checkpoints "
                "(every CHECKPOINT_BACKEND but redis-stack); use interrupt"
            )

    async def _check_resume(self, assistant: Assistant, thread_id: str, payload: dict[str, Any]) -> None:
        command = payload.get("command") or {}
        if command.get("resume") is None:
            if payload.get("checkpoint_id") or (payload.get("checkpoint") or {}).get("checkpoint_id"):
                checkpoint = payload.get("checkpoint") or {"checkpoint_id": payload["checkpoint_id"]}
                saved = await assistant.graph.checkpointer.aget_tuple(thread_config(thread_id, checkpoint))
                if saved is None:
                    raise NotFound("checkpoint")
            return
        state = await assistant.graph.aget_state(thread_config(thread_id))
        # An update_state on an interrupted thread leaves it at the node (next) without the
        # interrupt itself; a resume then re-enters the node, as on langgraph-api.
        if not state.interrupts and not state.next:
            raise Conflict("no_interrupt", "command.resume: the thread is not waiting at an interrupt")

    # -- read --

    async def get(self, principal: str, thread_id: str, run_id: str) -> RunRecord:
        """Raises NotFound: no such run on a thread of the principal."""
        await self.threads.record(principal, thread_id)
        run = await self.records.get_run(thread_id, run_id)
        if run is None or run.owner != principal:
            raise NotFound("run")
        return run

    async def list(
        self, principal: str, thread_id: str, limit: int = 10, offset: int = 0, status: str | None = None
    ) -> list[RunRecord]:
        await self.threads.record(principal, thread_id)
        if status is None:  # one read of exactly the page (issue 18: limit=1 read all 200 runs)
            return await self.records.runs_of(thread_id, offset, limit)
        found: list[RunRecord] = []
        start, skip = 0, offset
        while len(found) < limit:  # a page of records at a time, however many runs
            page = await self.records.runs_of(thread_id, start, RUNS_PAGE)
            for run in page:
                if shown_status(run) != status:
                    continue
                if skip:
                    skip -= 1
                else:
                    found.append(run)
            if len(page) < RUNS_PAGE:
                break
            start += RUNS_PAGE
        return found[:limit]

    async def cancel(
        self, principal: str, thread_id: str, run_id: str, action: str = "interrupt"
    ) -> RunRecord:
        """Ask the run's executor (on whichever replica) to stop; an ended run is left as is.
        ``action=rollback`` also deletes what the run wrote.

        Raises:
            NotFound: no such run.
            Invalid: rollback on a checkpointer that cannot delete a run's checkpoints.
        """
        if action == "rollback":
            self._check_rollback("action")
        run = await self.get(principal, thread_id, run_id)
        # Refused once the run ended (a race with its end): it is left as it ended.
        if run.status in ACTIVE_RUN_STATUSES and await self.records.request_cancel(thread_id, run_id, action):
            # An orphan has no executor to see the request: take it over here, and the new
            # executor stops it at once.
            await self.executor.adopt_if_orphan(thread_id, run_id)
        return run

    async def cancel_matching(
        self,
        principal: str,
        statuses: tuple[str, ...],
        assistant_id: str | None,
        action: str,
        filters: Filters | None = None,
    ) -> int:
        """Cancel the principal's runs shown in ``statuses`` (of ``assistant_id`` when given) on
        every thread of theirs that ``filters`` let through (``POST /runs/cancel`` without a
        thread): reads at most ``QUOTA_THREADS_PER_PRINCIPAL`` threads' runs. Returns how many.

        Raises:
            NotFound: ``assistant_id`` names no assistant of the principal.
        """
        wanted = (await self.assistants.get(principal, assistant_id)).assistant_id if assistant_id else None
        cancelled = 0
        for thread in await self.records.threads_of(principal, filters):
            for status in statuses:
                for run in await self.list(principal, thread.thread_id, limit=RUNS_PAGE, status=status):
                    if wanted is None or run.assistant_id == wanted:
                        await self.cancel(principal, thread.thread_id, run.run_id, action)
                        cancelled += 1
        return cancelled

    async def delete(self, principal: str, thread_id: str, run_id: str) -> None:
        """The run and what it checkpointed are gone, as on langgraph-api (where the checkpointer
        can delete a run's checkpoints: not ``redis-stack``). Under the thread's lease, so no
        run or turn is half-way through writing the thread.

        Raises:
            Conflict: the run is still pending or running (cancel it first).
            LeaseBusy: another run or turn held the thread past the lease wait.
        """
        run = await self.get(principal, thread_id, run_id)
        if run.status in ACTIVE_RUN_STATUSES:
            raise Conflict("run_active", "the run is pending or running; cancel it first")
        checkpointer = self.threads.checkpointer
        async with self.threads.lease.hold(thread_id):
            if can_delete_for_runs(checkpointer):
                await delete_for_runs(checkpointer, thread_id, [run_id])
            await self.records.delete_run(thread_id, run_id)


def _later(iso: str, seconds: float | None) -> str:
    return (datetime.fromisoformat(iso) + timedelta(seconds=seconds)).isoformat() if seconds else iso


def run_dict(run: RunRecord) -> dict[str, Any]:
    """The API's ``Run``."""
    return {
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "assistant_id": run.assistant_id,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "status": shown_status(run),
        "metadata": run.metadata,
        "multitask_strategy": run.multitask_strategy,
        "kwargs": {
            k: v
            for k, v in run.kwargs.items()
            if k not in ("stateless", AUTH_KWARG, ASSISTANT_KWARG, CRON_KWARG)
        },
        # langgraph-api names the LangSmith project a run traces to; threadline traces nowhere.
        "langsmith_session_name": None,
    }
