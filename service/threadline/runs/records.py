"""Thread records, run records and run events: what the LangGraph API keeps besides checkpoints.

One protocol, :class:`RecordStore`, two implementations:

* :class:`threadline.runs.records_redis.RedisRecordStore` on the checkpoint Redis, next to the
  thread's checkpoints (same ``{thread_id}`` hash tag), so any replica answers for any run;
* :class:`threadline.runs.records_local.LocalRecordStore` in this process, for the
  single-process backends (``memory``, ``sqlite``, ``postgres``): their turn lease is
  process-local too, so they serve from one replica, and a run never outlives its process
  there (ADR 0009).

A thread's *active* runs (pending or running) form a queue ordered by creation; the first one
runs, under the thread's turn lease. ``create_and_start_run`` adds to the queue atomically with the
``reject`` check, so two replicas cannot both accept a run on an idle thread with
``multitask_strategy=reject``.

Events of a run are an append-only log with string ids that sort in append order; the last
entry of a finished run is :data:`END_EVENT`. A reader passes the id it saw last to resume
(``Last-Event-ID``).

What a run leaves grows with the run, not with its thread (issue 18): a ``values`` event and a
run's result each hold the whole thread state, so a store that kept them for every run of a
conversation would grow with the square of its length. So a run's events outlive it
(:data:`FINISHED_EVENTS_TTL_SECONDS`) only when a client can still ask for them — the run was
created ``stream_resumable`` (or through the v2 protocol, whose stream replays a thread's
runs), or a client streamed it or its thread — and its result goes only to the joiners that
wait for it as it ends. A later join answers from the thread, as langgraph-api does; a failed
run's result (an error body, small) stays with its record (:attr:`RunRecord.result`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from threadline.access import Filters

if TYPE_CHECKING:
    from threadline.lease import HeldLease
    from threadline.quotas import RunCharge

ThreadStatus = Literal["idle", "busy", "interrupted", "error"]
RunStatus = Literal["pending", "running", "error", "success", "timeout", "interrupted"]
ACTIVE_RUN_STATUSES = ("pending", "running")
# Thread and run ids: ours are uuid4s, but a client may name a thread with any id of this shape
# (on /v1 and the LangGraph API alike).
ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
# Statuses whose result (an error body) stays with the run's record.
FAILED_RUN_STATUSES = ("error", "timeout")

# Internal last event of every run: never sent to clients.
END_EVENT = "__end__"
# How long a finished run's kept events stay (for a late reconnect or join-stream); its record
# keeps the thread's TTL.
FINISHED_EVENTS_TTL_SECONDS = 3600
# Events per read_events: a reader's memory is bounded by this many events (each at most the
# size of one streamed value), not by how many the run left (issue 18).
EVENTS_PAGE = 64


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class ThreadRecord:
    thread_id: str
    owner: str
    created_at: str
    updated_at: str
    metadata: dict[str, Any] = field(default_factory=dict)
    status: ThreadStatus = "idle"
    # The thread's time to live (``{"strategy", "ttl_minutes", "expires_at"}``, the API's
    # ``include=ttl`` shape), or None: none.
    ttl: dict[str, Any] | None = None


@dataclass
class RunRecord:
    run_id: str
    thread_id: str
    owner: str
    assistant_id: str
    created_at: str
    updated_at: str
    status: RunStatus
    metadata: dict[str, Any]
    multitask_strategy: str
    kwargs: dict[str, Any]
    # The first cancel action accepted for the run (None: none). The run stays pending or
    # running until its executor settles it; the API shows it ``interrupted`` from the
    # moment the cancel is accepted, as langgraph-api does (:func:`shown_status`).
    cancel: str | None = None
    # The result of a run that ended in FAILED_RUN_STATUSES (``{"__error__": …}``), else None.
    result: bytes | None = None


def shown_status(run: RunRecord) -> str:
    """The status the API shows: ``interrupted`` for an active run whose cancel was accepted."""
    if run.cancel is not None and run.status in ACTIVE_RUN_STATUSES:
        return "interrupted"
    return run.status


@dataclass(frozen=True)
class RunEvent:
    id: str
    event: str
    data: bytes  # JSON


class CancelRequested(Exception):
    """A run's executor tried to record the end of a run that a cancel was accepted for."""

    def __init__(self, action: str) -> None:
        super().__init__(action)
        self.action = action


class RunRejected(Exception):
    """``multitask_strategy=reject`` and the thread has a pending or running run."""


class QueueFull(Exception):
    """The thread already has ``max_queued`` pending or running runs."""


class RunExists(Exception):
    """A run with this id exists on the thread (a cron tick's run, created once: ADR 0019)."""


