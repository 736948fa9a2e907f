"""Crons: runs a principal schedules (``/runs/crons``), and the scheduler that fires them on
every replica, each tick exactly once (ADR 0019).

A cron belongs to its principal, as a thread does, and lives in the record stores
(:mod:`threadline.runs.cron_records`). Its ``schedule`` is croniter's syntax, as langgraph-api
reads it (5 fields, or 6 with seconds last), in its ``timezone`` (UTC by default). A thread
cron runs on its thread; a stateless one on a new thread per tick, deleted after its run
unless ``on_run_completed`` is ``keep``.

Firing (:class:`CronScheduler`, one per replica): a due tick is claimed in the store (a claim
that expires after ``TURN_LEASE_SECONDS``), its run created with an id derived from (cron, tick)
unless it exists already, and only then is the cron advanced to its next tick. A claimer that
dies at any point leaves the tick to the next claimer, which creates the same run (or finds
it): no tick is lost, none fires twice. The run then runs as any run (the executor, its lease,
takeover).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson
from croniter import CroniterBadDateError, croniter

from threadline import access
from threadline.access import Filters
from threadline.checkpoint import is_store_down
from threadline.quotas import CRONS, QuotaExceeded
from threadline.runs.assistants import Assistants
from threadline.runs.cron_records import CronRecords, LocalCronRecords
from threadline.runs.errors import Conflict, Invalid, NotFound
from threadline.runs.graph_io import AUTH_KWARG, CRON_KWARG, check_input
from threadline.runs.records import RunExists, now_iso
from threadline.runs.runs import Runs

log = logging.getLogger(__name__)

# Run and thread ids of a tick: uuid5(NAMESPACE_CRON, "<cron id>:<tick ms>[:thread]").
NAMESPACE_CRON = uuid.UUID("0c6b5e7a-3f0e-5a49-9a0e-7c1f2d9b4e11")
# Attempts at a change racing changes (or ticks) from other replicas before it is refused.
_CHANGE_ATTEMPTS = 8
# Due crons one scheduler pass claims at most; the next pass follows at once while full.
BATCH = 100
# The fields sort_by may name, as langgraph-api.
SORT_FIELDS = (
    "cron_id",
    "assistant_id",
    "thread_id",
    "next_run_date",
    "end_time",
    "created_at",
    "updated_at",
)
# The payload fields each tick's run is created with (the rest describe the cron).
RUN_FIELDS = (
    "assistant_id", "input", "config", "context", "metadata", "stream_mode", "stream_subgraphs",
    "stream_resumable", "interrupt_before", "interrupt_after", "multitask_strategy", "durability",
    "webhook",
)  # fmt: skip
# Kept in the record, never shown.
_OWNER = "owner"


def check_schedule(schedule: str) -> str:
    """Raises Invalid (422, langgraph-api's message) for what croniter cannot read."""
    if not croniter.is_valid(schedule):
        raise Invalid(
            f"Invalid cron schedule: '{schedule}'. Reason: Invalid cron schedule. Ensure the schedule "
            "uses the standard cron format (minute hour day_of_month month day_of_week). "
            "Example: '*/5 * * * *' for every 5 minutes."
        )
    return schedule


def check_timezone(timezone: str | None) -> str | None:
    """Raises Invalid (422, langgraph-api's message) for a name that is no IANA time zone."""
    if timezone is None:
        return None
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, KeyError, ValueError):
        raise Invalid(
            f"Invalid timezone: '{timezone}'. Use IANA timezone format (e.g. 'America/New_York')."
        ) from None
    return timezone


def next_tick(schedule: str, after: float, timezone: str | None = None) -> int | None:
    """The first tick of ``schedule`` strictly after ``after`` (epoch seconds), in epoch ms
    (langgraph-api's ``next_cron_date``); None when there is none (``0 0 31 2 *``, or a year
    field in the past): croniter gives up within a millisecond."""
    base = datetime.fromtimestamp(after, UTC)
    if timezone:
        base = base.astimezone(ZoneInfo(timezone))
    try:
        return int(croniter(schedule, base).get_next(datetime).timestamp() * 1000)
    except CroniterBadDateError:
        return None


def _first_tick(schedule: str, after: float, timezone: str | None) -> int:
    """Raises Invalid: a schedule that never ticks again (refused rather than kept idle)."""
    tick = next_tick(schedule, after, timezone)
    if tick is None:
        raise Invalid(f"Invalid cron schedule: '{schedule}'. Reason: it has no date after now.")
    return tick


def tick_ids(cron_id: str, tick_ms: int) -> tuple[str, str]:
    """The run id and the stateless thread id of one tick: the same on every replica."""
    name = f"{cron_id}:{tick_ms}"
    return str(uuid.uuid5(NAMESPACE_CRON, name)), str(uuid.uuid5(NAMESPACE_CRON, name + ":thread"))


