"""Decoded channel values of the ``redis`` saver, kept in the process that wrote or read them.

A blob field (``ns\\0channel\\0version``, see :mod:`threadline.checkpoint.redis.records`) names one
value for good: versions carry a random part, and a field is never rewritten with other
content. So this cache cannot go stale. Which checkpoint is the latest, and which blobs it
names, is still read from Redis on every ``get_tuple``; only what those blobs hold comes from
here when this process has it. A thread whose next turn lands on another replica just misses.

What it saves: a turn reads its thread twice (the turn's own read under the lease, then
LangGraph's at the start of the run), and each read used to fetch and deserialize the whole
message list: at turn 50, 100 messages, ~1.7 ms of CPU per read. With the values the turn's
previous writes left here, a read is one round trip and no deserialization.

Values are handed out as shallow copies of lists, dicts and sets, so a caller that appends to
a list it was given does not change what the next caller gets. Objects inside (messages) are
shared: like LangGraph's own channels, this relies on state values not being mutated in place.

Bounded by the serialized size of what it holds (``max_bytes``; decoded messages take ~6x
that in memory: 26 KB serialized, 157 KB decoded for 100 messages); whole threads are evicted,
least recently used first, and only the newest version of each channel is kept.

For a list stored item by item (format 2) an entry also holds its segments: the next put
stores only what was appended to the cached value, and a read of a newer version of the list
fetches only the items past the cached ones.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, NamedTuple

from threadline.checkpoint.redis.lists import Segment
from threadline.checkpoint.redis.records import NO_VALUE, unversioned

__all__ = ["MISS", "NO_VALUE", "BlobCache", "Entry"]

# What :meth:`BlobCache.get` returns for a field it does not hold.
MISS = object()


def _fresh(value: Any) -> Any:
    if isinstance(value, list | dict | set):
        return value.copy()
    return value


class Entry(NamedTuple):
    """What the cache holds for one channel of one thread."""

    field: bytes  # the version's blob field
    value: Any
    size: int  # serialized bytes
    segments: tuple[Segment, ...] | None  # None: stored whole


class BlobCache:
    """Decoded blobs by ``(thread_id, blob field)``.

    Args:
        max_bytes: the budget, counted in serialized bytes; 0 turns the cache off.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        # thread id -> {field without its version -> entry}
        self._threads: OrderedDict[str, dict[bytes, Entry]] = OrderedDict()
        self._bytes = 0
        # The saver's sync twins may run in worker threads next to the event loop.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return sum(len(channels) for channels in self._threads.values())

    @property
    def bytes(self) -> int:
        return self._bytes

    def get(self, thread_id: str, field: bytes) -> Any:
        """The value of ``field`` (a copy of a container), :data:`NO_VALUE`, or :data:`MISS`."""
        with self._lock:
            channels = self._threads.get(thread_id)
            entry = channels.get(unversioned(field)) if channels else None
            if entry is None or entry.field != field:
                return MISS
            self._threads.move_to_end(thread_id)
            return _fresh(entry.value)

    def held(self, thread_id: str) -> dict[bytes, Any]:
        """Every value held for ``thread_id`` by blob field (copies of containers), at once: a
        reader that told Redis it holds them must not lose one to an eviction meanwhile."""
        with self._lock:
            channels = self._threads.get(thread_id)
            if not channels:
                return {}
            self._threads.move_to_end(thread_id)
            return {entry.field: _fresh(entry.value) for entry in channels.values()}

    def latest(self, thread_id: str, field: bytes) -> Entry | None:
        """The entry of ``field``'s channel, whatever its version; its value is *not* a copy
        (to compare with, not to hand out)."""
        with self._lock:
            channels = self._threads.get(thread_id)
            return channels.get(unversioned(field)) if channels else None

    def put(
        self,
        thread_id: str,
        field: bytes,
        value: Any,
        size: int,
        segments: tuple[Segment, ...] | None = None,
    ) -> None:
        """Remember ``value`` (:data:`NO_VALUE` for an empty blob) as the content of ``field``,
        replacing an older version of the same channel; ``segments`` if it is a list stored
        item by item."""
        if size > self.max_bytes:
            return
        with self._lock:
            channels = self._threads.setdefault(thread_id, {})
            self._threads.move_to_end(thread_id)
            old = channels.get(key := unversioned(field))
            if old is not None:
                self._bytes -= old.size
            channels[key] = Entry(field, _fresh(value), size, segments)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _thread, evicted = self._threads.popitem(last=False)
                self._bytes -= sum(entry.size for entry in evicted.values())

    def drop(self, thread_id: str) -> None:
        """Forget a thread (it was deleted: nothing will name its blobs again)."""
        with self._lock:
            channels = self._threads.pop(thread_id, None)
            if channels:
                self._bytes -= sum(entry.size for entry in channels.values())
