"""A run's events: the graph's stream parts turned into the API's events (:class:`Emitter`,
names and payloads as langgraph-api's) and their way to the record store (:class:`EventLog`):
batched, as they happen while a client streams the run, else with the run's end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Literal, get_args

from langchain_core.messages import BaseMessageChunk, message_chunk_to_message

from threadline.quotas import EVENTS_PER_RUN
from threadline.runs import wire
from threadline.runs.records import RecordStore, RunRecord

# Stream modes a client may ask for; "messages-tuple" and "messages" both come from LangGraph's
# "messages" mode, "events" from astream_events.
StreamMode = Literal[
    "values", "updates", "messages", "messages-tuple", "custom", "debug", "events", "checkpoints", "tasks"
]
STREAM_MODES: tuple[str, ...] = get_args(StreamMode)
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


class TooManyEvents(RuntimeError):
    """The run emitted MAX_EVENTS_PER_RUN events: it ends as an error (its ``error`` event
    names the setting: a RuntimeError's message is shown), what it checkpointed stays."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the run emitted more than {EVENTS_PER_RUN}={limit} events")


class _Unencoded:
    """An event's data not JSON-encoded yet (see :class:`EventLog`)."""

    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        self.data = data


class PendingEvents:
    """Events a run's end takes with it, ``(name, JSON data)`` when iterated: those not encoded
    yet are encoded on the first iteration (once), so a store that does not send them (nobody
    asks for them: ``RecordStore.finish_run``) never encodes them."""

    def __init__(self, events: list[tuple[str, bytes | _Unencoded]]) -> None:
        self._events = events

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        self._events = _encoded(self._events)
        return iter(self._events)  # type: ignore[arg-type]


def _encoded(events: list[tuple[str, bytes | _Unencoded]]) -> list[tuple[str, bytes]]:
    return [(name, wire.dumps(d.data) if isinstance(d, _Unencoded) else d) for name, d in events]


class EventLog:
    """A run's events on their way to the store, in order: appended at most
    :data:`EVENT_FLUSH_SECONDS` after they happen once a client streams the run (:attr:`live`),
    :data:`EVENT_QUIET_FLUSH_SECONDS` before, all of that window in one round trip; what is left
    when the run ends goes with its end (:meth:`take`, then ``finish_run``).

    While the log is not live its events are kept as the graph gave them and JSON-encoded only
    when they go to the store: the ``values`` events of a run nobody streams are whole states,
    encoded at every step (~0.2 ms each for a 100-message chat) only for the run's end to drop
    them (issue 24). A client that starts streaming the run has them encoded then: a graph that
    changes its state's objects in place after a step would show it in the earlier events too.
    """

    def __init__(self, records: RecordStore, run: RunRecord, watched: bool = False) -> None:
        self.records = records
        self.run = run
        # Whether a client streams the run (so its events are kept once it ends).
        self.watched = watched
        # A store in this process takes an append without a round trip: always live.
        self.live = watched or not records.shared
        self._pending: list[tuple[str, bytes | _Unencoded]] = []
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
        self._pending.append((event, wire.dumps(data) if self.live else _Unencoded(data)))
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
                batch, self._pending = _encoded(self._pending), []
                try:
                    await self.records.append_events(self.run.thread_id, self.run.run_id, batch)
                except Exception as exc:  # sent again with the next flush or the run's end
                    self._pending[:0] = batch
                    self._failed = exc
                    return
        finally:
            self._flushing = None

    async def take(self) -> PendingEvents:
        """The events not appended yet, once the append in flight is done; nothing more is
        appended by this log unless :meth:`add` is called again."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is not None:
            await asyncio.wait([self._flushing])
        pending, self._pending = self._pending, []
        return PendingEvents(pending)

    async def flush(self) -> None:
        """Append every event now."""
        if events := await self.take():
            await self.records.append_events(self.run.thread_id, self.run.run_id, list(events))

    def drop(self) -> None:
        """Forget the events not appended yet (an append in flight still lands)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending = []


class Emitter:
    """Turns graph stream parts into the API's events (names and payloads as langgraph-api's)
    and queues them on the run's event log."""

    def __init__(self, events: EventLog, requested: list[str], max_events: int = 0) -> None:
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
            # Only the modes asked for: an interrupt is not sent as values of its own, LangGraph's
            # values carry it (langgraph-api adds one only with langgraph <= 1.0.3).
            if mode == "debug" and chunk.get("type") == "checkpoint" and chunk.get("payload"):
                chunk = {**chunk, "payload": wire.debug_checkpoint(chunk["payload"])}
            await self(f"{mode}{suffix}", chunk)

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
