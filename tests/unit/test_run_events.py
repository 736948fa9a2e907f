"""A run's event log (``threadline.runs.events.EventLog``): while nobody streams the run its
events are kept as the graph gave them and encoded only if they go to the store (issue 24)."""

from __future__ import annotations

import pytest

from threadline.runs.events import EventLog
from threadline.runs.records import RunRecord, now_iso

pytestmark = pytest.mark.unit


class SharedStore:
    """A record store other replicas read (so the log holds events back), which keeps what it
    is sent."""

    shared = True

    def __init__(self) -> None:
        self.appended: list[list[tuple[str, bytes]]] = []

    async def append_events(self, thread_id: str, run_id: str, events: list[tuple[str, bytes]]) -> None:
        self.appended.append(list(events))


class State:
    """A value whose JSON encoding is counted (wire.dumps encodes it by its model_dump)."""

    encoded = 0

    def model_dump(self) -> dict:
        State.encoded += 1
        return {"messages": ["hi"]}


def log(store: SharedStore, watched: bool = False) -> EventLog:
    now = now_iso()
    run = RunRecord("r", "t", "alice", "a", now, now, "running", {}, "enqueue", {})
    return EventLog(store, run, watched=watched)  # type: ignore[arg-type]


async def test_the_events_of_a_run_nobody_streams_are_encoded_only_when_read_and_once() -> None:
    State.encoded = 0
    events = log(SharedStore())
    events.add("values", State())
    events.add("values", State())
    pending = await events.take()
    assert len(pending) == 2 and State.encoded == 0  # a store that drops them never encodes them
    assert list(pending) == [("values", b'{"messages":["hi"]}')] * 2
    assert list(pending) == [("values", b'{"messages":["hi"]}')] * 2
    assert State.encoded == 2


async def test_a_client_that_starts_streaming_gets_the_events_so_far_and_then_each_as_it_comes() -> None:
    State.encoded = 0
    store = SharedStore()
    events = log(store)
    events.add("values", State())
    events.go_live()
    pending = await events.take()  # waits for the flush go_live started
    assert store.appended == [[("values", b'{"messages":["hi"]}')]] and len(pending) == 0
    events.add("values", State())
    assert State.encoded == 2  # a live log encodes an event as it comes
    await events.flush()
    assert store.appended[-1] == [("values", b'{"messages":["hi"]}')]


async def test_a_streamed_run_encodes_each_event_as_it_comes() -> None:
    State.encoded = 0
    events = log(SharedStore(), watched=True)
    events.add("values", State())
    assert State.encoded == 1
    assert list(await events.take()) == [("values", b'{"messages":["hi"]}')]
