"""The write operations of the ``redis`` saver: ``put`` and ``put_writes``.

Formats 2 and 3 store a list value item by item, each item once, when it extends the version
this process holds (:meth:`_Writes._plan_list`); format 3 also stores a parent's list-valued
pending writes and its input by reference to the items its child's put stores
(:meth:`_Writes._refs`, :meth:`_Writes._drefs`), from the memos of what this process wrote.

A mixin of :class:`~threadline.checkpoint.redis.saver.RedisCheckpointSaver`: each operation is
a generator that yields its I/O (:mod:`~threadline.checkpoint.redis.steps`) to the saver's
driver.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.serde.base import SerializerProtocol

from threadline.checkpoint.errors import FencedError
from threadline.checkpoint.redis.cache import BlobCache
from threadline.checkpoint.redis.lists import (
    MAX_SEGMENTS,
    DictRef,
    Segment,
    encode_dref,
    encode_segments,
    item_field,
)
from threadline.checkpoint.redis.records import (
    NO_VALUE,
    Blob,
    blob_field,
    checkpoint_config,
    encode_blob,
    encode_item,
    encode_record,
    encode_writes,
    fencing_token,
    member,
    pack,
    ref_write,
    thread_ns_id,
    unversioned,
)
from threadline.checkpoint.redis.steps import Commands, Op, Script
from threadline.redis_keys import ThreadKeys

# A put sends the fields it stores in its script's ARGV up to this many bytes (a turn's
# messages, descriptors and input: one script call, no MULTI/EXEC); above, a plain HSET before
# the script (on Redis 7.0 a 150 KB script argument costs ~0.25 ms of server time, a plain
# HSET of it ~0.02 ms).
PUT_INLINE_BYTES = 16 * 1024
# Checkpoints whose pending writes a saver remembers (encoded), so the put of their child can
# store the writes its list appended by reference (format 3): LangGraph puts the child right
# after the writes, so a few per thread in flight suffice.
_RECENT_WRITES = 1024


# A dict blob is considered for storage by reference (_dict_of_lists) up to this size: an
# input is one or a few messages; bigger dicts are not worth encoding their items again.
_DICT_KEYS, _DICT_ITEMS = 4, 16


def _bounded(memo: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    """Set ``memo[key]`` as the newest entry, forgetting the oldest beyond _RECENT_WRITES.

    The memos only make storage smaller (a miss stores a value whole), so a race between
    threads of the sync API is harmless: it may forget an entry, never corrupt one.
    """
    memo.pop(key, None)
    memo[key] = value  # appended: the newest
    while len(memo) > _RECENT_WRITES:
        try:
            memo.popitem(last=False)
        except KeyError:  # emptied by another thread meanwhile
            break


# With keep_last, a thread is trimmed once it holds this many checkpoints more than it keeps:
# the drop script reads every record and blob field name of the thread, so it runs once per
# ~3 turns of a MessagesState graph (3 checkpoints a turn), not on every put.
RETAIN_BATCH = 10
# Attempts of one put: an extension can meet a fork (then a lineage of its own) and then
# find its base pruned (then the list whole).
_PUT_ATTEMPTS = 3


class _ListPut(NamedTuple):
    """How one put stores one list value item by item."""

    field: bytes  # the version's field: holds the descriptor
    value: list[Any]
    size: int  # serialized bytes of all its items
    segments: tuple[Segment, ...]
    fresh: list[tuple[bytes, bytes]]  # items of a new lineage: plain HSET
    appended: list[tuple[bytes, bytes]]  # items appended to an existing lineage: by the script
    must_exist: bytes | None  # the last item of the list it extends
    placed: list[tuple[bytes, int, bytes]]  # (lineage, position, bytes) of the items it stores


class _Written(NamedTuple):
    """A pending write this process stored whose value is a list (format 3)."""

    key: bytes  # ``ns\0channel``, as list items of that channel are named
    items: list[bytes]  # the list's items, encoded as list items are
    record: bytes  # the write record as stored


def _find_run(placed: Sequence[tuple[bytes, int, bytes]], items: list[bytes]) -> tuple[bytes, int] | None:
    """``(lineage, start)`` of a run of stored items with exactly the bytes of ``items``, at
    consecutive positions of one lineage, or None."""
    k = len(items)
    for j in range(len(placed) - k + 1):
        run = placed[j : j + k]
        lineage, start = run[0][0], run[0][1]
        if all(
            x[2] == raw and x[0] == lineage and x[1] == start + i
            for i, (x, raw) in enumerate(zip(run, items, strict=True))
        ):
            return lineage, start
    return None


def _extends(old: list[Any], new: list[Any]) -> bool:
    """``new`` starts with the items of ``old``: list equality in C, identity first for each
    item, then ``==`` (add_messages keeps the message objects). A Python-level loop over the
    prefix cost ~0.15 ms a put at 1200 messages: the saver's share of a turn that grew with the
    conversation; this is ~3 us."""
    n = len(old)
    return len(new) >= n and new[:n] == old


class _Writes:
    """The write operations of :class:`~threadline.checkpoint.redis.saver.RedisCheckpointSaver`."""

    # Of the saver (its constructor, which explains the memos, and BaseCheckpointSaver):
    serde: SerializerProtocol
    cache: BlobCache
    ttl_seconds: int
    format: int
    keep_last: int
    written_bytes: dict[str, int]
    _written: OrderedDict[tuple[str, str, str], list[_Written]]
    _packed: OrderedDict[tuple[str, str, str], list[tuple[bytes, bytes]]]
    _dicts: OrderedDict[tuple[str, str, str], list[tuple[bytes, dict[str, list[bytes]]]]]
    _placed: OrderedDict[tuple[str, str, str], dict[bytes, list[tuple[bytes, int, bytes]]]]
    # ... and of its upkeep (:class:`~threadline.checkpoint.redis.upkeep._Upkeep`):
    _op_retain: Callable[[str, int], Op]

    def _op_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Op:
        thread_id, ns, _parent = thread_ns_id(config)
        record = encode_record(
            self.serde, config, checkpoint, metadata, compress=self.format >= 2, zdict=self.format >= 3
        )
        keys = ThreadKeys.of(thread_id)
        head = [self.ttl_seconds, fencing_token(config), member(ns, checkpoint["id"]), record]
        values = checkpoint["channel_values"]
        blobs: list[Blob] = []
        as_lists: dict[bytes, Any] = {}
        for channel, version in new_versions.items():
            field, value = blob_field(ns, channel, version).encode(), values.get(channel, NO_VALUE)
            # Lists (add_messages, operator.add) only: a list subclass may not survive items.
            if self.format >= 2 and self.cache.max_bytes and type(value) is list:
                as_lists[field] = value
            else:
                blobs.append(encode_blob(self.serde, field, value))
        written = self._written.pop((thread_id, ns, _parent), []) if _parent else []
        mirror = self._packed.pop((thread_id, ns, _parent), []) if _parent else []
        dicts = self._dicts.pop((thread_id, ns, _parent), []) if _parent else []
        mode = "extend"
        for _attempt in range(_PUT_ATTEMPTS):
            lists = [self._plan_list(thread_id, f, v, mode) for f, v in as_lists.items()]
            # Format 3 stores no ``empty`` blob (a channel version without a value, e.g. each
            # branch channel once a turn: ~90 bytes): every reader takes a missing blob for
            # no value, as it takes ``empty``.
            plain = [(b.field, b.data) for b in blobs if self.format < 3 or b.value is not NO_VALUE]
            for lp in lists:
                plain += [(lp.field, encode_segments(lp.segments)), *lp.fresh]
            # Small (a turn's messages, descriptors, the input): in the script's ARGV, so the
            # put is one script call; big: a plain HSET before it, in one MULTI/EXEC.
            inline: list[tuple[bytes, bytes]] = []
            if sum(len(f) + len(d) for f, d in plain) <= PUT_INLINE_BYTES:
                inline, plain = plain, []
            musts = [lp.must_exist for lp in lists if lp.must_exist is not None]
            appends = [lp.appended for lp in lists if lp.appended]
            args = [*head, len(plain), *(f for f, _ in plain), len(musts), *musts, len(appends)]
            for items in appends:
                args += [len(items), *(x for pair in items for x in pair)]
            refs = self._refs(member(ns, _parent or "").encode(), written, mirror, lists)
            args += [len(refs) // 3, *refs]
            drefs = self._drefs(dicts, lists)
            args += [len(drefs) // 2, *drefs]
            args += [len(inline), *(x for pair in inline for x in pair)]
            commands: list[Any] = [Script("put", keys, args)]
            if plain:
                commands.insert(0, ("HSET", keys.blobs, *(x for pair in plain for x in pair)))
            if self.keep_last:
                commands.append(("ZCARD", keys.idx))  # a count: needs no transaction
            if len(commands) == 1:
                stored, count = (yield commands[0]), 0
            else:
                replies = yield Commands(commands, transaction=bool(plain))
                stored, count = replies[1 if plain else 0], replies[-1] if self.keep_last else 0
            self.written_bytes["put"] += (
                len(record)
                + sum(len(d) for _, d in plain)
                + sum(len(d) for _, d in inline)
                + sum(len(d) for items in appends for _, d in items)
                + sum(len(x) for x in refs)
                + sum(len(x) for x in drefs)
            )
            if stored == 1:
                break
            if not stored:
                raise FencedError(thread_id)
            # -2: a fork met items of another checkpoint; -1: the list it extends is gone.
            mode = "fork" if stored == -2 and mode == "extend" else "whole"
        else:  # pragma: no cover - "whole" has nothing to meet
            raise RuntimeError(f"checkpoint put to thread {thread_id!r} did not settle")
        # Only what Redis now holds: a fenced put took its blobs out again.
        for blob in blobs:
            self.cache.put(thread_id, blob.field, blob.value, len(blob.data))
        for lp in lists:
            self.cache.put(thread_id, lp.field, lp.value, lp.size, lp.segments)
        if self.format >= 3 and _parent and any(lp.placed for lp in lists):
            _bounded(
                self._placed, (thread_id, ns, _parent), {unversioned(lp.field): lp.placed for lp in lists}
            )
        if self.format >= 3 and (mine := [d for b in blobs if (d := self._dict_of_lists(b)) is not None]):
            _bounded(self._dicts, (thread_id, ns, checkpoint["id"]), mine)
        if self.keep_last and count > self.keep_last + RETAIN_BATCH:
            yield from self._op_retain(thread_id, self.keep_last)
        return checkpoint_config(thread_id, ns, checkpoint["id"])

    def _refs(
        self,
        parent: bytes,
        written: Sequence[_Written],
        mirror: Sequence[tuple[bytes, bytes]],
        lists: Sequence[_ListPut],
    ) -> list[bytes]:
        """``parent's w field, SHA-1 of its value, new value`` where the parent's list-valued
        pending writes whose items this put stores (same bytes, consecutive positions of one
        lineage of the same channel) are records by reference: a write then costs ~100 bytes
        instead of its messages once more (a MessagesState step's writes are the messages it
        added). ``mirror``: ``(write field, record)`` as this process stored them in that
        field, in order; the script swaps the value only if Redis holds exactly that (else
        another writer was there too: the writes stay whole)."""
        if not written or not mirror:
            return []
        placed = {unversioned(lp.field): lp.placed for lp in lists if lp.placed}
        records = [record for _field, record in mirror]
        new = list(records)
        for w in written:
            ref = _find_run(placed.get(w.key, ()), w.items)
            if ref is not None and w.record in records:
                new[records.index(w.record)] = ref_write(w.record, ref[0], ref[1], ref[1] + len(w.items))
        if new == records:
            return []
        return [parent, hashlib.sha1(pack(records)).hexdigest().encode(), pack(new)]

    def _dict_of_lists(self, blob: Blob) -> tuple[bytes, dict[str, list[bytes]]] | None:
        """``(field, items encoded per key)`` of a small dict of non-empty lists
        (a MessagesState input), which a child's put may store by reference; else None."""
        value = blob.value
        if type(value) is not dict or not value or len(value) > _DICT_KEYS:
            return None
        if not all(
            isinstance(k, str) and "\x00" not in k and type(v) is list and v for k, v in value.items()
        ):
            return None
        if sum(len(v) for v in value.values()) > _DICT_ITEMS:
            return None
        encoded = {k: [encode_item(self.serde, item) for item in v] for k, v in value.items()}
        return blob.field, encoded

    def _drefs(
        self, dicts: Sequence[tuple[bytes, dict[str, list[bytes]]]], lists: Sequence[_ListPut]
    ) -> list[bytes]:
        """``blob field, blob by reference`` for each of the parent's dict
        blobs (:meth:`_dict_of_lists`) whose every list this put stores as items: the input
        of a MessagesState turn then costs ~60 bytes instead of its message once more."""
        out: list[bytes] = []
        for field, encoded in dicts:
            refs: list[DictRef] = []
            for key, items in encoded.items():
                for lp in lists:
                    run = _find_run(lp.placed, items)
                    if run is not None:
                        channel = unversioned(lp.field).split(b"\x00", 1)[1]
                        refs.append(DictRef(key, channel, run[0], run[1], run[1] + len(items)))
                        break
                else:
                    break
            if len(refs) == len(encoded):
                out += [field, encode_dref(refs)]
        return out

    def _plan_list(self, thread_id: str, field: bytes, value: list[Any], mode: str) -> _ListPut:
        """Store ``value`` as what it appends to the version this process holds of the same
        list (``mode`` ``extend``), in a lineage of its own after that version's items
        (``fork``), or all its items in a new lineage (``whole``, or nothing to build on)."""
        key = unversioned(field)
        lineage = field[len(key) + 1 :]  # the version: unique, so a new lineage is free
        base = self.cache.latest(thread_id, field) if mode != "whole" else None
        if base is not None and base.segments is not None and _extends(base.value, value):
            n, segments = len(base.value), list(base.segments)
            tail = [encode_item(self.serde, item) for item in value[n:]]
            size = base.size + sum(map(len, tail))
            must = item_field(key, segments[-1].lineage, n - 1) if segments else None
            if not tail:
                return _ListPut(field, value, base.size, tuple(segments), [], [], must, [])
            if segments and mode == "extend":
                last = segments[-1]
                segments[-1] = Segment(last.lineage, last.start, len(value))
                placed = [(last.lineage, n + i, raw) for i, raw in enumerate(tail)]
                appended = [(item_field(key, ln, i), raw) for ln, i, raw in placed]
                return _ListPut(field, value, size, tuple(segments), [], appended, must, placed)
            if len(segments) < MAX_SEGMENTS:
                segments.append(Segment(lineage, n, len(value)))
                placed = [(lineage, n + i, raw) for i, raw in enumerate(tail)]
                fresh = [(item_field(key, ln, i), raw) for ln, i, raw in placed]
                return _ListPut(field, value, size, tuple(segments), fresh, [], must, placed)
        items = [encode_item(self.serde, item) for item in value]
        placed = [(lineage, i, raw) for i, raw in enumerate(items)]
        fresh = [(item_field(key, ln, i), raw) for ln, i, raw in placed]
        segments = (Segment(lineage, 0, len(value)),) if value else ()
        return _ListPut(field, value, sum(map(len, items)), segments, fresh, [], None, placed)

    def _op_put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Op:
        thread_id, ns, checkpoint_id = thread_ns_id(config)
        triples = encode_writes(self.serde, config, writes, task_id, task_path)
        written = self._list_writes(ns, writes, triples) if self.format >= 3 else []
        written_key = [member(ns, checkpoint_id or "").encode()]
        placed = self._placed.get((thread_id, ns, checkpoint_id or ""), {})
        for w in written:  # the child is stored already: refer to its items straight away
            ref = _find_run(placed.get(w.key, ()), w.items)
            if ref is not None:
                i = triples.index(w.record)
                triples[i] = ref_write(w.record, ref[0], ref[1], ref[1] + len(w.items))
        if self.format >= 3:  # all of a checkpoint's writes in one field (PUT_WRITES_PACKED)
            packed = pack(triples[1::3])
            name = "put_writes_packed"
            args = [self.ttl_seconds, fencing_token(config), *written_key, packed, *triples[2::3]]
        else:
            name, args = "put_writes", [self.ttl_seconds, fencing_token(config), *triples]
        self.written_bytes["put_writes"] += sum(len(x) for x in triples[1::3])
        if self.format >= 3 and checkpoint_id is not None:
            # Before the script: a put of the child planned meanwhile finds them (its script
            # swaps the field's value only if it is what is recorded here).
            key = (thread_id, ns, checkpoint_id)
            if written:
                _bounded(self._written, key, [*self._written.get(key, ()), *written])
            mirror = list(self._packed.get(key, ()))
            at = {f: i for i, (f, _r) in enumerate(mirror)}
            for i in range(0, len(triples), 3):  # the script's merge: keep, or replace specials
                field, record, replace = triples[i : i + 3]
                if field not in at:
                    at[field] = len(mirror)
                    mirror.append((field, record))
                elif replace == b"1":
                    mirror[at[field]] = (field, record)
            _bounded(self._packed, key, mirror)
        if not (yield Script(name, ThreadKeys.of(thread_id), args)):
            raise FencedError(thread_id)

    def _list_writes(
        self, ns: str, writes: Sequence[tuple[str, Any]], triples: Sequence[bytes]
    ) -> list[_Written]:
        """The list-valued writes of a put_writes, encoded item by item, for the put of the
        checkpoint's child (:meth:`_refs`)."""
        return [
            _Written(blob_field(ns, channel, "").encode()[:-1],
                     [encode_item(self.serde, v) for v in value], triples[3 * i + 1])
            for i, (channel, value) in enumerate(writes)
            if type(value) is list and value and not channel.startswith("__")
        ]  # fmt: skip
