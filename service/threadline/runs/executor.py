"""The executor of runs: one attempt at a run takes its turn on the thread (head of the queue,
then the lease, whose fencing token goes to every checkpoint write, as for ``/v1`` turns), runs
the graph, appends its events, and records its end, its thread's status and the release of the
lease in one step (:meth:`RecordStore.finish_run`). A cancel request (from any replica) reaches
the attempt through the store and cancels the graph run in its task; a run that ends on its own
after a cancel was accepted is cancelled all the same: a client whose cancel was accepted
always sees the run ``interrupted``.

A run outlives its executor (ADR 0010): the attempt renews a heartbeat that names it; when the
heartbeat lapses (its replica died, or was paused past its lease), any replica — a sweep runs
on each, and whoever waits for the run — claims the run and executes it again from the
thread's last checkpoint, which the run itself wrote (LangGraph reruns only the unfinished
step): :mod:`threadline.runs.takeover`. The lease's fencing token keeps a paused executor from
writing after that.

A delayed run (``after_seconds``) is created with its not-before time as its ``created_at``
(as langgraph-api's): its executor waits, pending and beating, until then, so one that takes it
over after a replica died waits for the same time (:func:`due_in`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime

from langgraph.checkpoint.base import CheckpointTuple

from threadline import metrics
from threadline.checkpoint.errors import FencedError
from threadline.checkpoint.read_ahead import made_with, read_ahead
from threadline.config import QuotaSettings
from threadline.lease import HeldLease, LeaseBusy, TurnLease
from threadline.quotas import RunCharge
from threadline.retry import STORE_RETRY_SECONDS, delays, store_failures, through_store_failures
from threadline.runs import wire
from threadline.runs.assistants import Assistant, Assistants
from threadline.runs.events import EventLog
from threadline.runs.graph_io import run_graph, settle_stopped_run
from threadline.runs.protocol import PROTOCOL_KWARG, PROTOCOL_V2
from threadline.runs.records import CancelRequested, RecordStore, RunRecord, now_iso
from threadline.runs.takeover import SWEEP_SECONDS, Takeover
from threadline.runs.threads import Threads
from threadline.store.tenant import Tenancy

log = logging.getLogger(__name__)

# Between two looks at the thread's queue while an enqueued run waits its turn.
QUEUE_POLL_SECONDS = 0.05
# A stateless run's thread is deleted this long after the run ends, so its creator can still
# read the result; should this process die first, the records' TTL collects it.
STATELESS_GRACE_SECONDS = 60.0


def due_in(run: RunRecord) -> float:
    """Seconds until ``run`` may start (<= 0: now): a delayed run's record holds its not-before
    time as ``created_at``."""
    if not run.kwargs.get("after_seconds"):
        return 0.0
    return datetime.fromisoformat(run.created_at).timestamp() - time.time()


class _GiveUp(Exception):
    """This executor no longer owns its run (taken over, or fenced off the thread): stop
    without recording an end; the run's owner finishes it."""


class _RunGone(Exception):
    """The run was deleted (with its thread) before it started."""


@dataclass
class _Turn:
    """What one executor attempt holds: its run's events on their way to the store, the lease
    token taken with the run (until the body holds it), and the lease the body handed off."""

    events: EventLog
    token: str | None = None
    # The thread's latest checkpoint, read under that token (in a tuple: it may be None).
    read: tuple[CheckpointTuple | None] | None = None
    held: HeldLease | None = None
    started_at: str | None = None  # when this attempt started running the graph (ISO)