def _iso_ms(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def _end_ms(end_time: str | None) -> int | None:
    return None if end_time is None else int(datetime.fromisoformat(end_time).timestamp() * 1000)


def _due(record: dict[str, Any], next_ms: int) -> bool:
    """Whether the schedulers should fire the cron at ``next_ms``."""
    end = _end_ms(record.get("end_time"))
    return bool(record["enabled"]) and (end is None or next_ms <= end)


class Crons:
    """Create, read, change, delete and search principals' crons.

    Args:
        assistants: the served graphs and assistants (a cron's ``assistant_id``).
        records: where crons are kept (in this process if None).
        per_principal: ``QUOTA_CRONS_PER_PRINCIPAL`` (0: no limit).
        clock: wall-clock seconds (injectable for tests).
    """

    def __init__(
        self,
        assistants: Assistants,
        records: CronRecords | None = None,
        per_principal: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.assistants = assistants
        self.records = records if records is not None else LocalCronRecords()
        self.per_principal = per_principal
        self.clock = clock

    async def create(
        self,
        owner: str,
        thread_id: str | None,
        body: dict[str, Any],
        auth: dict[str, Any] | None = None,
        assistant_filters: Filters | None = None,
    ) -> dict[str, Any]:
        """Store a new cron of ``owner`` (``body``: the request's fields); ``thread_id`` for a
        thread cron (its thread checked by the caller). ``auth``: the caller, kept for the runs.

        Raises:
            NotFound: the assistant (or one ``assistant_filters`` exclude).
            Invalid: schedule, timezone, input the graph does not take.
            QuotaExceeded: past ``QUOTA_CRONS_PER_PRINCIPAL``.
        """
        schedule = check_schedule(body["schedule"])
        timezone = check_timezone(body.get("timezone"))
        assistant = await self.assistants.get(owner, body["assistant_id"], assistant_filters)
        cron_id = str(uuid.uuid4())
        payload = {k: v for k, v in body.items() if v is not None}
        payload["assistant_id"] = assistant.assistant_id
        check_input(assistant, payload)  # before the cron_id: the client's config and context
        config = dict(payload.get("config") or {})
        config["configurable"] = {**(config.get("configurable") or {}), "cron_id": cron_id}
        payload["config"] = config
        if auth is not None:
            payload[AUTH_KWARG] = auth
        now = now_iso()
        record = {
            "cron_id": cron_id,
            "assistant_id": assistant.assistant_id,
            "thread_id": thread_id,
            "on_run_completed": None if thread_id else (body.get("on_run_completed") or "delete"),
            "end_time": body.get("end_time"),
            "schedule": schedule,
            "timezone": timezone,
            "created_at": now,
            "updated_at": now,
            "user_id": owner,
            "payload": payload,
            "metadata": body.get("metadata") or {},
            "enabled": body.get("enabled", True) is not False,
            _OWNER: owner,
        }
        next_ms = _first_tick(schedule, self.clock(), timezone)
        stored = await self.records.create(
            owner, cron_id, orjson.dumps(record), next_ms, _due(record, next_ms), self.per_principal
        )
        if stored == -1:
            raise QuotaExceeded(CRONS, self.per_principal)
        if stored == 0:  # a uuid4 taken: never seen
            raise Conflict("cron_exists", "a cron with this cron_id exists")
        return _shown(record, next_ms)

    async def _record(self, owner: str, cron_id: str, filters: Filters | None) -> tuple[bytes, int | None]:
        found = await self.records.get(cron_id)
        if found is None:
            raise NotFound("cron")
        record = orjson.loads(found[0])
        if record[_OWNER] != owner or not access.matches(record.get("metadata") or {}, filters):
            raise NotFound("cron")
        return found

    async def get(self, owner: str, cron_id: str, filters: Filters | None = None) -> dict[str, Any]:
        """Raises NotFound: none of ``owner``'s, or one ``filters`` exclude."""
        raw, next_ms = await self._record(owner, cron_id, filters)
        return _shown(orjson.loads(raw), next_ms)

    async def patch(
        self, owner: str, cron_id: str, changes: dict[str, Any], filters: Filters | None = None
    ) -> dict[str, Any]:
        """Change ``owner``'s cron as langgraph-api does: ``schedule`` or ``timezone`` reset the
        next tick (from now), ``end_time`` None clears it, ``metadata`` merges, and the other
        fields merge into the payload the runs are made of.

        Raises:
            NotFound, Invalid (schedule, timezone), Conflict (changed too often meanwhile).
        """
        if "schedule" in changes:
            check_schedule(changes["schedule"])
        check_timezone(changes.get("timezone"))
        for _ in range(_CHANGE_ATTEMPTS):
            raw, current = await self._record(owner, cron_id, filters)
            record = orjson.loads(raw)
            if "timezone" in changes:
                record["timezone"] = changes["timezone"]
            if "schedule" in changes:
                record["schedule"] = changes["schedule"]
            next_ms = None
            if "schedule" in changes or "timezone" in changes:
                next_ms = _first_tick(record["schedule"], self.clock(), record["timezone"])
            upcoming = next_ms if next_ms is not None else current
            if "end_time" in changes:
                record["end_time"] = changes["end_time"]
            for key in ("enabled", "on_run_completed"):
                if key in changes:
                    record[key] = changes[key]
            if "metadata" in changes:
                record["metadata"] = {**record["metadata"], **changes["metadata"]}
            payload = {**record["payload"], **{k: v for k, v in changes.items() if v is not None}}
            payload["assistant_id"] = record["payload"]["assistant_id"]
            config = dict(payload.get("config") or {})
            config["configurable"] = {**(config.get("configurable") or {}), "cron_id": cron_id}
            payload["config"] = config
            record["payload"] = payload
            record["updated_at"] = now_iso()
            due = upcoming is not None and _due(record, upcoming)
            new = orjson.dumps(record)
            if await self.records.replace(cron_id, raw, new, next_ms, due):
                return _shown(record, upcoming)
        raise Conflict("cron_busy", "the cron changed too often meanwhile; retry")

    async def delete(self, owner: str, cron_id: str, filters: Filters | None = None) -> None:
        """Raises NotFound: none of ``owner``'s, or one ``filters`` exclude."""
        await self._record(owner, cron_id, filters)
        if not await self.records.delete(owner, cron_id):
            raise NotFound("cron")

    async def search(
        self,
        owner: str,
        assistant_id: str | None = None,
        thread_id: str | None = None,
        enabled: bool | None = None,
        metadata: dict[str, Any] | None = None,
        filters: Filters | None = None,
    ) -> list[dict[str, Any]]:
        """``owner``'s crons (at most the quota's count) that match, newest first."""
        found = []
        for raw, next_ms in await self.records.of(owner):
            record = orjson.loads(raw)
            if (
                (assistant_id is None or record["assistant_id"] == assistant_id)
                and (thread_id is None or record["thread_id"] == thread_id)
                and (enabled is None or record["enabled"] == enabled)
                and access.holds(record["metadata"], metadata)
                and access.matches(record["metadata"], filters)
            ):
                found.append(_shown(record, next_ms))
        found.sort(key=lambda c: c["created_at"], reverse=True)
        return found

    async def forget(self, owner: str, thread_id: str | None = None, assistant_id: str | None = None) -> int:
        """Delete ``owner``'s crons of a deleted thread or assistant (langgraph-api cascades
        both); returns how many."""
        gone = 0
        for raw, _ in await self.records.of(owner):
            record = orjson.loads(raw)
            if (thread_id is not None and record["thread_id"] == thread_id) or (
                assistant_id is not None and record["assistant_id"] == assistant_id
            ):
                gone += await self.records.delete(owner, record["cron_id"])
        return gone

    # -- the scheduler's --

    async def due(self, now: float, limit: int) -> list[tuple[str, int]]:
        return await self.records.due(int(now * 1000), limit)

    async def stored(self, cron_id: str) -> dict[str, Any] | None:
        """The record as kept (its owner and the payload's caller included), or None."""
        found = await self.records.get(cron_id)
        return None if found is None else orjson.loads(found[0])


def _shown(record: dict[str, Any], next_ms: int | None) -> dict[str, Any]:
    """The API's ``Cron``."""
    shown = {k: v for k, v in record.items() if k != _OWNER}
    shown["payload"] = {k: v for k, v in record["payload"].items() if k != AUTH_KWARG}
    shown["next_run_date"] = _iso_ms(next_ms)
    return shown


def run_payload(cron: dict[str, Any]) -> dict[str, Any]:
    """The run body of one tick of ``cron`` (langgraph-api's scheduler: the cron's metadata
    under the payload's; ``keep`` kept; with a context, which may not go with a
    ``configurable``, the ``cron_id`` moved from it to CRON_KWARG, added back for the graph)."""
    stored = cron["payload"]
    payload = {k: stored[k] for k in (*RUN_FIELDS, AUTH_KWARG) if stored.get(k) is not None}
    if isinstance(payload.get("stream_mode"), str):
        payload["stream_mode"] = [payload["stream_mode"]]
    if cron.get("on_run_completed") == "keep":
        payload["on_completion"] = "keep"
    payload["metadata"] = {**(cron.get("metadata") or {}), **(payload.get("metadata") or {})}
    if payload.get("context"):
        config = dict(payload.get("config") or {})
        configurable = dict(config.get("configurable") or {})
        if (cron_id := configurable.pop("cron_id", None)) is not None:
            payload[CRON_KWARG] = cron_id
        config["configurable"] = configurable
        payload["config"] = config
    return payload


# fire(cron record, run id, thread id): create the tick's run unless it exists. Raises what
# Runs.create raises.
Fire = Callable[[dict[str, Any], str, str], Awaitable[None]]


def fire_with(runs: Runs) -> Fire:
    """Create a tick's run through ``runs`` (as any run: queued, executed, taken over), unless
    a claimer that died after creating it did so already."""

    async def fire(cron: dict[str, Any], run_id: str, thread_id: str) -> None:
        if await runs.records.get_run(thread_id, run_id) is not None:
            return
        stateless = cron.get("thread_id") is None
        # Created atomically once (RunExists): a claimer that paused past its claim and another
        # that claimed the tick meanwhile both get here, one run results.
        with contextlib.suppress(RunExists):
            await runs.create(
                cron[_OWNER],
                None if stateless else thread_id,
                run_payload(cron),
                run_id=run_id,
                new_thread_id=thread_id if stateless else None,
            )

    return fire


class CronScheduler:
    """One replica's scheduler: every ``interval`` seconds, fire the crons that are due.

    Args:
        crons: the crons.
        fire: creates a tick's run, idempotently (see :data:`Fire`).
        interval: ``CRON_SCHEDULER_SLEEP_TIME``, seconds between passes.
        claim_seconds: how long a claim on a tick lives (``TURN_LEASE_SECONDS``): a claimer
            that died holds its tick this long.
        clock: wall-clock seconds (injectable for tests).
        paused: while true (the replica drains), ticks are left to the other replicas.
    """

    def __init__(
        self,
        crons: Crons,
        fire: Fire,
        interval: float,
        claim_seconds: float,
        clock: Callable[[], float] | None = None,
        paused: Callable[[], bool] = lambda: False,
    ) -> None:
        self.crons, self._fire, self.paused = crons, fire, paused
        self.interval, self.claim_ms = interval, max(1, int(claim_seconds * 1000))
        self.clock = clock or crons.clock
        self._task: asyncio.Task | None = None

    async def run_once(self) -> int:
        """One pass: claim, fire and advance every due tick; returns how many were fired
        (their runs created or found)."""
        fired = 0
        if self.paused():
            return 0
        now = self.clock()
        for cron_id, tick_ms in await self.crons.due(now, BATCH):
            token = uuid.uuid4().hex
            if not await self.crons.records.claim(cron_id, tick_ms, token, self.claim_ms):
                continue  # another replica's, or changed meanwhile
            cron = await self.crons.stored(cron_id)
            if cron is None:
                continue
            end = _end_ms(cron.get("end_time"))
            if (end is None or tick_ms <= end) and not self.paused():
                run_id, thread_id = tick_ids(cron_id, tick_ms)
                try:
                    await self._fire(cron, run_id, cron.get("thread_id") or thread_id)
                    fired += 1
                except Exception as refused:
                    if is_store_down(refused):
                        raise  # the claim expires; the tick is fired once the store is back
                    if isinstance(refused, NotFound) and refused.code == "thread_not_found":
                        # Its thread is gone (deleted elsewhere, or expired): so is the cron, as
                        # langgraph-api cascades a thread's deletion to its crons.
                        await self.crons.records.delete(cron[_OWNER], cron_id)
                        continue
                    # As langgraph-api: the tick is skipped (its assistant or thread is gone, the
                    # thread is busy with reject, a quota): the cron goes on.
                    log.warning(
                        "cron run not created",
                        extra={"cron_id": cron_id, "error": type(refused).__name__},
                    )
            elif self.paused():
                await self.crons.records.release(cron_id, token)  # another replica fires it
                continue
            next_ms = next_tick(cron["schedule"], max(self.clock(), tick_ms / 1000), cron.get("timezone"))
            if next_ms is None:  # the schedule has no later date: the cron stays, idle
                await self.crons.records.advance(cron_id, tick_ms, token, tick_ms, False)
            else:
                await self.crons.records.advance(cron_id, tick_ms, token, next_ms, _due(cron, next_ms))
        return fired

    async def _loop(self) -> None:
        while True:
            try:
                full = await self.run_once() >= BATCH
            except Exception as exc:  # the store is away: its claims expire, the ticks wait
                log.warning("cron scheduler pass failed", extra={"error": type(exc).__name__})
                full = False
            if not full:
                await asyncio.sleep(self.interval)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="cron-scheduler")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