class RecordStore(Protocol):
    """Where thread records, run records and run events live (see the module docstring)."""

    #: Whether other replicas see these records (and so can take over a run of this one).
    shared: bool
    #: Whether a checkpoint read queued right behind one of this store's calls reaches the
    #: store after it, in order (the saver's batcher is this store's): a run's first read is
    #: then made with its creation (:mod:`threadline.checkpoint.read_ahead`).
    reads_ahead: bool

    async def create_thread(self, record: ThreadRecord) -> bool:
        """Store ``record`` unless the thread exists; True if stored."""
        ...

    async def get_thread(self, thread_id: str, filters: Filters | None = None) -> ThreadRecord | None:
        """The thread's record; None when absent or when its metadata fails ``filters`` (a
        custom auth filter, :mod:`threadline.access`)."""
        ...

    async def update_thread(self, thread_id: str, **fields: Any) -> None:
        """Set ``metadata`` and/or ``status`` (and ``updated_at``) of an existing thread."""
        ...

    async def delete_thread(self, thread_id: str) -> None:
        """The thread record, its runs and their events are gone."""
        ...

    async def threads_of(self, owner: str, filters: Filters | None = None) -> list[ThreadRecord]:
        """Every thread record of ``owner`` whose metadata passes ``filters``, newest first."""
        ...

    async def expire_thread(self, thread_id: str, at: float | None) -> None:
        """Index the thread to expire at ``at`` (epoch seconds; None: never). The index is a
        hint for :meth:`expired_threads`; the record's ``ttl`` is the truth."""
        ...

    async def expired_threads(self, now: float, limit: int, retry_seconds: float) -> list[str]:
        """Claim at most ``limit`` threads indexed to expire by ``now``: each is indexed again
        ``retry_seconds`` later in the same step, so no other replica's sweep takes it
        meanwhile, and one whose sweeper died is taken again then."""
        ...

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
        """Store the run as pending, queue it on its thread and mark the thread busy; with
        ``alive_seconds``, its executor ``executor`` is alive (:meth:`beat`) for that long, in
        the same step (the run is also in :meth:`active_runs` from then on). And when the run
        heads the queue, ``lease_ms`` is not 0 and the thread's turn lease is free, in the same
        step: take the lease for ``lease_ms`` (a fresh fencing token ending in ``token_suffix``,
        as :meth:`threadline.lease.RedisTurnLease.hold` would) and mark the run ``running``
        with ``event`` (name, data) its first event. With ``charge``, the run's bytes are
        counted toward its thread's quota first, in the same step (only the Redis store is
        given one: its quotas are in its Redis, :meth:`threadline.quotas.Quotas.run_charge`).
        The thread must be the run's owner's and, with ``thread_made_at``, the one created
        then (not one deleted and made again since: :meth:`threadline.runs.threads.Threads.known`).

        Returns:
            Whether the run heads the thread's queue (its turn has come), and the lease's token
            if it was taken (the caller holds it from there: ``lease.hold(…, acquired=token)``).

        Raises:
            RunRejected: ``reject_if_busy`` and the thread has an active run.
            QueueFull: ``max_queued`` (not 0) runs are active on the thread already.
            RunExists: the thread has a run with this id (nothing stored).
            QuotaExceeded: ``charge`` would pass ``QUOTA_THREAD_BYTES`` (nothing stored).
            KeyError: no such thread (as above), nothing stored.
        """
        ...

    async def get_run(self, thread_id: str, run_id: str) -> RunRecord | None: ...

    async def runs_of(self, thread_id: str, start: int = 0, count: int | None = None) -> list[RunRecord]:
        """The thread's runs, newest first: ``count`` of them (all when None) from ``start``."""
        ...

    async def runs_since(self, thread_id: str, created_after: str) -> list[RunRecord]:
        """The thread's runs created after ISO time ``created_after``, oldest first."""
        ...

    async def first_active_run(self, thread_id: str) -> str | None:
        """The run id at the head of the thread's queue (the one allowed to run)."""
        ...

    async def set_run_status(
        self, thread_id: str, run_id: str, status: str, event: tuple[str, bytes] | None = None
    ) -> str | None:
        """Set the run's status; with ``event`` (name, data), append it in the same step and
        return its id (one round trip for "running" and the run's first event).

        Raises:
            KeyError: no such run (deleted with its thread): nothing written.
        """
        ...

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
        """Record the run's final status, take it off the queue, set the thread's status (if no
        other run is queued), append :data:`END_EVENT`, in that order, and drop the run from
        :meth:`active_runs`. ``result`` goes to the joiners waiting for it on other replicas
        (:meth:`watch_result`), and with the record when the run failed.

        Only once: an ended run is left as it is. With ``executor``, only while the run's
        heartbeat is that executor's (or gone): an executor whose run was taken over by another
        replica cannot end it. Returns whether it ended the run.

        Args:
            events: events of the run not appended yet (name, data): appended first, in the
                same step, unless the run ended or is another executor's.
            lease: the thread's lease, handed off by its hold (``hand_off=True``): released
                first in the same step where the store can (then ``lease.released``), whatever
                the outcome; else left to the caller.
            keep_events: a client can still ask for the run's events (see the module
                docstring): they stay :data:`FINISHED_EVENTS_TTL_SECONDS`. Else they go with the
                run's end, unless a client on another replica streams the run or its thread
                (:meth:`watch_events`, :meth:`watch_thread`).

        Raises:
            CancelRequested: ``unless_cancelled`` and a cancel was accepted for the run (nothing
                is recorded but ``events``): a run that ends on its own as a cancel comes in is
                cancelled.
        """
        ...

    async def delete_run(self, thread_id: str, run_id: str) -> None: ...

    async def append_event(self, thread_id: str, run_id: str, event: str, data: bytes) -> str:
        """Append one event; returns its id."""
        ...

    async def append_events(self, thread_id: str, run_id: str, events: list[tuple[str, bytes]]) -> None:
        """Append several events (name, data) in order, in one round trip."""
        ...

    async def read_events(
        self, thread_id: str, run_id: str, after: str | None, wait_seconds: float
    ) -> list[RunEvent]:
        """Events after id ``after`` (from the first when None), at most :data:`EVENTS_PAGE`,
        waiting up to ``wait_seconds`` for one."""
        ...

    async def result(self, thread_id: str, run_id: str, wait_seconds: float) -> bytes | None:
        """The run's result as it ended, for a joiner announced by :meth:`watch_result` before
        (None if it did not end within ``wait_seconds``, or nobody waited for it then)."""
        ...

    async def watch_result(self, thread_id: str, run_id: str, ttl_seconds: float) -> None:
        """A client waits here for the run's result and will for ``ttl_seconds`` (renewed while
        it does): the run's end, on whatever replica, leaves it for :meth:`result`."""
        ...

    async def request_cancel(self, thread_id: str, run_id: str, action: str = "interrupt") -> bool:
        """Ask the run's executor to stop; ``action`` is ``interrupt`` or ``rollback``. Only
        while the run is active, atomically with its :meth:`finish_run`: returns False (and
        stores nothing) if it ended first. The run's record says so (``cancel``) in the same
        step."""
        ...

    async def wait_cancel(
        self, thread_id: str, run_id: str, on_watched: Callable[[], None] | None = None
    ) -> str:
        """Return the first cancel action requested for the run, once there is one.

        The run's executor waits so for as long as it runs; meanwhile ``on_watched`` is called
        (once) when a client streams the run's events from another replica
        (:meth:`watch_events`), so that they are appended as they happen from then on.
        """
        ...

    async def watch_events(self, thread_id: str, run_id: str, ttl_seconds: float) -> None:
        """A client streams the run's events here and will for ``ttl_seconds`` (renewed while
        it does): its executor, on whatever replica, appends them as they happen."""
        ...

    async def watch_thread(self, thread_id: str, ttl_seconds: float) -> None:
        """A client follows the thread's runs here and will for ``ttl_seconds`` (renewed while
        it does): every run of it that ends meanwhile keeps its events."""
        ...

    async def beat(self, thread_id: str, run_id: str, ttl_seconds: float, executor: str = "") -> bool:
        """The run's executor ``executor`` is alive for the next ``ttl_seconds``. False (and
        nothing renewed) when another executor holds the run's heartbeat: it was taken over."""
        ...

    async def claim(self, thread_id: str, run_id: str, ttl_seconds: float, executor: str) -> int:
        """Take over a run whose heartbeat lapsed (its executor died): the heartbeat becomes
        ``executor``'s. Returns the run's attempt number (2 for the first takeover), 0 when
        the heartbeat is alive (someone else runs it or claimed it first)."""
        ...

    async def active_runs(self) -> list[tuple[str, str]]:
        """``(thread_id, run_id)`` of every run that may be pending or running (a superset:
        ended ones are dropped by :meth:`forget_active`)."""
        ...

    async def forget_active(self, thread_id: str, run_id: str) -> None:
        """Drop an ended or deleted run from :meth:`active_runs`."""
        ...

    async def alive(self, thread_id: str, run_id: str) -> bool:
        """Whether the run's executor beat within its last TTL."""
        ...

    async def ping(self) -> None: ...


def event_id_valid(value: str) -> bool:
    """Whether ``value`` has the shape of an event id (``<ms>-<seq>``), so a bad
    ``Last-Event-ID`` is a 4xx instead of a store error."""
    head, sep, tail = value.partition("-")
    return bool(sep) and head.isdigit() and tail.isdigit() and len(value) <= 64