class Executor(Takeover):
    """Executes the runs created on this replica and takes over those whose executor is gone.

    Args:
        threads: the threads layer (its checkpointer; a stateless run's thread is deleted).
        assistants: the served graphs.
        records: the record store.
        lease: the turn lease shared with ``/v1`` turns.
        quota: the per-tenant limits a run meets (events per run, the recursion ceiling).
        heartbeat_seconds: how long a run's heartbeat lasts unrenewed (renewed every third).
        timeout_seconds: a run's deadline (None: none).
        sweep_seconds: between two orphan sweeps.
        tenancy: the long-term memory store; each run's graph gets its owner's view of it.
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
        self.quota = quota
        self.heartbeat_seconds = heartbeat_seconds
        self.sweep_seconds = sweep_seconds
        self.timeout_seconds = timeout_seconds
        self.threads = threads
        self.assistants = assistants
        self.records = records
        self.lease = lease
        self.tenancy = tenancy
        self._sweeper: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        # Results of the runs executing in this process, once recorded (None: read the store).
        self._results: dict[str, asyncio.Future[bytes | None]] = {}
        # Event logs of the runs executing in this process: a client streaming one makes it live.
        self._logs: dict[str, EventLog] = {}
        # Clients following a thread's runs here (threads.join_stream), by thread: its runs'
        # events are kept once they end.
        self.followed_threads: collections.Counter[str] = collections.Counter()
        self.idle = asyncio.Event()
        self.idle.set()
        # Called with (run, status, result, started_at) once this replica recorded a run's end
        # (the one recorded end, whichever replica or attempt: RecordStore.finish_run); must
        # neither raise nor wait (the run's webhook: threadline.webhooks).
        self.on_finish: Callable[[RunRecord, str, bytes, str | None], None] | None = None
        # Executors here waiting for a delayed run's time: they do not keep a drain waiting (the
        # run is handed over, or interrupted on a single-process backend, like a running one).
        self._delayed = 0

    async def submit(
        self,
        run: RunRecord,
        assistant: Assistant,
        reject_if_busy: bool,
        streamed: bool,
        charge: RunCharge | None,
        thread_made_at: str = "",
    ) -> None:
        """Store ``run`` (queued on its thread; ``charge`` and ``thread_made_at`` as the store
        takes them) and start executing it here. ``streamed``: a client streams it from its
        start.

        Raises (from the store; the run may be left in the thread's active index):
            RunRejected: ``reject_if_busy`` and the thread has an active run.
            QueueFull: MAX_QUEUED_RUNS_PER_THREAD runs wait on the thread.
            KeyError: the thread is gone.
        """
        executor = uuid.uuid4().hex
        now = due_in(run) <= 0  # a delayed run does not take the lease now: its turn comes later
        # Alive as it is queued, its heartbeat naming its executor: nobody may take it for an
        # orphan before its executor starts. On an idle thread it also takes the turn lease and
        # starts running, in the same round trip.
        creation = self.records.create_and_start_run(
            run,
            reject_if_busy=reject_if_busy,
            alive_seconds=self.heartbeat_seconds,
            executor=executor,
            lease_ms=self.lease.lease_ms if now else 0,
            token_suffix=self.lease.token_suffix(),
            event=("metadata", wire.dumps({"run_id": run.run_id, "attempt": 1})),
            max_queued=self.quota.queued_runs_per_thread,
            charge=charge,
            thread_made_at=thread_made_at,
        )
        read: tuple[CheckpointTuple | None] | None = None
        if now and self._reads_ahead(run):  # the read is the run's if the creation took the lease
            (first, token), read = await made_with(
                creation, self.threads.checkpointer, run.thread_id, kept=lambda made: made[1] is not None
            )
        else:
            first, token = await creation
        self._start(run, assistant, executor, 1, first=first, token=token, streamed=streamed, read=read)

    def _reads_ahead(self, run: RunRecord) -> bool:
        """Whether the run's first checkpoint read goes with its creation
        (:mod:`threadline.checkpoint.read_ahead`): where the records and the saver share a
        batcher, and the run reads the thread's latest checkpoint (no ``checkpoint_id``)."""
        kwargs = run.kwargs
        return self.records.reads_ahead and not (kwargs.get("checkpoint_id") or kwargs.get("checkpoint"))

    def result(self, run_id: str) -> asyncio.Future[bytes | None] | None:
        """The result of a run executing here, once recorded (None in it: read the store);
        None when it does not execute here."""
        return self._results.get(run_id)

    def watched(self, run_id: str) -> None:
        """A client streams the run: if it executes here, its events go to the store now."""
        if (events := self._logs.get(run_id)) is not None:
            events.go_live()

    def _start(
        self,
        run: RunRecord,
        assistant: Assistant,
        executor: str,
        attempt: int,
        first: bool = False,
        token: str | None = None,
        streamed: bool = False,
        read: tuple[CheckpointTuple | None] | None = None,
    ) -> None:
        turn = _Turn(EventLog(self.records, run, watched=streamed), token, read=read)
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
            if len(self._tasks) <= self._delayed:
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
                status, thread_status, result = await settle_stopped_run(
                    self.lease, run, assistant, cancel.result()
                )
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
                    status, thread_status, result = await settle_stopped_run(
                        self.lease, run, assistant, request.action
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

    async def _wait_cancel(self, run: RunRecord, events: EventLog) -> str:
        """The run's cancel action, once requested; a store that fails meanwhile (Redis
        restarting) is waited out rather than taken for a cancel. Meanwhile, a client streaming
        the run from another replica makes its events go to the store as they happen."""
        on_watched = None if events.live else events.go_live
        while True:
            try:
                return await self.records.wait_cancel(run.thread_id, run.run_id, on_watched)
            except store_failures():
                await asyncio.sleep(STORE_RETRY_SECONDS)

    async def _keep_beating(self, run: RunRecord, executor: str) -> None:
        """Renew the run's heartbeat every third of its TTL while this executor lives; returns
        when another executor took the run over. A run whose heartbeat lapses is an orphan
        (its replica died) and is taken over by a sweep or by whoever waits for it
        (:meth:`adopt_if_orphan`)."""
        while True:
            await asyncio.sleep(self.heartbeat_seconds / 3)
            try:
                if not await self.records.beat(run.thread_id, run.run_id, self.heartbeat_seconds, executor):
                    log.warning("run taken over by another replica", extra={"run_id": run.run_id})
                    return
            except Exception as exc:  # the store is away: the next beat may get through
                log.warning("run heartbeat failed", extra={"run_id": run.run_id, "error": type(exc).__name__})

    async def _finish(
        self,
        run: RunRecord,
        status: str,
        thread_status: str,
        result: bytes,
        executor: str,
        unless_cancelled: bool = False,
        turn: _Turn | None = None,
        events: Collection[tuple[str, bytes]] | None = None,
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
        if self.on_finish is not None:
            self.on_finish(run, status, result, turn.started_at if turn is not None else None)
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
            or self.followed_threads[run.thread_id]
        )

    async def _drop_thread(self, owner: str, thread_id: str) -> None:
        with contextlib.suppress(Exception):
            await self.threads.delete(owner, thread_id)

    async def _run_in_turn(
        self, run: RunRecord, assistant: Assistant, attempt: int, turn: _Turn, first: bool = False
    ) -> tuple[str, str, bytes]:
        """Wait for the run's turn (head of the queue, then the lease), run it, and return
        ``(run status, thread status, result)``. ``first``: it headed the queue when created
        (only its own end takes it off), so the queue is not read again. A store that fails
        meanwhile (Redis restarting) does not fail the run: it runs again from its last
        checkpoint once the store answers."""
        return await through_store_failures(
            run.run_id,
            "mid-run; running it again from its last checkpoint",
            # After a store failure the queue is read again (the run may be gone).
            lambda retry: self._run_when_first(run, assistant, attempt + retry, turn, first and retry == 0),
        )

    async def _run_when_first(
        self, run: RunRecord, assistant: Assistant, attempt: int, turn: _Turn, first: bool = False
    ) -> tuple[str, str, bytes]:
        if (wait := due_in(run)) > 0:  # pending until its time (it keeps its place in the queue)
            self._delayed += 1
            if len(self._tasks) <= self._delayed:
                self.idle.set()
            try:
                await asyncio.sleep(wait)
            finally:
                self._delayed -= 1
                if len(self._tasks) > self._delayed:
                    self.idle.clear()
        waits = delays(QUEUE_POLL_SECONDS, 1.0)
        while not first and (head := await self.records.first_active_run(run.thread_id)) != run.run_id:
            if head is None:  # deleted meanwhile (its thread was deleted)
                raise _RunGone(run.run_id)
            if await self.adopt_if_orphan(run.thread_id, head):
                waits = delays(QUEUE_POLL_SECONDS, 1.0)  # a new head: look again soon
            await asyncio.sleep(next(waits))
        while True:
            # Taken with the run (create_and_start_run), which is "running" with its first
            # event already; adopted before the first await, so _let_go knows it is held here.
            token, turn.token = turn.token, None
            read, turn.read = turn.read, None
            try:
                # Handed off at the end: FINISH_RUN releases it (one round trip less).
                async with self.lease.hold(run.thread_id, acquired=token, hand_off=True) as held:
                    turn.held, turn.started_at = held, now_iso()
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
                    try:
                        store = self.tenancy.of(run.owner) if self.tenancy is not None else None
                        with read_ahead(run.thread_id, *read) if read else contextlib.nullcontext():
                            return await run_graph(
                                run,
                                assistant,
                                held,
                                attempt,
                                turn.events,
                                self.quota,
                                self.timeout_seconds,
                                store,
                            )
                    except FencedError:
                        # Paused or cut off past the lease: another executor takes the run over
                        # (or already did) from what was checkpointed; nothing more from here.
                        log.warning(
                            "run lost its thread's lease; leaving it to a takeover",
                            extra={"run_id": run.run_id},
                        )
                        raise _GiveUp(run.run_id) from None
            except LeaseBusy:
                continue  # a /v1 turn on this thread: wait for it

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
