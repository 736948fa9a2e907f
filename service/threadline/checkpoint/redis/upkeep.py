"""The upkeep operations of the ``redis`` saver: retention (``keep_last``, ``retain``: the
newest checkpoints and the ancestors their delta chains need), delete a thread or the
checkpoints of runs, copy a thread, prune.

A mixin of :class:`~threadline.checkpoint.redis.saver.RedisCheckpointSaver`: each operation is
a generator that yields its I/O (:mod:`~threadline.checkpoint.redis.steps`) to the saver's
driver.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from threadline.checkpoint.redis.cache import BlobCache
from threadline.checkpoint.redis.records import (
    EMPTY_BLOB_BYTES,
    blob_fields_of,
    decode_metadata,
    member,
    parent_of,
    split_member,
    unversioned,
)
from threadline.checkpoint.redis.steps import Commands, Op, Script
from threadline.redis_keys import ThreadKeys


class _Upkeep:
    """The upkeep operations of :class:`~threadline.checkpoint.redis.saver.RedisCheckpointSaver`."""

    # Of the saver (its constructor and BaseCheckpointSaver):
    serde: SerializerProtocol
    cache: BlobCache
    ttl_seconds: int
    # ... and of its reads (:class:`~threadline.checkpoint.redis.reads._Reads`):
    _op_threads: Callable[[], Op]

    def _op_retain(self, thread_id: str, keep: int) -> Op:
        """Drop all but the ``keep`` newest checkpoints of each namespace of a thread.

        Kept as well: every ancestor a kept checkpoint's delta chain needs. A channel without
        a value at a kept checkpoint (an ``empty`` blob, which is what a ``DeltaChannel``
        stores between snapshots) keeps the parent chain back to the nearest checkpoint that
        has a value for it, so ``get_delta_channel_history`` still finds its seed and the
        writes after it. The newest checkpoint of a namespace holds its pending writes and
        interrupts, and is always kept.
        """
        keys = ThreadKeys.of(thread_id)
        (records,) = yield Commands([("HGETALL", keys.cp)])
        by_ns: dict[str, list[str]] = {}
        for m in records:
            ns, checkpoint_id = split_member(m)
            by_ns.setdefault(ns, []).append(checkpoint_id)
        kept = {member(ns, i).encode() for ns, ids in by_ns.items() for i in sorted(ids)[-keep:]}
        if len(kept) == len(records):
            return
        fields = sorted({f for record in records.values() for f in blob_fields_of(record)})
        sizes = yield Commands([("HSTRLEN", keys.blobs, f) for f in fields])
        # 6 bytes is ``empty\0`` or (rarely) an empty bytes value: taken as empty, which keeps more
        empty = {f for f, n in zip(fields, sizes, strict=True) if n in (0, EMPTY_BLOB_BYTES)}
        for start in list(kept):
            ns = split_member(start)[0]
            waiting = {unversioned(f) for f in blob_fields_of(records[start]) if f in empty}
            parent = parent_of(records[start])
            while waiting and parent:
                m = member(ns, parent).encode()
                if m not in records:
                    break
                kept.add(m)
                waiting -= {unversioned(f) for f in blob_fields_of(records[m]) if f not in empty}
                parent = parent_of(records[m])
        doomed = [m for m in records if m not in kept]
        if doomed:
            yield Script("drop", keys.data, doomed)

    def _op_delete_thread(self, thread_id: str) -> Op:
        # The lease and fence counter stay: a turn in flight keeps its lease, and the counter
        # must never restart, or an old token could become valid again.
        yield Commands([("DEL", *ThreadKeys.of(thread_id).data)])
        self.cache.drop(thread_id)

    def _op_delete_for_runs(self, run_ids: Sequence[str], thread_id: str | None = None) -> Op:
        runs = set(run_ids)
        if not runs:
            return
        threads = [thread_id] if thread_id is not None else (yield from self._op_threads())
        for thread_id in threads:
            keys = ThreadKeys.of(thread_id)
            (records,) = yield Commands([("HGETALL", keys.cp)])
            doomed = [
                m for m, rec in records.items() if decode_metadata(self.serde, rec).get("run_id") in runs
            ]
            if doomed:
                yield Script("drop", keys.data, doomed)

    def _op_copy_thread(self, source_thread_id: str, target_thread_id: str) -> Op:
        src, dst = ThreadKeys.of(source_thread_id), ThreadKeys.of(target_thread_id)
        # Field names hold no thread id, so the copy is a verbatim copy of the five keys;
        # read in one MULTI so the copy is a consistent snapshot.
        idx, cp, blobs, widx, w = yield Commands(
            [("ZRANGE", src.idx, 0, -1), ("HGETALL", src.cp), ("HGETALL", src.blobs),
             ("ZRANGE", src.widx, 0, -1), ("HGETALL", src.w)],
            transaction=True,
        )  # fmt: skip
        if not idx:
            return
        commands: list[tuple[Any, ...]] = []
        for key, members in ((dst.idx, idx), (dst.widx, widx)):
            if members:
                commands.append(("ZADD", key, *(x for m in members for x in (0, m))))
        for key, mapping in ((dst.cp, cp), (dst.blobs, blobs), (dst.w, w)):
            if mapping:
                commands.append(("HSET", key, *(x for kv in mapping.items() for x in kv)))
        commands += [("EXPIRE", key, self.ttl_seconds) for key in dst.data]
        yield Commands(commands, transaction=True)

    def _op_prune(self, thread_ids: Sequence[str], strategy: str) -> Op:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        for thread_id in thread_ids:
            keys = ThreadKeys.of(thread_id)
            if strategy == "delete":
                yield Commands([("DEL", *keys.data)])
                continue
            # The latest of each namespace, and what its delta chains need (see _op_retain).
            yield from self._op_retain(thread_id, 1)
