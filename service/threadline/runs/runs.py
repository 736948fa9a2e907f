"""Runs of the LangGraph API: created on any replica, executed under the thread's turn lease,
their events in the record store so any replica streams or joins them.

A run's life: :meth:`Runs.create` checks the assistant, the thread and the input, stores the
run (pending, queued on its thread; refused at once with ``multitask_strategy=reject`` when the
thread has an active run) and starts its executor in this process. The executor waits until
its run heads the thread's queue, takes the turn lease (whose fencing token goes to every
checkpoint write, as for ``/v1`` turns), runs the graph and appends every stream part as an
event; at the end it writes the run's status, the thread's status and the result in one step
(:meth:`RecordStore.finish_run`). A cancel request (from any replica) reaches the executor
through the store and cancels the graph run in its task. A cancel is accepted only while the
run is active, and a run that ends on its own after one was accepted (it finished within the
executor's poll for cancels) is cancelled all the same: a client whose cancel was accepted
always sees the run ``interrupted``.

A run outlives its executor (ADR 0010): the executor renews a heartbeat that names it; when the
heartbeat lapses (its replica died, or was paused past its lease), any replica — a sweep runs
on each, and whoever waits for the run — claims the run and executes it again from the
thread's last checkpoint, which the run itself wrote (LangGraph reruns only the unfinished
step). The lease's fencing token keeps a paused executor from writing after that.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessageChunk, ToolMessage, message_chunk_to_message
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command, Send

from threadline import metrics
from threadline.checkpoint import delete_for_runs, store_errors
from threadline.checkpoint.errors import FencedError
from threadline.config import QuotaSettings
from threadline.custom_auth import graph_configurable
from threadline.lease import HeldLease, LeaseBusy, TurnLease
from threadline.quotas import EVENTS_PER_RUN, QUEUED_RUNS, QuotaExceeded
from threadline.runs import wire
from threadline.runs.assistants import Assistant, Assistants, input_keys
from threadline.runs.errors import Conflict, Invalid, NotFound
from threadline.runs.protocol import PROTOCOL_KWARG, PROTOCOL_V2
from threadline.runs.records import (
    ACTIVE_RUN_STATUSES,
    END_EVENT,
    CancelRequested,
    QueueFull,
    RecordStore,
    RunEvent,
    RunRecord,
    RunRejected,
    now_iso,
    shown_status,
)
from threadline.runs.threads import OWNER_KEY, Threads, thread_config

# Run records read per round trip when a run listing filters by status.
RUNS_PAGE = 100

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# Stream modes a client may ask for; "messages-tuple" and "messages" both come from LangGraph's
# "messages" mode, "events" from astream_events.
STREAM_MODES = (
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "custom",
    "debug",
    "events",
    "checkpoints",
    "tasks",
)
# Between two looks at the thread's queue while an enqueued run waits its turn.
QUEUE_POLL_SECONDS = 0.05
# Between two looks for the next run of a thread whose stream a client follows while it is idle.
THREAD_STREAM_POLL_SECONDS = 0.5
# A stateless run's thread is deleted this long after the run ends, so its creator can still
# read the result; should this process die first, the records' TTL collects it.
STATELESS_GRACE_SECONDS = 60.0
# Between two orphan sweeps of a replica (jittered ±50 %): a dead executor's run is taken over
# within heartbeat TTL + this, the lease expiring at the same time (target: lease + 1 s).
SWEEP_SECONDS = 0.5
# First wait before a run whose store failed runs again (doubling up to 1 s): a Redis restart
# with AOF takes ~0.3 s here.
STORE_RETRY_SECONDS = 0.1
# The result a tool call gets when its run was stopped before the tool answered.
STOPPED_TOOL_RESULT = "error: the run was stopped before this tool call returned a result"
# ... at most this many times in a row (about a minute), then the run ends as an error.
STORE_RETRIES = 60
# A run's events reach the store at most this long after they happen while a client streams
# it, every event of that window in one round trip, and the last ones with the run's end
# (FINISH_RUN). A client streaming the run sees them this much later, where a token of a model
# takes 20-50 ms.
EVENT_FLUSH_SECONDS = 0.005
# ... and this long after, while no client streams it: most runs end sooner, and their events
# go with their end. Appending them mid-run cost ~0.5 ms of CPU per run in make bench-api at
# concurrency 32 (runs take ~200 ms there, so every step's events went in a round trip of
# their own), where nobody reads them. The bound: what a killed replica loses, and a run's
# events held in memory.
EVENT_QUIET_FLUSH_SECONDS = 1.0
# A client streaming a run that another replica executes says so in the store for this long,
# renewed every third of it; the executor notices within CANCEL_POLL_SECONDS (0.2 s). So does a
# client following a thread's runs, and one waiting for a run's result (once per wait).
WATCH_SECONDS = 10.0
# A joiner (or streamer) of a run executing elsewhere looks again at least this often (the run
# may be an orphan by then); under WATCH_SECONDS, so its announcement never lapses meanwhile.
MAX_JOIN_WAIT_SECONDS = 4.0


# The run kwarg holding the caller's user and permissions (custom_auth.Caller.as_json), kept
# with the run so whichever replica executes it hands the graph the same user.
AUTH_KWARG = "langgraph_auth"


def _store_failures() -> tuple[type[Exception], ...]:
    """A store failing right now (:func:`threadline.checkpoint.store_errors`, of the backends
    loaded by now); not the builtin ConnectionError / TimeoutError that a graph's own code
    raises (a model provider timing out), which end the run as an error."""
    return tuple(e for e in store_errors() if e not in (ConnectionError, TimeoutError))


async def _through_store_failures(run: RunRecord, doing: str, attempt: Callable[[int], Awaitable[_T]]) -> _T:
    """``attempt(retry)`` until it returns, waiting out a failing store (Redis restarting)
    with back-off from STORE_RETRY_SECONDS up to 1 s, at most STORE_RETRIES times."""
    backoff = STORE_RETRY_SECONDS
    for retry in range(STORE_RETRIES):
        try:
            return await attempt(retry)
        except _store_failures() as exc:
            log.warning(f"store failed {doing}", extra={"run_id": run.run_id, "error": type(exc).__name__})
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
    return await attempt(STORE_RETRIES)


class TooManyEvents(RuntimeError):
    """The run emitted MAX_EVENTS_PER_RUN events: it ends as an error (its ``error`` event
    names the setting: a RuntimeError's message is shown), what it checkpointed stays."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the run emitted more than {EVENTS_PER_RUN}={limit} events")


class _GiveUp(Exception):
    """This executor no longer owns its run (taken over, or fenced off the thread): stop
    without recording an end; the run's owner finishes it."""


class _RunGone(Exception):
    """The run was deleted (with its thread) before it started."""


class Runs:
    """Create, execute, join, stream, cancel and list runs.

    Args:
        threads: the threads layer (owner checks, state).
        assistants: the served graphs.
        records: the record store.
        lease: the turn lease shared with ``/v1`` turns.
        quota: the per-tenant limits a run meets (queued runs per thread, events per run,
            the recursion ceiling; ADR 0006).
    """

    def __init__(
        self,
        threads: Threads,
        assistants: Assistants,
        records: RecordStore,
        lease: TurnLease,
        heartbeat_seconds: float = 10.0,
        timeout_seconds: float | None = None,
        sweep_seconds: float = SWEEP_SECONDS,
        quota: QuotaSettings | None = None,
    ) -> None:
        self.quota = quota or QuotaSettings()
        self.heartbeat_seconds = heartbeat_seconds
        self.sweep_seconds = sweep_seconds
        self._sweeper: asyncio.Task | None = None
        self.timeout_seconds = timeout_seconds
        self.threads = threads
        self.assistants = assistants
        self.records = records
        self.lease = lease
        self._tasks: set[asyncio.Task] = set()
        # Results of the runs executing in this process, once recorded (None: read the store).
        self._results: dict[str, asyncio.Future[bytes | None]] = {}
        # Event logs of the runs executing in this process: a client streaming one makes it live.
        self._logs: dict[str, _EventLog] = {}
        # Clients following a thread's runs here (threads.join_stream), by thread.
        self._thread_watchers: collections.Counter[str] = collections.Counter()
        self.idle = asyncio.Event()
        self.idle.set()

    # -- create --

    async def create(
        self, principal: str, thread_id: str | None, payload: dict[str, Any], streamed: bool = False
    ) -> RunRecord:
        """Store a run and start executing it; returns its record (``pending``).

        ``payload`` holds the body fields of the SDK's ``runs.create/stream/wait`` (already
        type-checked by the API). ``thread_id`` None makes a stateless run on a fresh thread.
        ``streamed``: the caller streams the run's events from its start (``runs.stream``).

        Raises:
            NotFound: assistant (a UUID), thread (``if_not_exists=reject``) or checkpoint.
            Invalid: an assistant id that is no UUID nor graph id, input that does not fit
                the graph, input and command together.
            Conflict: busy thread with ``multitask_strategy=reject``; ``command.resume`` on a
                thread with no interrupt.
        """
        assistant = self.assistants.get(payload["assistant_id"])
        _check_input(assistant, payload)
        if payload.get("multitask_strategy") == "rollback":
            self._check_rollback("multitask_strategy")
        stateless = thread_id is None
        created = False  # a thread made for this run: deleted again if the run is refused
        if stateless:
            thread_id = str(uuid.uuid4())
            # The run's metadata too, as langgraph-api: what a custom auth handler stamped on the
            # run (its owner) holds for the thread its filter reads.
            metadata = {
                "graph_id": assistant.graph_id,
                "assistant_id": assistant.assistant_id,
                **(payload.get("metadata") or {}),
            }
            await self.threads.create(principal, thread_id, metadata)
            created = True
        else:
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
        try:
            if not stateless:
                await self._check_resume(assistant, thread_id, payload)
            run = await self._store_run(principal, thread_id, payload, assistant, stateless, streamed)
        except BaseException:
            if created:  # its quota slot back, no empty thread left behind (issue 18)
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.threads.delete(principal, thread_id))
            raise
        return run

    async def _store_run(
        self,
        principal: str,
        thread_id: str,
        payload: dict[str, Any],
        assistant: Assistant,
        stateless: bool,
        streamed: bool,
    ) -> RunRecord:
        """The second half of :meth:`create`: count, store, start."""
        await self.threads.count_run(principal, thread_id, payload)
        strategy = payload.get("multitask_strategy") or "enqueue"
        now = now_iso()
        run = RunRecord(
            run_id=str(uuid.uuid4()),
            thread_id=thread_id,
            owner=principal,
            assistant_id=assistant.assistant_id,
            created_at=now,
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
        executor = uuid.uuid4().hex
        try:
            # Alive as it is queued, its heartbeat naming its executor: nobody may take it for
            # an orphan before its executor starts. On an idle thread it also takes the turn
            # lease and starts running, in the same round trip.
            first, token = await self.records.create_and_start_run(
                run,
                reject_if_busy=strategy == "reject",
                alive_seconds=self.heartbeat_seconds,
                executor=executor,
                lease_ms=self.lease.lease_ms,
                event=("metadata", wire.dumps({"run_id": run.run_id, "attempt": 1})),
                max_queued=self.quota.queued_runs_per_thread,
            )
        except RunRejected:
            with contextlib.suppress(Exception):  # else dropped by the next sweep
                await self.records.forget_active(thread_id, run.run_id)
            raise Conflict(
                "thread_busy", "the thread has a pending or running run (multitask_strategy=reject)"
            ) from None
        except QueueFull:
            with contextlib.suppress(Exception):
                await self.records.forget_active(thread_id, run.run_id)
            raise QuotaExceeded(QUEUED_RUNS, self.quota.queued_runs_per_thread) from None
        except KeyError:
            with contextlib.suppress(Exception):
                await self.records.forget_active(thread_id, run.run_id)
            raise NotFound("thread") from None
        self._start(run, assistant, executor, 1, first=first, token=token, streamed=streamed)
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

    # -- execute --

    def _start(
        self,
        run: RunRecord,
        assistant: Assistant,
        executor: str,
        attempt: int,
        first: bool = False,
        token: str | None = None,
        streamed: bool = False,
    ) -> None:
        turn = _Turn(_EventLog(self.records, run, watched=streamed), token)
        self._logs[run.run_id] = turn.events
        task = asyncio.create_task(
            self._execute(run, assistant, executor, attempt, turn, first), name=f"run-{run.run_id}-{attempt}"
        )
        self._tasks.add(task)
        # One future per executor: a run taken over here from an executor of this process
        # (fenced off, or its store failed) gets a fresh one, and the older one's joiners are
        # sent to the store when it stops.
        result = self._results[run.run_id] = asyncio.get_running_loop().create_future()
        self.idle.clear()

        def done(t: asyncio.Task) -> None:
            self._tasks.discard(t)
            if self._results.get(run.run_id) is result:
                del self._results[run.run_id]
            if self._logs.get(run.run_id) is turn.events:
                del self._logs[run.run_id]
            if not result.done():
                result.set_result(None)  # ended without recording: joiners read the store
            if not self._tasks:
                self.idle.set()

        task.add_done_callback(done)

    async def _execute(
        self,
        run: RunRecord,
        assistant: Assistant,
        executor: str,
        attempt: int,
        turn: _Turn,
        first: bool = False,
    ) -> None:
        """Run to the end or until cancelled; finishes the run's records unless the run was
        taken over by another executor (or is left for one: this process is stopping)."""
        body = asyncio.create_task(
            self._run_in_turn(run, assistant, attempt, turn, first), name=f"run-body-{run.run_id}"
        )
        cancel = asyncio.create_task(self._wait_cancel(run, turn.events))
        heart = asyncio.create_task(self._keep_beating(run, executor))
        status, thread_status, result = "error", "error", wire.dumps({"__error__": {"error": "Unknown"}})
        finish = True
        try:
            await asyncio.wait({body, cancel, heart}, return_when=asyncio.FIRST_COMPLETED)
            if not body.done():
                body.cancel()
                with contextlib.suppress(asyncio.CancelledError, _GiveUp, _RunGone):
                    await body
                if heart.done():  # another executor holds the run now
                    raise _GiveUp(run.run_id)
                status, thread_status, result = await self._cancelled(run, assistant, cancel.result(), turn)
            else:
                status, thread_status, result = body.result()
                try:
                    # Ended on its own, unless a cancel was accepted meanwhile (within the last
                    # poll of its end): an accepted cancel always wins.
                    await asyncio.shield(
                        self._finish(
                            run, status, thread_status, result, executor, unless_cancelled=True, turn=turn
                        )
                    )
                    finish = False
                except CancelRequested as request:
                    status, thread_status, result = await self._cancelled(
                        run, assistant, request.action, turn
                    )
        except _RunGone:  # deleted with its thread: nothing to record
            finish = False
        except _GiveUp:
            # Taken over, or fenced off the thread (paused, or a stalled event loop missed its
            # lease renewals): nothing to record here, not even its last events (the run's
            # owner streams from its checkpoint on). In the second case the heartbeat is still
            # ours: let it lapse now, so a sweep takes the run over in <= 0.5 s instead of a TTL.
            finish = False
            turn.events.drop()
            if not heart.done():
                with contextlib.suppress(Exception):
                    await self.records.beat(run.thread_id, run.run_id, 0.001, executor)
        except asyncio.CancelledError:  # this process is stopping
            body.cancel()
            if self.records.shared:
                # Handed over: the heartbeat lapses now instead of in a TTL, and the next sweep
                # (on another replica) finishes the run from its last checkpoint; the events so
                # far go first.
                finish = False
                with contextlib.suppress(Exception):
                    await asyncio.shield(turn.events.flush())
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.records.beat(run.thread_id, run.run_id, 0.001, executor))
            else:
                status = "interrupted"
                thread_status, result = (
                    "idle",
                    wire.dumps({"__error__": {"error": "Cancelled", "message": "the replica stopped"}}),
                )
            raise
        except Exception as exc:
            # Never the body's own status: after a body that ended well this is a cancel that
            # could not be carried out, and a "success" would deny it.
            log.exception("run failed outside the graph", extra={"run_id": run.run_id})
            error = wire.error_body(exc)
            turn.events.add("error", error, check=False)
            status, thread_status, result = "error", "error", wire.dumps({"__error__": error})
        finally:
            cancel.cancel()
            heart.cancel()
            if finish:
                # Shielded: the records must say the run ended even when this task is cancelled.
                await asyncio.shield(self._finish(run, status, thread_status, result, executor, turn=turn))
            # A lease no end released (not recorded, or the store failed): released here.
            await asyncio.shield(self._let_go(run, turn))

    async def _let_go(self, run: RunRecord, turn: _Turn) -> None:
        """Release what the attempt still holds of the thread's lease: a lease taken with the
        run that its body never held (cancelled before it started), or a lease handed off by
        the body that no :meth:`_finish` released."""
        if turn.token is not None:
            token, turn.token = turn.token, None
            await self.lease.release(HeldLease(run.thread_id, token))
        if turn.held is not None and turn.held.handed_off and not turn.held.released:
            await self.lease.release(turn.held)

    async def _wait_cancel(self, run: RunRecord, events: _EventLog) -> str:
        """The run's cancel action, once requested; a store that fails meanwhile (Redis
        restarting) is waited out rather than taken for a cancel. Meanwhile, a client streaming
        the run from another replica makes its events go to the store as they happen."""
        on_watched = None if events.live else events.go_live
        while True:
            try:
                return await self.records.wait_cancel(run.thread_id, run.run_id, on_watched)
            except _store_failures():
                await asyncio.sleep(STORE_RETRY_SECONDS)

    async def _keep_beating(self, run: RunRecord, executor: str) -> None:
        """Renew the run's heartbeat every third of its TTL while this executor lives; returns
        when another executor took the run over. A run whose heartbeat lapses is an orphan
        (its replica died) and is taken over by a sweep or by whoever waits for it
        (:meth:`_adopt_if_orphan`)."""
        while True:
            await asyncio.sleep(self.heartbeat_seconds / 3)
            try:
                if not await self.records.beat(run.thread_id, run.run_id, self.heartbeat_seconds, executor):
                    log.warning("run taken over by another replica", extra={"run_id": run.run_id})
                    return
            except Exception as exc:  # the store is away: the next beat may get through
                log.warning("run heartbeat failed", extra={"run_id": run.run_id, "error": type(exc).__name__})

    async def _adopt_if_orphan(self, thread_id: str, run_id: str) -> bool:
        """Take over a pending or running run whose executor is gone and execute it here from
        its last checkpoint; True if this replica took it.

        Any replica may try (the sweep, a waiter on the thread's queue, a joiner): the claim is
        atomic, so exactly one executor owns the run at a time.
        """
        if await self.records.alive(thread_id, run_id):
            return False
        executor = uuid.uuid4().hex
        attempt = await self.records.claim(thread_id, run_id, self.heartbeat_seconds, executor)
        run = await self.records.get_run(thread_id, run_id)
        if not attempt:
            if run is None or run.status not in ACTIVE_RUN_STATUSES:
                await self.records.forget_active(thread_id, run_id)
            return False
        if run is None:  # deleted meanwhile
            return False
        log.warning(
            "taking over a run whose replica stopped",
            extra={"run_id": run_id, "thread_id": thread_id, "attempt": attempt},
        )
        metrics.RUN_TAKEOVERS.inc()
        try:
            assistant = self.assistants.get(run.assistant_id)
        except NotFound:  # this replica does not serve the run's graph (a mixed rollout)
            error = {"error": "GraphNotFound", "message": f"graph {run.assistant_id!r} is not served"}
            events = [("error", wire.dumps(error))]
            await self._finish(
                run, "error", "error", wire.dumps({"__error__": error}), executor, events=events
            )
            return True
        self._start(run, assistant, executor, attempt)
        return True

    def start_sweep(self) -> None:
        """Start this replica's orphan sweep (stopped by :meth:`aclose`)."""
        if self._sweeper is None and self.records.shared:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="runs-sweep")

    async def _sweep_forever(self) -> None:
        while True:
            # Jittered, so the replicas' sweeps spread out instead of racing for the same claim.
            await asyncio.sleep(self.sweep_seconds * random.uniform(0.5, 1.5))
            try:
                await self.sweep()
            except Exception as exc:  # the store is away: the next sweep may get through
                log.warning("run sweep failed", extra={"error": type(exc).__name__})

    async def sweep(self) -> int:
        """Take over every orphaned run (one whose executor stopped); returns how many this
        replica took. Ended runs are dropped from the active index on the way."""
        taken = 0
        for thread_id, run_id in await self.records.active_runs():
            if await self._adopt_if_orphan(thread_id, run_id):
                taken += 1
        return taken

    async def _finish(
        self,
        run: RunRecord,
        status: str,
        thread_status: str,
        result: bytes,
        executor: str,
        unless_cancelled: bool = False,
        turn: _Turn | None = None,
        events: list[tuple[str, bytes]] | None = None,
    ) -> bool:
        """Record the run's end, with the attempt's events not appended yet (or ``events``) and
        the release of its lease (``turn``); False if another executor holds it or the store
        failed.

        Raises:
            CancelRequested: ``unless_cancelled`` and a cancel was accepted for the run.
        """
        try:
            if turn is not None:
                events = await turn.events.take()
            finished = await self.records.finish_run(
                run.thread_id,
                run.run_id,
                status,
                thread_status,
                result,
                executor,
                unless_cancelled,
                events=events,
                lease=turn.held if turn is not None else None,
                keep_events=self._events_wanted(run, turn),
            )
        except CancelRequested:
            raise
        except Exception as exc:  # the store is away: the heartbeat lapses, and a sweep reruns it
            log.warning(
                "could not record the end of a run", extra={"run_id": run.run_id, "error": type(exc).__name__}
            )
            return False
        if not finished:
            return False
        metrics.RUNS.labels(status).inc()
        # Recorded: a joiner in this process has the result without asking the store.
        if (local := self._results.get(run.run_id)) is not None and not local.done():
            local.set_result(result)
        if run.kwargs.get("stateless") and run.kwargs.get("on_completion", "delete") == "delete":
            asyncio.get_running_loop().call_later(
                STATELESS_GRACE_SECONDS,
                lambda: asyncio.ensure_future(self._drop_thread(run.owner, run.thread_id)),
            )
        return True

    def _events_wanted(self, run: RunRecord, turn: _Turn | None) -> bool:
        """Whether a client can still ask for the events of ``run`` once it ended: it was
        created ``stream_resumable`` or through the v2 protocol (whose stream replays a thread's
        runs), or a client here streams it or its thread. (The store also asks the other
        replicas' clients: RecordStore.finish_run.)"""
        return bool(
            run.kwargs.get("stream_resumable")
            or run.kwargs.get(PROTOCOL_KWARG) == PROTOCOL_V2
            or (turn is not None and turn.events.watched)
            or self._thread_watchers[run.thread_id]
        )

    async def _drop_thread(self, owner: str, thread_id: str) -> None:
        with contextlib.suppress(Exception):
            await self.threads.delete(owner, thread_id)

    async def _cancelled(
        self, run: RunRecord, assistant: Assistant, action: str, turn: _Turn
    ) -> tuple[str, str, bytes]:
        """Settle a stopped run and return its end as langgraph-api 0.16 records one: the run
        ``interrupted`` with no ``error`` event (a cancel is not a failure: the JS SDK's
        ``runs.wait`` would throw and ``useStream`` call ``onError``), its result the thread's
        values (what ``join``/``wait`` answer), the thread ``interrupted`` when its state has
        a next step (stopped mid-run) and ``idle`` when not (rolled back, or stopped at the end)."""

        async def settle(_retry: int) -> Any:
            await self._settle(run, assistant, action)
            return await assistant.graph.aget_state(thread_config(run.thread_id))

        # A Redis restart is waited out, as in a run's own steps: recording the run's end
        # meanwhile would contradict the accepted cancel.
        state = await _through_store_failures(run, "settling a cancelled run; trying again", settle)
        return "interrupted", "interrupted" if state.next else "idle", _values_result(state)

    async def _settle(self, run: RunRecord, assistant: Assistant, action: str) -> None:
        """Leave the thread of a stopped run in a state the next run can continue, under the
        thread's lease (no other run or turn writes meanwhile): ``rollback`` deletes every
        checkpoint and pending write the run wrote (the thread is as before the run);
        ``interrupt`` keeps what it checkpointed and closes the tool calls it left open."""
        while True:
            try:
                async with self.lease.hold(run.thread_id) as held:
                    if action == "rollback":
                        await delete_for_runs(self.threads.checkpointer, run.thread_id, [run.run_id])
                    else:
                        await close_open_tool_calls(assistant.graph, run.thread_id, held.token)
                    return
            except LeaseBusy:
                continue  # its dead or paused executor's lease: wait until it expires

    async def _run_in_turn(
        self, run: RunRecord, assistant: Assistant, attempt: int, turn: _Turn, first: bool = False
    ) -> tuple[str, str, bytes]:
        """Wait for the run's turn (head of the queue, then the lease), run it, and return
        ``(run status, thread status, result)``. ``first``: it headed the queue when created
        (only its own end takes it off), so the queue is not read again. A store that fails
        meanwhile (Redis restarting) does not fail the run: it runs again from its last
        checkpoint once the store answers."""
        return await _through_store_failures(
            run,
            "mid-run; running it again from its last checkpoint",
            # After a store failure the queue is read again (the run may be gone).
            lambda retry: self._run_when_first(run, assistant, attempt + retry, turn, first and retry == 0),
        )

    async def _run_when_first(
        self, run: RunRecord, assistant: Assistant, attempt: int, turn: _Turn, first: bool = False
    ) -> tuple[str, str, bytes]:
        delay = QUEUE_POLL_SECONDS
        while not first and (head := await self.records.first_active_run(run.thread_id)) != run.run_id:
            if head is None:  # deleted meanwhile (its thread was deleted)
                raise _RunGone(run.run_id)
            if await self._adopt_if_orphan(run.thread_id, head):
                delay = QUEUE_POLL_SECONDS
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        while True:
            # Taken with the run (create_and_start_run), which is "running" with its first
            # event already; adopted before the first await, so _let_go knows it is held here.
            token, turn.token = turn.token, None
            try:
                # Handed off at the end: FINISH_RUN releases it (one round trip less).
                async with self.lease.hold(run.thread_id, acquired=token, hand_off=True) as held:
                    turn.held = held
                    if token is None:
                        # "running" and the run's first event in one step; a run deleted with
                        # its thread meanwhile is not run (its checkpoints would come back).
                        metadata = wire.dumps({"run_id": run.run_id, "attempt": attempt})
                        try:
                            await self.records.set_run_status(
                                run.thread_id, run.run_id, "running", ("metadata", metadata)
                            )
                        except KeyError:
                            raise _RunGone(run.run_id) from None
                    return await self._run_graph(run, assistant, held, attempt, turn.events)
            except LeaseBusy:
                continue  # a /v1 turn on this thread: wait for it

    async def _run_graph(
        self, run: RunRecord, assistant: Assistant, held: HeldLease, attempt: int, events: _EventLog
    ) -> tuple[str, str, bytes]:
        kwargs = run.kwargs
        graph = assistant.graph
        graph_input = _graph_input(kwargs)
        resumed = False
        if attempt > 1:
            # Taken over: if the run got as far as writing a checkpoint, it goes on from the
            # thread's last one (its own; runs of a thread are serial), LangGraph reusing the
            # writes of the steps that completed. Else it starts over from its input.
            latest = await graph.checkpointer.aget_tuple(thread_config(run.thread_id))
            resumed = latest is not None and (latest.metadata or {}).get("run_id") == run.run_id
            if resumed:
                graph_input = None
        config = _run_config(run, assistant, held.token, from_latest=resumed)
        if ceiling := self.quota.max_recursion_limit:  # MAX_RECURSION_LIMIT: lower is kept
            config["recursion_limit"] = min(int(config.get("recursion_limit") or ceiling), ceiling)
        requested = list(kwargs.get("stream_mode") or ["values"])
        emit = _Emitter(events, requested, self.quota.max_events_per_run)  # "metadata" went with "running"
        deadline = asyncio.timeout(self.timeout_seconds)
        try:
            try:
                async with deadline:
                    async for part in _stream(graph, graph_input, config, kwargs, requested):
                        if held.lost.is_set():
                            raise FencedError(run.thread_id)
                        await emit.part(*part)
            except TimeoutError:
                if not deadline.expired():
                    raise  # the graph's own TimeoutError: an error like any other
                # Ran longer than allowed: stopped like a cancel (what was checkpointed stays).
                error = {
                    "error": "TimeoutError",
                    "message": f"the run took longer than {self.timeout_seconds:g} s",
                }
                await emit("error", error)
                await close_open_tool_calls(graph, run.thread_id, held.token)
                return (
                    "timeout",
                    "interrupted" if emit.interrupts else "idle",
                    wire.dumps({"__error__": error}),
                )
        except FencedError:
            # Paused or cut off past the lease: another executor takes the run over (or
            # already did) from what was checkpointed; nothing more is stored from here.
            log.warning("run lost its thread's lease; leaving it to a takeover", extra={"run_id": run.run_id})
            raise _GiveUp(run.run_id) from None
        except (asyncio.CancelledError, *_store_failures()):
            raise
        except Exception as exc:
            log.warning(
                "run raised", extra={"run_id": run.run_id, "error": type(exc).__name__}, exc_info=True
            )
            error = wire.error_body(exc)
            await emit("error", error)
            return "error", "error", wire.dumps({"__error__": error})
        if emit.last_values is None:  # no step ran: nothing streamed, read what is stored
            state = await graph.aget_state(thread_config(run.thread_id))
            values, interrupts, paused = state.values, list(state.interrupts), bool(state.next)
        else:
            # The stream already said it all: the last values, and an "__interrupt__" update at
            # an interrupt or a breakpoint (empty then). Saves a state read per run.
            values, interrupts, paused = emit.last_values, emit.interrupts, emit.paused
        result = dict(values) if isinstance(values, dict) else {"__root__": values}
        if interrupts:
            result["__interrupt__"] = [wire.interrupt_dict(i) for i in interrupts]
        return "success", "interrupted" if paused or interrupts else "idle", wire.dumps(result)

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

    async def join(self, principal: str, thread_id: str, run_id: str, check: bool = True) -> bytes:
        """Wait for the run to end; its result (final values, ``__interrupt__``, ``__error__``).
        ``check=False`` skips the owner check, for the caller that just created the run.

        A run that had ended before is answered from its thread, as langgraph-api does: its
        values then (and interrupts), or the run's error if it failed (its result is not
        kept: RecordStore.finish_run)."""
        if check:
            await self.get(principal, thread_id, run_id)
        local = self._results.get(run_id)
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
            await self._adopt_if_orphan(thread_id, run_id)

    async def _ended_result(self, run: RunRecord) -> bytes:
        """What a join of ``run``, ended before, answers: its error if it failed, else its
        thread's values (and interrupts) now."""
        if run.result is not None:
            return run.result
        state = await self.assistants.get(run.assistant_id).graph.aget_state(thread_config(run.thread_id))
        return _values_result(state)

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
                        await self._adopt_if_orphan(thread_id, run_id)
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
        if (log := self._logs.get(run_id)) is not None:
            log.go_live()
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
        self._thread_watchers[thread_id] += 1
        watching = asyncio.create_task(self._keep_watching_thread(thread_id), name=f"watch-{thread_id}")
        try:
            async for item in self._thread_runs_events(principal, thread_id, after):
                yield item
        finally:
            watching.cancel()
            self._thread_watchers[thread_id] -= 1
            if not self._thread_watchers[thread_id]:
                del self._thread_watchers[thread_id]

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
                start, since = None, max(since, run.created_at)
            todo = await self.records.runs_since(thread_id, since)
            if not todo:
                if await self.records.get_thread(thread_id) is None:
                    return  # deleted
                await asyncio.sleep(THREAD_STREAM_POLL_SECONDS)

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
            await self._adopt_if_orphan(thread_id, run_id)
        return run

    async def delete(self, principal: str, thread_id: str, run_id: str) -> None:
        """Raises Conflict: the run is still pending or running (cancel it first)."""
        run = await self.get(principal, thread_id, run_id)
        if run.status in ACTIVE_RUN_STATUSES:
            raise Conflict("run_active", "the run is pending or running; cancel it first")
        await self.records.delete_run(thread_id, run_id)

    async def aclose(self) -> None:
        """Stop the sweep and cancel the executors still running (at shutdown, after the
        drain); with shared records their runs are handed over to the other replicas."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)


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
        "kwargs": {k: v for k, v in run.kwargs.items() if k not in ("stateless", AUTH_KWARG)},
    }


def _check_input(assistant: Assistant, payload: dict[str, Any]) -> None:
    # interrupt_before/after naming a node the graph lacks are not refused: langgraph-api runs
    # them (the name never matches, so the run does not stop there), and clients rely on it.
    graph_input, command = payload.get("input"), payload.get("command")
    if graph_input is not None and command is not None:
        raise Invalid("send either input or command, not both")
    if graph_input is None:
        return
    channels = input_keys(assistant.graph)
    if channels is None:
        return  # a graph whose input is one value: any JSON value fits
    if not isinstance(graph_input, dict):
        raise Invalid(f"input: graph {assistant.graph_id!r} takes an object with keys {sorted(channels)}")
    unknown = sorted(set(graph_input) - set(channels))
    if unknown:
        graph_id = assistant.graph_id
        raise Invalid(
            f"input: {unknown} are not input keys of graph {graph_id!r} (it takes {sorted(channels)})"
        )


def _graph_input(kwargs: dict[str, Any]) -> Any:
    command = kwargs.get("command")
    if not command:
        return kwargs.get("input")
    goto = command.get("goto")
    if goto is not None and not isinstance(goto, list):
        goto = [goto]
    update = command.get("update")
    if isinstance(update, list) and all(isinstance(u, list) and len(u) == 2 for u in update):
        update = [tuple(u) for u in update]
    return Command(
        update=update,
        goto=[g if isinstance(g, str) else Send(g["node"], g["input"]) for g in goto] if goto else (),
        resume=command.get("resume"),
    )


async def close_open_tool_calls(graph: Any, thread_id: str, token: str | None) -> int:
    """Answer every tool call of the thread's messages that has no result with an error
    result, so the next run's model sees a valid history; returns how many.

    A run stopped between a model's tool call and the tool's result (a cancel, the
    ``interrupt`` strategy, a timeout) leaves the AI message with ``tool_calls`` as the last
    checkpointed state. The next run adds its human message after it, and every provider
    refuses such a history. The results are written as the pending node (``tools``) would
    have written them, so the graph moves past it. Only for a ``messages`` channel with a
    reducer (``add_messages``): a plain channel would be overwritten, not appended to.
    """
    channel = graph.channels.get("messages")
    if not isinstance(channel, BinaryOperatorAggregate):
        return 0
    config = thread_config(thread_id, None, token)
    state = await graph.aget_state(config)
    messages = state.values.get("messages") if isinstance(state.values, dict) else None
    if not messages:
        return 0
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    calls = [
        c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls if c.get("id") not in answered
    ]
    if not calls:
        return 0
    results = [
        ToolMessage(content=STOPPED_TOOL_RESULT, tool_call_id=c["id"], name=c.get("name"), status="error")
        for c in calls
    ]
    await graph.aupdate_state(config, {"messages": results}, as_node=state.next[0] if state.next else None)
    log.info("closed tool calls a stopped run left open", extra={"thread_id": thread_id, "calls": len(calls)})
    return len(results)


def _values_result(state: Any) -> bytes:
    """The result of a run that ended at ``state`` (a ``StateSnapshot``): its values, and its
    pending interrupts as ``__interrupt__``."""
    values = state.values
    result = dict(values) if isinstance(values, dict) else {"__root__": values}
    if state.interrupts:
        result["__interrupt__"] = [wire.interrupt_dict(i) for i in state.interrupts]
    return wire.dumps(result)


def can_delete_for_runs(saver: BaseCheckpointSaver) -> bool:
    """Whether the saver implements ``adelete_for_runs`` (the base class only raises)."""
    return type(saver).adelete_for_runs is not BaseCheckpointSaver.adelete_for_runs


def _run_config(
    run: RunRecord, assistant: Assistant, token: str | None, from_latest: bool = False
) -> dict[str, Any]:
    """The run's graph config; ``from_latest`` ignores the checkpoint the run was asked to
    start from (a taken-over run goes on from its own last checkpoint)."""
    kwargs = run.kwargs
    config = dict(kwargs.get("config") or {})
    checkpoint = {} if from_latest else dict(kwargs.get("checkpoint") or {})
    if kwargs.get("checkpoint_id") and not from_latest:
        checkpoint["checkpoint_id"] = kwargs["checkpoint_id"]
    configurable = {
        **(config.get("configurable") or {}),
        **thread_config(run.thread_id, checkpoint, token)["configurable"],
        # Who the run is for, as langgraph-api passes it (and LangGraph's Runtime.server_info
        # reads it); last, so a client's config cannot claim to be someone else.
        **graph_configurable(kwargs.get(AUTH_KWARG), run.owner),
        "assistant_id": assistant.assistant_id,
        "graph_id": assistant.graph_id,
    }
    config["configurable"] = configurable
    config["metadata"] = {
        **(config.get("metadata") or {}),
        **run.metadata,
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "graph_id": assistant.graph_id,
        "assistant_id": assistant.assistant_id,
        # In every checkpoint the run writes: the thread's owner survives a lost record.
        OWNER_KEY: run.owner,
    }
    config["run_id"] = uuid.UUID(run.run_id)
    return config


async def _stream(graph, graph_input, config, kwargs, requested: list[str]) -> AsyncIterator[tuple]:
    """``(namespace, mode, chunk)`` from the graph, plus ``((), "events", event)`` when the
    client asked for ``events``."""
    # Always values and updates: the run's result and whether it stopped come from them.
    modes = {m for m in requested if m not in ("events", "messages-tuple", "messages")} | {
        "updates",
        "values",
    }
    if "messages" in requested or "messages-tuple" in requested:
        modes.add("messages")
    options: dict[str, Any] = {
        "stream_mode": sorted(modes),
        "subgraphs": True,
        "interrupt_before": kwargs.get("interrupt_before"),
        "interrupt_after": kwargs.get("interrupt_after"),
        "durability": kwargs.get("durability") or "sync",
    }
    # Always a context, {} by default (an assistant's default, as langgraph-api passes it): a
    # graph with a context schema then gets its defaults instead of None.
    options["context"] = kwargs.get("context") or {}
    if kwargs.get(PROTOCOL_KWARG) == PROTOCOL_V2:
        # The v2 protocol: LangGraph's own protocol events, every namespace (runs/protocol.py).
        del options["stream_mode"], options["subgraphs"]
        async with await graph.astream_events(graph_input, config, version="v3", **options) as events:
            async for event in events:
                yield tuple(event["params"].get("namespace") or ()), "protocol", event
        return
    subgraphs = bool(kwargs.get("stream_subgraphs"))
    if "events" not in requested:
        async for ns, mode, chunk in graph.astream(graph_input, config, **options):
            if ns and not subgraphs:
                continue
            yield ns, mode, chunk
        return
    async for event in graph.astream_events(graph_input, config, version="v2", **options):
        if event["event"] == "on_chain_stream" and event["run_id"] == str(config["run_id"]):
            ns, mode, chunk = event["data"]["chunk"]
            if not ns or subgraphs:
                yield ns, mode, chunk
        else:
            yield (), "events", event


@dataclass
class _Turn:
    """What one executor attempt holds: its run's events on their way to the store, the lease
    token taken with the run (until the body holds it), and the lease the body handed off."""

    events: _EventLog
    token: str | None = None
    held: HeldLease | None = None


class _EventLog:
    """A run's events on their way to the store, in order: appended at most
    :data:`EVENT_FLUSH_SECONDS` after they happen once a client streams the run (:attr:`live`),
    :data:`EVENT_QUIET_FLUSH_SECONDS` before, all of that window in one round trip; what is left
    when the run ends goes with its end (:meth:`take`, then ``finish_run``)."""

    def __init__(self, records: RecordStore, run: RunRecord, watched: bool = False) -> None:
        self.records = records
        self.run = run
        # Whether a client streams the run (so its events are kept once it ends).
        self.watched = watched
        # A store in this process takes an append without a round trip: always live.
        self.live = watched or not records.shared
        self._pending: list[tuple[str, bytes]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None
        self._failed: Exception | None = None

    def add(self, event: str, data: Any, check: bool = True) -> None:
        """Queue an event (``data`` is JSON-encoded here).

        Raises:
            The store error an earlier append met (with ``check``): the run's store-failure
            handling takes over, as when the append itself failed; its events are kept.
        """
        if check and self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        self._pending.append((event, wire.dumps(data)))
        if self._timer is None and self._flushing is None:
            window = EVENT_FLUSH_SECONDS if self.live else EVENT_QUIET_FLUSH_SECONDS
            self._timer = asyncio.get_running_loop().call_later(window, self._start_flush)

    def go_live(self) -> None:
        """A client streams the run: what waits goes to the store now, and every later event
        within :data:`EVENT_FLUSH_SECONDS`."""
        self.watched = True
        if self.live:
            return
        self.live = True
        if self._timer is not None:
            self._timer.cancel()
            self._start_flush()

    def _start_flush(self) -> None:
        self._timer = None
        self._flushing = asyncio.create_task(self._flush(), name=f"run-events-{self.run.run_id}")

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    await self.records.append_events(self.run.thread_id, self.run.run_id, batch)
                except Exception as exc:  # sent again with the next flush or the run's end
                    self._pending[:0] = batch
                    self._failed = exc
                    return
        finally:
            self._flushing = None

    async def take(self) -> list[tuple[str, bytes]]:
        """The events not appended yet, once the append in flight is done; nothing more is
        appended by this log unless :meth:`add` is called again."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is not None:
            await asyncio.wait([self._flushing])
        pending, self._pending = self._pending, []
        return pending

    async def flush(self) -> None:
        """Append every event now."""
        if events := await self.take():
            await self.records.append_events(self.run.thread_id, self.run.run_id, events)

    def drop(self) -> None:
        """Forget the events not appended yet (an append in flight still lands)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending = []


class _Emitter:
    """Turns graph stream parts into the API's events (names and payloads as langgraph-api's)
    and queues them on the run's event log."""

    def __init__(self, events: _EventLog, requested: list[str], max_events: int = 0) -> None:
        self.events = events
        self.max_events = max_events  # MAX_EVENTS_PER_RUN (0: none); the error event is beyond it
        self.count = 0
        self.requested = set(requested)
        self.messages: dict[str, BaseMessageChunk] = {}
        self.last_values: Any = None
        self.interrupts: list[Any] = []
        self.paused = False

    async def __call__(self, event: str, data: Any) -> None:
        if event != "error":
            self.count += 1
            if self.max_events and self.count > self.max_events:
                raise TooManyEvents(self.max_events)
        self.events.add(event, data)

    async def part(self, ns: tuple[str, ...], mode: str, chunk: Any) -> None:
        suffix = "|" + "|".join(ns) if ns else ""
        if mode == "protocol":  # stored as it is; the run's end reads the state
            chunk.pop("seq", None)
            await self(f"{chunk['method']}{suffix}", chunk)
            return
        if not ns and mode == "values":
            self.last_values = chunk
        elif not ns and mode == "updates" and isinstance(chunk, dict) and "__interrupt__" in chunk:
            self.paused = True
            self.interrupts.extend(chunk["__interrupt__"])
        if mode == "messages":
            if "messages-tuple" in self.requested:
                await self(f"messages{suffix}", list(chunk))
            if "messages" in self.requested:
                await self._legacy_message(*chunk)
        elif mode in self.requested:
            await self(f"{mode}{suffix}", chunk)
        elif mode == "updates" and isinstance(chunk, dict) and chunk.get("__interrupt__"):
            # Clients that did not ask for updates still learn of the interrupt (langgraph-api).
            await self(f"values{suffix}", chunk)

    async def _legacy_message(self, message: Any, meta: dict[str, Any]) -> None:
        """``messages`` mode as the SDK's v1 shape: metadata once per message, then the
        message so far (``partial``) or whole (``complete``)."""
        key = message.id or ""
        if key in self.messages and isinstance(message, BaseMessageChunk):
            self.messages[key] = self.messages[key] + message
        else:
            self.messages[key] = message
            await self("messages/metadata", {key: {"metadata": meta}})
        whole = self.messages[key]
        if isinstance(message, BaseMessageChunk):
            await self("messages/partial", [message_chunk_to_message(whole)])
        else:
            await self("messages/complete", [whole])
