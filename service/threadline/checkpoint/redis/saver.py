"""``redis`` backend: a LangGraph checkpoint saver on plain Redis data structures.

Strings, hashes and sorted sets only, no RedisJSON or RediSearch, so it works in any db
number, on Redis >= 6.2, Valkey and managed Redis. The keys are named in
:mod:`threadline.redis_keys`; the record format is :mod:`threadline.checkpoint.redis.records`,
the Lua scripts (with their KEYS/ARGV) :mod:`threadline.checkpoint.redis.scripts`.

Round trips: ``put`` is one Lua script call (the changed channels' blobs in its ARGV when
they are small, as a turn's are; else a plain HSET of them before the script, in one
MULTI/EXEC), ``put_writes`` one Lua script, a latest (or by-id)
``get_tuple`` at most two: a Lua script that finds the checkpoint and returns its record and
pending writes, then one HMGET of the channel blobs this process does not hold decoded already
(none when it wrote or read them last: :mod:`threadline.checkpoint.redis.cache`). Large values
never pass through Lua: on Redis 7.0 a 150 KB argument or reply costs a script ~0.25 ms of
server time, a plain HSET/HMGET of it ~0.02 ms (measured at turn 300 of the benchmark
conversation).

Each operation is written once, as a generator that yields the I/O it needs (:class:`Script`
or :class:`Commands`) and receives the reply; the sync and async methods differ only in the
driver that performs that I/O (``_run_sync``/``_run_async`` and the ``_iter_*`` twins).

Fencing: a config whose ``configurable`` carries a non-empty ``fencing_token`` makes ``put``
and ``put_writes`` conditional, inside the same script, on ``GET tl:{thread}:lease`` being
that token; otherwise nothing is written and :class:`FencedError` is raised. LangGraph passes
the run's ``configurable`` through to every ``aput``/``aput_writes`` (verified in
``tests/integration/test_redis_saver.py``); the token is not stored in checkpoint metadata.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections import OrderedDict
from collections.abc import AsyncIterator, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import redis
import redis.asyncio as aioredis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from redis.exceptions import NoScriptError

from threadline import redis_client
from threadline.checkpoint.errors import FencedError
from threadline.checkpoint.redis.cache import MISS, BlobCache
from threadline.checkpoint.redis.pipelining import ScriptPipelining
from threadline.checkpoint.redis.records import (
    EMPTY_BLOB_BYTES,
    MAX_SEGMENTS,
    NO_VALUE,
    Blob,
    DictRef,
    Segment,
    blob_field,
    blob_fields_of,
    channel_values,
    checkpoint_config,
    decode_blob,
    decode_dref,
    decode_item,
    decode_metadata,
    decode_segments,
    decode_tuple,
    decode_writes,
    encode_blob,
    encode_dref,
    encode_item,
    encode_record,
    encode_segments,
    encode_writes,
    fencing_token,
    is_reference,
    item_field,
    member,
    metadata_matches,
    ns_range,
    pack,
    parent_of,
    ref_write,
    shared_prefix,
    split_member,
    thread_ns_id,
    unversioned,
)
from threadline.checkpoint.redis.scripts import SCRIPTS
from threadline.redis_keys import INDEX_KEY_PATTERN, ThreadKeys, thread_id_of_index_key

# --- the I/O steps an operation asks its driver for (sync or async) --------------------------


@dataclass(frozen=True, slots=True)
class Script:
    """Run one registered Lua script; the driver sends back its reply."""

    name: str
    keys: Sequence[str]
    args: Sequence[Any]


@dataclass(frozen=True, slots=True)
class Commands:
    """Run commands (tuples, or :class:`Script` calls) in one round trip.

    A MULTI/EXEC transaction when ``transaction``. The driver sends back the list of replies.
    """

    commands: Sequence[tuple[Any, ...] | Script]
    transaction: bool = False


@dataclass(frozen=True, slots=True)
class Scan:
    """Every key matching ``pattern``, on every master of a Cluster (SCAN; not for hot paths).

    The driver sends back the list of keys (a key may repeat, as with SCAN)."""

    pattern: str


@dataclass(frozen=True, slots=True)
class Emit:
    """Hand one item to the caller of an iterating operation (``list``)."""

    value: Any


Step = Script | Commands | Scan | Emit
Op = Generator[Step, Any, Any]

# Checkpoints loaded per script call while listing.
_PAGE = 100
# A put sends the fields it stores in its script's ARGV up to this many bytes (a turn's
# messages, descriptors and input: one script call, no MULTI/EXEC); above, a plain HSET before
# the script (on Redis 7.0 a 150 KB script argument costs ~0.25 ms of server time, a plain
# HSET of it ~0.02 ms).
PUT_INLINE_BYTES = 16 * 1024
# Default budget of the decoded-blob cache, in serialized bytes (CHECKPOINT_REDIS_CACHE_MB).
DEFAULT_CACHE_BYTES = 16 * 2**20
# What put writes by default (CHECKPOINT_REDIS_FORMAT); see the class.
LATEST_FORMAT = 3
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


class RedisCheckpointSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoint saver on plain Redis; see the module docstring.

    Args:
        client: an async client with ``decode_responses=False`` (records are bytes).
        ttl_seconds: every key of a thread expires this long after its last write.
        sync_client: needed only for the sync methods (tools, scripts).
        serde: defaults to LangGraph's ``JsonPlusSerializer``.
        cache_bytes: budget of the decoded-blob cache (:mod:`threadline.checkpoint.redis.cache`),
            in serialized bytes; 0 turns it off (and with it format 2's deltas: a list is
            then stored whole at each version, as in format 1).
        format: what ``put`` writes (all are always read). 3: as 2, and a pending write whose
            list value a child checkpoint appended is stored by reference to those items, and
            records compress their versions against their own field names; 2: a list value is
            stored item by item, each item once, when it extends the version this process
            holds; 1: every value whole, readable by releases before format 2
            (``CHECKPOINT_REDIS_FORMAT``).
        keep_last: 0 keeps every checkpoint; N keeps the N newest of each namespace of a
            thread, plus every older one the delta chain of a kept one needs (see
            :meth:`aretain`), trimming once a thread holds ``RETAIN_BATCH`` more
            (``CHECKPOINT_KEEP_LAST``).

    Raises:
        ValueError: a client decodes responses, ``ttl_seconds`` is not positive, an unknown
            ``format``, or a negative ``keep_last``.
    """

    # adelete_for_runs takes the runs' thread (threadline.checkpoint.delete_for_runs).
    deletes_runs_of_one_thread = True

    def get_next_version(self, current: str | int | None, channel: None) -> str:
        """The channel version after ``current``: ``<counter>.<random>``.

        Formats 1 and 2 make them as the in-memory, SQLite and Postgres savers do (a 32-digit
        counter and a float: 51 characters). Format 3 makes them 25 characters, a 12-digit
        counter and 48 random bits in hex: a version is written ~20 times a turn (field names,
        records, descriptors, lineage names), ~0.6 KB a turn at 51 characters. LangGraph orders
        versions as strings (``max()``, ``>``): a 12-digit version is greater than any 32-digit
        one (which has 20 leading zeros), and counts on from it, so a thread written before
        continues in order. A release that makes 32-digit versions must not continue a thread
        after this one (the upgrade step: every replica on this release before format 3).
        """
        if self.format < 3:
            return InMemorySaver.get_next_version(self, current, channel)  # type: ignore[arg-type]
        if current is None:
            counter = 0
        elif isinstance(current, int):
            counter = current
        else:
            counter = int(current.split(".")[0])
        return f"{counter + 1:012}.{random.getrandbits(48):012x}"

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        ttl_seconds: int,
        sync_client: redis.Redis | None = None,
        serde: SerializerProtocol | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        format: int = LATEST_FORMAT,
        keep_last: int = 0,
    ) -> None:
        super().__init__(serde=serde)
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        if format not in (1, 2, 3):
            raise ValueError("format must be 1, 2 or 3")
        for c in (client, sync_client):
            if c is not None and c.get_connection_kwargs().get("decode_responses"):
                raise ValueError("RedisCheckpointSaver needs clients with decode_responses=False")
        self.ttl_seconds = ttl_seconds
        self.format = format
        if keep_last < 0:
            raise ValueError("keep_last must be 0 (keep all) or positive")
        self.keep_last = keep_last
        # Serialized bytes sent to Redis by write operations, by op (put, put_writes): what
        # the metrics wrapper reports as threadline_checkpoint_written_bytes_total.
        self.written_bytes: dict[str, int] = {"put": 0, "put_writes": 0}
        self._client = client
        self._sync_client = sync_client
        self._owns_clients = False
        self.cache = BlobCache(cache_bytes)
        # (thread, ns, checkpoint id) -> its list-valued pending writes this process stored;
        # and the items this process stored in a child of that checkpoint, by ``ns\0channel``
        # (LangGraph may put the child before the step's writes are in: then the writes refer).
        self._written: OrderedDict[tuple[str, str, str], list[_Written]] = OrderedDict()
        # ... and (write field, record) of every write it stored there, as the w field holds them
        self._packed: OrderedDict[tuple[str, str, str], list[tuple[bytes, bytes]]] = OrderedDict()
        # (thread, ns, checkpoint id) -> the small dicts of lists it stored (_dict_of_lists)
        self._dicts: OrderedDict[tuple[str, str, str], list[tuple[bytes, dict[str, list[bytes]]]]] = (
            OrderedDict()
        )
        # put_writes calls in flight, by (thread, ns, checkpoint id): see aput.
        self._writing: dict[tuple[str, str, str], set[asyncio.Future[None]]] = {}
        self._placed: OrderedDict[tuple[str, str, str], dict[bytes, list[tuple[bytes, int, bytes]]]] = (
            OrderedDict()
        )
        self._scripts = {n: client.register_script(s) for n, s in SCRIPTS.items()}
        # Concurrent runs' script calls share round trips (not on a Cluster: see the module).
        self._pipelining = (
            None if redis_client.is_cluster(client) else ScriptPipelining(client, self._scripts)
        )
        self._sync_scripts = (
            {n: sync_client.register_script(s) for n, s in SCRIPTS.items()} if sync_client is not None else {}
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        ttl_seconds: int,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        format: int = LATEST_FORMAT,
        keep_last: int = 0,
        sentinel_password: str | None = None,
    ) -> RedisCheckpointSaver:
        """A saver with its own async and sync clients for ``url``.

        The clients follow :mod:`threadline.redis_client`'s timeout and retry policy (every
        write here is safe to repeat). :meth:`aclose` closes them.

        Args:
            url: ``redis://``, ``rediss://`` (any db number), ``redis+sentinel://`` or
                ``redis+cluster://`` URL (:mod:`threadline.urls`).
            ttl_seconds, cache_bytes, format, keep_last: see the class.
            sentinel_password: the sentinels' own password (``REDIS_SENTINEL_PASSWORD``).

        Returns:
            The saver (no connection is made until the first call).
        """
        saver = cls(
            redis_client.async_client(url, sentinel_password=sentinel_password),
            ttl_seconds=ttl_seconds,
            sync_client=redis_client.sync_client(url, sentinel_password=sentinel_password),
            cache_bytes=cache_bytes,
            format=format,
            keep_last=keep_last,
        )
        saver._owns_clients = True
        return saver

    async def aclose(self) -> None:
        """Close the clients this saver created (:meth:`from_url`); given clients stay open.
        Script calls on their way are sent first."""
        if self._pipelining is not None:
            await self._pipelining.aclose()
        if self._owns_clients:
            await self._client.aclose()
            if self._sync_client is not None:
                self._sync_client.close()

    # --- operations: written once, I/O yielded to a driver ------------------------------------

    def _op_load(self, thread_id: str, wanted: Sequence[tuple[str, str]], remember: bool = True) -> Op:
        """Tuples for ``(ns, checkpoint_id)`` pairs (``""`` id: latest), None where absent.

        At most two round trips however many: the load script (records, pending writes, list
        descriptors), then one HMGET per checkpoint for the whole values and list items the
        cache does not hold, pipelined (none when it holds them all). Fetched values are
        cached when ``remember`` (not while listing history, which would push the latest
        versions out).
        """
        keys = ThreadKeys.of(thread_id)
        # The fields whose values this process holds need no descriptor from the script: on a
        # warm read that spares it an HSTRLEN (and an HGET of small blobs) per channel.
        held = self.cache.held(thread_id)
        entries = yield Script("load", keys.data, [len(held), *held, *(x for pair in wanted for x in pair)])
        plans = [self._read_plan(thread_id, blob_fields_of(e[1]), e[3], held) if e else {} for e in entries]
        fetch = [[f for how in plan.values() for f in how[-1]] for plan in plans]
        hmgets = [("HMGET", keys.blobs, *f) for f in fetch if f]
        replies = iter((yield Commands(hmgets)) if hmgets else ())
        out: list[CheckpointTuple | None] = []
        for (ns, _id), entry, plan, fields in zip(wanted, entries, plans, fetch, strict=True):
            if not entry:
                out.append(None)
                continue
            fetched = dict(zip(fields, next(replies), strict=True)) if fields else {}
            yield from self._op_late_references(thread_id, plan, fetched)
            values = {f: self._assemble(thread_id, f, how, fetched, remember) for f, how in plan.items()}
            out.append(decode_tuple(self.serde, thread_id, ns, entry, channel_values(values, ns)))
        return out

    def _op_late_references(
        self, thread_id: str, plan: dict[bytes, tuple[str, Any, list[bytes]]], fetched: dict[bytes, Any]
    ) -> Op:
        """A blob fetched whole that another replica's put turned into a reference between the
        script and the HMGET (format 3 rewrites a graph input so, decision 10): plan it as the
        reference it now is and fetch its items — one more round trip, only in that race."""
        late = [f for f, how in plan.items() if how[0] == "whole" and is_reference(fetched.get(f))]
        if not late:
            return
        replan = self._read_plan(thread_id, late, [x for f in late for x in (f, fetched[f])])
        fields = [f for how in replan.values() for f in how[-1]]
        if fields:
            (raws,) = yield Commands([("HMGET", ThreadKeys.of(thread_id).blobs, *fields)])
            fetched.update(zip(fields, raws, strict=True))
        plan.update(replan)

    def _read_plan(
        self,
        thread_id: str,
        fields: Sequence[bytes],
        flat_descriptors: Sequence[bytes],
        held: dict[bytes, Any] | None = None,
    ) -> dict[bytes, tuple[str, Any, list[bytes]]]:
        """Per blob field: ``(kind, detail, fields to fetch)``, kind ``cached`` (detail: the
        value), ``whole``, ``list`` (detail: segments, the cached entry of another version
        of the list, how many first items it gives) or ``dref`` (detail: the dict's
        references). ``flat_descriptors``: ``field,
        descriptor, …`` as the scripts return them; ``held``: values taken from the cache
        before the script ran (their descriptors were not asked for)."""
        descriptors = dict(zip(flat_descriptors[::2], flat_descriptors[1::2], strict=True))
        plan: dict[bytes, tuple[str, Any, list[bytes]]] = {}
        for field in fields:
            cached = held[field] if held and field in held else self.cache.get(thread_id, field)
            if cached is not MISS:
                plan[field] = ("cached", cached, [])
            elif field not in descriptors:
                plan[field] = ("whole", None, [field])
            elif (refs := decode_dref(descriptors[field])) is not None:
                ns = field.split(b"\x00", 1)[0]
                items = [
                    item_field(ns + b"\x00" + r.channel, r.lineage, i)
                    for r in refs
                    for i in range(r.start, r.end)
                ]
                plan[field] = ("dref", refs, items)
            else:
                segments = tuple(decode_segments(descriptors[field]) or ())
                base = self.cache.latest(thread_id, field)
                have = shared_prefix(base.segments, segments) if base and base.segments is not None else 0
                key = unversioned(field)
                items = [
                    item_field(key, s.lineage, i) for s in segments for i in range(max(s.start, have), s.end)
                ]
                plan[field] = ("list", (segments, base, have), items)
        return plan

    def _assemble(
        self,
        thread_id: str,
        field: bytes,
        plan: tuple[str, Any, list[bytes]],
        fetched: dict[bytes, Any],
        remember: bool,
    ) -> Any:
        kind, detail, fields = plan
        if kind == "cached":
            return detail
        if kind == "whole":
            return self._decoded(thread_id, field, fetched[field], remember)
        if kind == "dref":
            raws = [fetched[f] for f in fields]
            if any(raw is None for raw in raws):  # deleted between the load and the HMGET
                return NO_VALUE
            decoded, value = iter([decode_item(self.serde, raw) for raw in raws]), {}
            for r in detail:
                value[r.key] = [next(decoded) for _ in range(r.start, r.end)]
            if remember:
                self.cache.put(thread_id, field, value, sum(map(len, raws)))
            return value
        segments, base, have = detail
        raws = [fetched[f] for f in fields]
        if any(raw is None for raw in raws):  # deleted between the load and the HMGET
            return NO_VALUE
        value = [*(base.value[:have] if have else ()), *(decode_item(self.serde, raw) for raw in raws)]
        if remember:
            # A base's size is known for all of it only: prorate when a prefix is used.
            size = (base.size * have // max(1, len(base.value)) if have else 0) + sum(map(len, raws))
            self.cache.put(thread_id, field, value, size, segments)
        return value

    def _decoded(self, thread_id: str, field: bytes, raw: bytes | None, remember: bool) -> Any:
        if raw is None:  # not in Redis: the checkpoint has no value for this channel
            return NO_VALUE
        value = decode_blob(self.serde, raw)
        if remember:
            self.cache.put(thread_id, field, value, len(raw))
        return value

    def _op_get(self, config: RunnableConfig) -> Op:
        thread_id, ns, checkpoint_id = thread_ns_id(config)
        (found,) = yield from self._op_load(thread_id, [(ns, checkpoint_id or "")])
        return found

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

    def _op_delta_history(self, config: RunnableConfig, channels: Sequence[str]) -> Op:
        """What ``get_delta_channel_history`` returns, in at most two round trips: the walk
        script (ancestors' writes, seed fields and descriptors), then one HMGET of the seeds'
        whole values and list items the cache does not hold."""
        if not channels:
            return {}
        thread_id, ns, checkpoint_id = thread_ns_id(config)
        keys = ThreadKeys.of(thread_id)
        ancestors, flat_seeds, descriptors = yield Script(
            "delta_history", keys.data, [ns, checkpoint_id or "", *channels]
        )
        seeds = {
            flat_seeds[i].decode(): (int(flat_seeds[i + 1]), flat_seeds[i + 2])
            for i in range(0, len(flat_seeds), 3)
        }
        plan = self._read_plan(thread_id, [f for _depth, f in seeds.values()], descriptors)
        fetch = [f for how in plan.values() for f in how[-1]]
        fetched: dict[bytes, Any] = {}
        if fetch:
            (raws,) = yield Commands([("HMGET", keys.blobs, *fetch)])
            fetched = dict(zip(fetch, raws, strict=True))
            yield from self._op_late_references(thread_id, plan, fetched)
        values = {f: self._assemble(thread_id, f, how, fetched, False) for f, how in plan.items()}
        writes = [decode_writes(self.serde, records, ns, found) for _id, records, found in ancestors]
        result: dict[str, DeltaChannelHistory] = {}
        for channel in channels:
            depth, field = seeds.get(channel, (len(ancestors), None))
            # ancestors come newest first; the seed's own writes belong to the history
            entry: DeltaChannelHistory = {
                "writes": [w for ws in reversed(writes[:depth]) for w in ws if w[1] == channel]
            }
            if field is not None and values[field] is not NO_VALUE:
                entry["seed"] = values[field]
            result[channel] = entry
        return result

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

    def _op_threads(self) -> Op:
        """Every thread id with checkpoints (SCAN: no global registry key to grow)."""
        keys = yield Scan(INDEX_KEY_PATTERN)
        return sorted({thread_id_of_index_key(k) for k in keys})

    def _op_list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Op:
        conf = config["configurable"] if config else {}
        ns = conf.get("checkpoint_ns")  # absent: every namespace, as InMemorySaver
        only_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        threads = [str(conf["thread_id"])] if config else (yield from self._op_threads())
        remaining = limit
        for thread_id in threads:
            keys = ThreadKeys.of(thread_id)
            if ns is not None:
                high, low = ns_range(ns, before_id)
                cut = ("LIMIT", 0, limit) if limit and not filter and not only_id else ()
                (raw,) = yield Commands([("ZREVRANGEBYLEX", keys.idx, high, low, *cut)])
                found = [split_member(m) for m in raw]
            else:
                # Across namespaces: newest first by checkpoint id, like the SQL savers.
                (raw,) = yield Commands([("ZRANGE", keys.idx, 0, -1)])
                found = sorted(map(split_member, raw), key=lambda c: c[1], reverse=True)
                found = [c for c in found if not before_id or c[1] < before_id]
            found = [c for c in found if not only_id or c[1] == only_id]
            for start in range(0, len(found), _PAGE):
                if remaining is not None and remaining <= 0:
                    return
                page = found[start : start + _PAGE]
                if filter:
                    (records,) = yield Commands([("HMGET", keys.cp, *(member(*c) for c in page))])
                    page = [
                        c
                        for c, rec in zip(page, records, strict=True)
                        if rec is not None and metadata_matches(decode_metadata(self.serde, rec), filter)
                    ]
                page = page if remaining is None else page[:remaining]
                if not page:
                    continue
                for item in (yield from self._op_load(thread_id, page, remember=False)):
                    if item:  # None: deleted between the index read and the load
                        yield Emit(item)
                        remaining = None if remaining is None else remaining - 1

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

    # --- drivers -------------------------------------------------------------------------------

    def _io_sync(self, step: Script | Commands | Scan) -> Any:
        if self._sync_client is None:
            raise RuntimeError(
                "this RedisCheckpointSaver has no sync_client: use the async methods, or "
                "construct it with sync_client= (from_url does)"
            )
        if isinstance(step, Scan):  # a Cluster client scans every master
            return list(self._sync_client.scan_iter(match=step.pattern, count=1000))
        scripts = self._sync_scripts
        if isinstance(step, Script):
            return scripts[step.name](keys=step.keys, args=step.args)
        try:
            return self._pipeline(self._sync_client, step).execute()
        except NoScriptError:  # Redis restarted or flushed its scripts: load them, once
            for script in scripts.values():
                self._sync_client.script_load(script.script)
            return self._pipeline(self._sync_client, step).execute()

    async def _io_async(self, step: Script | Commands | Scan) -> Any:
        if isinstance(step, Scan):  # a Cluster client scans every master
            return [k async for k in self._client.scan_iter(match=step.pattern, count=1000)]
        scripts = self._scripts
        if isinstance(step, Script):
            if self._pipelining is not None:
                return await self._pipelining.call(step.name, step.keys, step.args)
            return await scripts[step.name](keys=step.keys, args=step.args)
        try:
            return await self._execute_async(step)
        except NoScriptError:  # see _io_sync; the failed MULTI wrote at most unreferenced blobs
            for script in scripts.values():
                await self._client.script_load(script.script)
            return await self._execute_async(step)

    async def _execute_async(self, step: Commands) -> Any:
        if step.transaction and redis_client.is_cluster(self._client):
            # MULTI on a Cluster: see redis_client.on_one_connection (every command of a step
            # is on one thread's keys, so in one slot).
            first = step.commands[0]
            key = first.keys[0] if isinstance(first, Script) else first[1]
            raw = [self._raw(c) if isinstance(c, Script) else c for c in step.commands]
            return await redis_client.on_one_connection(self._client, key, *raw, transaction=True)
        return await self._pipeline(self._client, step).execute()

    def _raw(self, command: Script) -> tuple[Any, ...]:
        sha = self._scripts[command.name].sha
        return ("EVALSHA", sha, len(command.keys), *command.keys, *command.args)

    def _pipeline(self, client: Any, step: Commands) -> Any:
        # Scripts go in as raw EVALSHA: redis-py's Script-in-pipeline support would send a
        # SCRIPT EXISTS round trip before every execute.
        pipe = client.pipeline(transaction=step.transaction)
        for command in step.commands:
            pipe.execute_command(*(self._raw(command) if isinstance(command, Script) else command))
        return pipe

    def _run_sync(self, op: Op) -> Any:
        reply = None
        while True:
            try:
                step = op.send(reply)
            except StopIteration as done:
                return done.value
            reply = self._io_sync(step)

    async def _run_async(self, op: Op) -> Any:
        reply = None
        while True:
            try:
                step = op.send(reply)
            except StopIteration as done:
                return done.value
            reply = await self._io_async(step)

    def _iter_sync(self, op: Op) -> Iterator[Any]:
        reply = None
        while True:
            try:
                step = op.send(reply)
            except StopIteration:
                return
            if isinstance(step, Emit):
                reply = None
                yield step.value
            else:
                reply = self._io_sync(step)

    async def _iter_async(self, op: Op) -> AsyncIterator[Any]:
        reply = None
        while True:
            try:
                step = op.send(reply)
            except StopIteration:
                return
            if isinstance(step, Emit):
                reply = None
                yield step.value
            else:
                reply = await self._io_async(step)

    # --- public API (async) ------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Fetch one checkpoint with its channel values and pending writes (one round trip).

        Args:
            config: ``thread_id``, optional ``checkpoint_ns`` (default ``""``) and optional
                ``checkpoint_id`` (default: the latest of that namespace).

        Returns:
            The tuple, pending writes ordered by ``(task_path, task_id, idx)``; None if absent.

        Raises:
            redis.RedisError: Redis is unreachable or refused the call.
        """
        return await self._run_async(self._op_get(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """List checkpoints newest first, as InMemorySaver filters them.

        Args:
            config: the thread; its ``checkpoint_ns`` (if present, even ``""``) restricts to
                one namespace, its ``checkpoint_id`` to one checkpoint. None lists every
                thread (a SCAN: for tools, not for request paths).
            filter: metadata keys that must all be equal.
            before: only checkpoints with an id below this config's ``checkpoint_id``.
            limit: at most this many tuples.

        Returns:
            An async iterator of tuples.

        Raises:
            redis.RedisError: Redis is unreachable or refused the call.
        """
        async for item in self._iter_async(self._op_list(config, filter, before, limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and the blobs of its changed channels (one round trip).

        Args:
            config: ``thread_id``, ``checkpoint_ns``, the parent's ``checkpoint_id`` and,
                optionally, ``fencing_token``.
            checkpoint: the checkpoint.
            metadata: its metadata.
            new_versions: the channels whose value changed since the parent.

        Returns:
            The config of the stored checkpoint.

        Raises:
            FencedError: ``fencing_token`` no longer holds the thread's lease; nothing written.
            redis.RedisError: Redis is unreachable or refused the call.
        """
        if self.format >= 3 and self._writing:
            # LangGraph runs a step's put_writes and its child's put concurrently: wait for the
            # parent's writes in flight, so the put finds them and stores them by reference
            # (one round trip of delay, only while one is in flight).
            thread_id, ns, parent = thread_ns_id(config)
            pending = self._writing.get((thread_id, ns, parent or ""))
            if pending:
                await asyncio.wait(list(pending))
        return await self._run_async(self._op_put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for a checkpoint (one round trip).

        Args:
            config: the checkpoint's config, optionally with ``fencing_token``.
            writes: ``(channel, value)`` pairs.
            task_id: the task that made them.
            task_path: its path (the first sort key of pending writes).

        Raises:
            FencedError: ``fencing_token`` no longer holds the thread's lease; nothing written.
            redis.RedisError: Redis is unreachable or refused the call.
        """
        if self.format < 3:
            await self._run_async(self._op_put_writes(config, writes, task_id, task_path))
            return
        thread_id, ns, checkpoint_id = thread_ns_id(config)
        key = (thread_id, ns, checkpoint_id or "")
        done = asyncio.get_running_loop().create_future()
        self._writing.setdefault(key, set()).add(done)
        try:
            await self._run_async(self._op_put_writes(config, writes, task_id, task_path))
        finally:
            done.set_result(None)
            waiting = self._writing[key]
            waiting.discard(done)
            if not waiting:
                del self._writing[key]

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, blob and write of a thread (one DEL).

        The thread's lease and fence counter are kept (they expire on their own): deleting a
        conversation must not hand its lease to a second turn while one is in flight, and the
        token counter must never restart.

        Args:
            thread_id: the thread.

        Raises:
            redis.RedisError: Redis is unreachable or refused the call.
        """
        await self._run_async(self._op_delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str], *, thread_id: str | None = None) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id`` is listed.

        With ``thread_id``, of that thread only: one HGETALL of its records and one script,
        whatever else Redis holds (a rollback: ``threadline.checkpoint.delete_for_runs``).
        Without, scans every thread (SCAN; an admin operation: 1008 hashes read in 0.83 s for
        one rollback in issue 18). Blobs no remaining checkpoint refers to are deleted too.

        Args:
            run_ids: the runs.
            thread_id: the thread the runs ran on, when known.

        Raises:
            redis.RedisError: Redis is unreachable or refused the call.
        """
        await self._run_async(self._op_delete_for_runs(run_ids, thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, blob and write of one thread into another.

        Args:
            source_thread_id: the thread to copy; missing means nothing is copied.
            target_thread_id: the thread to copy into (merged with what it holds).

        Raises:
            redis.RedisError: Redis is unreachable or refused the call.
        """
        await self._run_async(self._op_copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Drop old checkpoints of threads, with their writes and unreferenced blobs.

        ``keep_latest`` keeps the latest checkpoint of each namespace and, as
        :meth:`aretain` does, the ancestors its ``DeltaChannel`` chains need (the parent chain
        back to each valueless channel's nearest value), so a delta channel never reads as
        empty after a prune.

        Args:
            thread_ids: the threads.
            strategy: ``keep_latest`` (per namespace) or ``delete`` (everything).

        Raises:
            ValueError: unknown strategy.
            redis.RedisError: Redis is unreachable or refused the call.
        """
        await self._run_async(self._op_prune(thread_ids, strategy))

    async def aretain(self, thread_id: str, keep: int) -> None:
        """Drop all but the ``keep`` newest checkpoints of each namespace of ``thread_id``.

        Never one a pending write or interrupt needs (the newest of a namespace holds them),
        nor an ancestor the delta chain of a kept one needs (a channel without a value there
        keeps the parent chain back to its nearest value). Runs by itself after puts when
        the saver has ``keep_last``.

        Args:
            thread_id: the thread.
            keep: checkpoints kept per namespace, at least 1.

        Raises:
            ValueError: ``keep`` below 1.
            redis.RedisError: Redis is unreachable or refused the call.
        """
        if keep < 1:
            raise ValueError("keep must be at least 1")
        await self._run_async(self._op_retain(thread_id, keep))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel, the writes since its nearest stored value (the seed) on the parent
        chain of ``config``'s checkpoint, as ``BaseCheckpointSaver`` defines it.

        Two round trips however deep the chain: one script walks it inside Redis (records,
        writes and descriptors are small), then one HMGET of the seeds' values.

        Args:
            config: the target checkpoint (``checkpoint_id`` absent: the latest).
            channels: channel names; empty gives an empty mapping.

        Returns:
            ``{channel: {"writes": [...oldest first], "seed"?: value}}``.

        Raises:
            redis.RedisError: Redis is unreachable or refused the call.
        """
        return await self._run_async(self._op_delta_history(config, channels))

    # --- public API (sync twins; need sync_client) ------------------------------------------

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Sync :meth:`aget_delta_channel_history`."""
        return self._run_sync(self._op_delta_history(config, channels))

    def retain(self, thread_id: str, keep: int) -> None:
        """Sync :meth:`aretain`."""
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self._run_sync(self._op_retain(thread_id, keep))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Sync :meth:`aget_tuple`."""
        return self._run_sync(self._op_get(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Sync :meth:`alist`."""
        return self._iter_sync(self._op_list(config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Sync :meth:`aput`."""
        return self._run_sync(self._op_put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Sync :meth:`aput_writes`."""
        self._run_sync(self._op_put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Sync :meth:`adelete_thread`."""
        self._run_sync(self._op_delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str], *, thread_id: str | None = None) -> None:
        """Sync :meth:`adelete_for_runs`."""
        self._run_sync(self._op_delete_for_runs(run_ids, thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Sync :meth:`acopy_thread`."""
        self._run_sync(self._op_copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Sync :meth:`aprune`."""
        self._run_sync(self._op_prune(thread_ids, strategy))
