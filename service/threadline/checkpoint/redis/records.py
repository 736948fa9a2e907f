"""Key layout and record format of the ``redis`` checkpoint saver. No I/O here.

The keys are named in :mod:`threadline.redis_keys` (the one key schema the lease and the
sessions share). Every key of one thread shares the hash tag ``{thread_id}``, so one Lua script
may touch all of them, also on Redis Cluster. A thread has a *fixed* set of keys however long
it lives (not one key per checkpoint), so refreshing the TTL costs a constant six EXPIREs, done
only when a key a script wrote has lost more than a minute of it (a tenth of a TTL under ten
minutes; one PTTL per write):

==================  ======  ==============================================================
key                 type    holds
==================  ======  ==============================================================
``tl:{T}:idx``      ZSET    score 0, member ``ns\\0checkpoint_id``; lexicographic order is
                            checkpoint order (ids are uuid6: their text sorts by time), so
                            the latest of a namespace is one ZREVRANGEBYLEX
``tl:{T}:cp``       HASH    ``ns\\0checkpoint_id`` → checkpoint record (below)
``tl:{T}:blobs``    HASH    ``ns\\0channel\\0version`` → ``type\\0bytes``: one blob per
                            (channel, version), so a put writes only the changed channels;
                            for a list stored item by item (format 2) that blob is a
                            descriptor ``tl-seg\\0lineage\\0start\\0end…`` and the items are
                            ``ns\\0channel\\0lineage\\0position`` → ``type\\0bytes``
``tl:{T}:widx``     ZSET    score 0, member ``ns\\0checkpoint_id\\0task_id\\0idx``: finds one
                            checkpoint's pending writes by range, without scanning
                            (formats 1-2; format 3 writes none)
``tl:{T}:w``        HASH    same member → write record (formats 1-2); format 3: index member
                            ``ns\\0checkpoint_id`` → all its write records, as netstrings
``tl:{T}:lease``    STRING  the turn lease token; written by the lease module with its own
                            PEXPIRE, only *read* here (fencing)
``tl:{T}:fence``    STRING  ``INCR`` counter the lease module mints tokens from
==================  ======  ==============================================================

No key is shared between threads (nothing grows with the number of threads); listing across
threads uses SCAN.

Records are sequences of netstrings (``<len>:<bytes>``), which the Lua scripts can read
without a decoder. A checkpoint record is ``k, blob_field_1 … blob_field_k, checkpoint type,
checkpoint bytes, metadata type, metadata bytes, parent id``: the scripts read only the
``k`` blob field names (the checkpoint's ``channel_versions``, which Python then fetches with
one HMGET); Python reads the rest. A write record is ``task_id, channel, type,
bytes, task_path, idx``.

Format 2 (ADR 0007) changes only what a list-valued channel's blob holds: the list is a
sequence of segments of *lineages*, runs of items each stored once, named by the version that
started the lineage; a put appends a step's new items to the lineage of the version it
extends. Records, writes and every other blob are as in format 1, which is still read.

Format 3 (ADR 0007, decisions 9-15) stores a checkpoint's writes in one ``w`` field, a write
whose list a child appended as a reference to those items (:data:`REF_TYPE`), a small dict of
lists (a graph input) as references too (``DREF_TYPE``), 25-character versions, no blob for a
version without a value, and records tagged ``zlibd:``.

How a list is stored item by item, and a dict of lists by reference (descriptor and reference
blobs, item fields), is :mod:`threadline.checkpoint.redis.lists`'s.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from threadline.checkpoint.redis.lists import item_field

SEP = "\x00"
# The configurable key a turn passes its lease token in (see RedisCheckpointSaver.aput).
FENCING_TOKEN = "fencing_token"
_EMPTY = ("empty", b"")  # a channel in new_versions with no value (as InMemorySaver stores it)
# Its stored size (``empty\0``): retention takes a blob of this size for no value.
EMPTY_BLOB_BYTES = 6
# Type prefix of compressed checkpoint bytes in a record (format 2); not a serde type either.
ZLIB_PREFIX = "zlib:"
# Format 3: compressed with the record's own blob field names as zlib's preset dictionary
# (they hold the channel versions the checkpoint repeats). Not a serde type: a release before
# format 3 fails loudly on every checkpoint written in it ("Unknown serialization type")
# instead of missing its pending writes (format 3 keeps them where it does not look).
ZDICT_PREFIX = "zlibd:"
# Type tag of a pending write stored by reference (format 3): its value is a list whose items
# are list items stored in the thread's blobs, ``lineage\0start\0end`` of the write's channel
# (see :func:`ref_write`). Not a serde type: a release before format 3 fails loudly on it.
REF_TYPE = b"tl-ref"
# The decoded form of an ``_EMPTY`` blob: the checkpoint has no value for that channel.
NO_VALUE: Any = object()


# --- netstrings ------------------------------------------------------------------------------


def pack(items: Sequence[bytes]) -> bytes:
    """Concatenate ``items`` as netstrings ``<len>:<bytes>``."""
    return b"".join(b"%d:%s" % (len(item), item) for item in items)


def unpack(data: bytes) -> list[bytes]:
    """Split a :func:`pack` result back into its items."""
    items: list[bytes] = []
    pos, end = 0, len(data)
    while pos < end:
        colon = data.index(b":", pos)
        start = colon + 1
        stop = start + int(data[pos:colon])
        items.append(data[start:stop])
        pos = stop
    return items


# --- field names -------------------------------------------------------------------------------


def member(checkpoint_ns: str, checkpoint_id: str) -> str:
    """Index member and ``cp`` field of one checkpoint."""
    return f"{checkpoint_ns}{SEP}{checkpoint_id}"


def split_member(raw: bytes) -> tuple[str, str]:
    """``(checkpoint_ns, checkpoint_id)`` of an index member."""
    ns, _, checkpoint_id = raw.decode().partition(SEP)
    return ns, checkpoint_id


def ns_range(checkpoint_ns: str, before_id: str | None = None) -> tuple[str, str]:
    """``(max, min)`` ZREVRANGEBYLEX bounds of one namespace, optionally ``< before_id``."""
    high = f"({member(checkpoint_ns, before_id)}" if before_id else f"({checkpoint_ns}\x01"
    return high, f"[{checkpoint_ns}{SEP}"


def blob_field(checkpoint_ns: str, channel: str, version: Any) -> str:
    return f"{checkpoint_ns}{SEP}{channel}{SEP}{version}"


def unversioned(field: bytes) -> bytes:
    """``ns\0channel`` of a blob field: what the versions of one channel share."""
    return field[: field.rindex(SEP.encode())]


def write_field(checkpoint_ns: str, checkpoint_id: str, task_id: str, idx: int) -> str:
    return f"{checkpoint_ns}{SEP}{checkpoint_id}{SEP}{task_id}{SEP}{idx}"


# --- configs -------------------------------------------------------------------------------


def thread_ns_id(config: RunnableConfig) -> tuple[str, str, str | None]:
    """``(thread_id, checkpoint_ns, checkpoint_id or None)`` of a config."""
    conf = config["configurable"]
    return str(conf["thread_id"]), conf.get("checkpoint_ns", ""), conf.get("checkpoint_id")


def fencing_token(config: RunnableConfig) -> str:
    """The lease token a write must be fenced with, or ``""`` for an unconditional write."""
    token = config["configurable"].get(FENCING_TOKEN)
    return token if isinstance(token, str) else ""


def checkpoint_config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


# --- encoding ------------------------------------------------------------------------------


def _typed(value: tuple[str, bytes]) -> bytes:
    return value[0].encode() + SEP.encode() + value[1]


def _untyped(raw: bytes) -> tuple[str, bytes]:
    type_, _, data = raw.partition(SEP.encode())
    return type_.decode(), data


class Blob(NamedTuple):
    """One channel value of a put: its blobs-hash field, its bytes, and the value itself."""

    field: bytes
    data: bytes
    value: Any  # NO_VALUE for a channel without a value


def encode_record(
    serde: SerializerProtocol,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    compress: bool = False,
    zdict: bool = False,
) -> bytes:
    """The checkpoint record of one put (its channel values go to blobs, see below).

    With ``compress`` (format 2) the checkpoint bytes are zlib-compressed when that makes them
    shorter, and their type tagged ``zlib:<type>``: a record was ~800 bytes at turn 300 of the
    benchmark, a third of the thread's memory, most of it repeated 51-character version
    strings, which level 1 halves (504 -> 269 bytes) for ~15 us. With ``zdict`` too (format
    3) the record's blob field names, stored uncompressed before it anyway, are zlib's preset
    dictionary, so the versions inside cost a few bytes each.
    """
    _thread_id, ns, parent_id = thread_ns_id(config)
    stripped = checkpoint.copy()
    stripped.pop("channel_values")  # type: ignore[misc]
    md = get_checkpoint_metadata(config, metadata)
    # The token is a per-turn control value, not a property of the checkpoint.
    md.pop(FENCING_TOKEN, None)  # type: ignore[misc]
    fields = [blob_field(ns, ch, v).encode() for ch, v in stripped["channel_versions"].items()]
    cp_type, cp_bytes = serde.dumps_typed(stripped)
    if zdict:  # always, even when not shorter: a release before format 3 fails on the tag
        z = zlib.compressobj(1, zlib.DEFLATED, _ZWBITS, _ZMEMLEVEL, zdict=_zdict(fields))
        cp_type, cp_bytes = ZDICT_PREFIX + cp_type, z.compress(cp_bytes) + z.flush()
    elif compress:
        packed = zlib.compress(cp_bytes, 1)
        if len(packed) < len(cp_bytes):
            cp_type, cp_bytes = ZLIB_PREFIX + cp_type, packed
    md_type, md_bytes = serde.dumps_typed(md)
    return pack(
        [
            b"%d" % len(fields),
            *fields,
            cp_type.encode(),
            cp_bytes,
            md_type.encode(),
            md_bytes,
            (parent_id or "").encode(),
        ]
    )


# zlib's window and memory level for a record: an 8 KB window (its fields and its bytes, a few
# hundred bytes each, fit) and memLevel 6, instead of 32 KB and 8: setting up the defaults'
# larger tables for each record was most of its compression time (~28 -> ~6 us measured here),
# and the output is as short. Readers decompress with the default window, which takes any
# smaller one, so records stay readable by every release.
_ZWBITS, _ZMEMLEVEL = 13, 6


def _zdict(fields: Sequence[bytes]) -> bytes:
    return b"".join(fields)


def encode_blob(serde: SerializerProtocol, field: bytes, value: Any) -> Blob:
    """The whole-value blob of one channel version (``value`` may be :data:`NO_VALUE`)."""
    typed = _EMPTY if value is NO_VALUE else serde.dumps_typed(value)
    return Blob(field, _typed(typed), value)


# --- list items (format 2; their fields and descriptors are lists.py's) ----------------------


def encode_item(serde: SerializerProtocol, value: Any) -> bytes:
    return _typed(serde.dumps_typed(value))


def decode_item(serde: SerializerProtocol, raw: bytes) -> Any:
    return serde.loads_typed(_untyped(raw))


def encode_writes(
    serde: SerializerProtocol,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> list[bytes]:
    """``field, record, overwrite`` triples for the put_writes script.

    As in InMemorySaver, a write is keyed by ``(task_id, idx)`` where special channels
    (ERROR, INTERRUPT, …) get their negative index from ``WRITES_IDX_MAP``; an existing
    regular write is kept (a retried task does not overwrite it), a special one is replaced.
    """
    _thread_id, ns, checkpoint_id = thread_ns_id(config)
    if checkpoint_id is None:
        raise ValueError("put_writes needs a config with a checkpoint_id")
    out: list[bytes] = []
    for i, (channel, value) in enumerate(writes):
        idx = WRITES_IDX_MAP.get(channel, i)
        type_, data = serde.dumps_typed(value)
        record = pack(
            [task_id.encode(), channel.encode(), type_.encode(), data, task_path.encode(),
             b"%d" % idx]
        )  # fmt: skip
        field = write_field(ns, checkpoint_id, task_id, idx).encode()
        out += [field, record, b"1" if idx < 0 else b"0"]
    return out


def decode_metadata(serde: SerializerProtocol, record: bytes) -> CheckpointMetadata:
    """The metadata of a checkpoint record (for filtering before loading values)."""
    items = unpack(record)
    return serde.loads_typed((items[-3].decode(), items[-2]))


def decode_writes(
    serde: SerializerProtocol,
    records: Sequence[bytes | None],
    checkpoint_ns: str = "",
    ref_items: Sequence[bytes] = (),
) -> list[PendingWrite]:
    """Pending writes in the order LangGraph requires: ``(task_path, task_id, idx)``.

    Args:
        records: write records (None: deleted meanwhile, skipped).
        checkpoint_ns: their checkpoint's namespace (names the items a reference points to).
        ref_items: ``item field, item bytes, …`` as the scripts return them for the writes
            stored by reference (format 3).

    Raises:
        LookupError: an item a reference names is not stored (never expected: the drop script
            keeps every lineage a remaining write refers to).
    """
    rows = [unpack(r) for r in records if r]
    rows.sort(key=lambda r: writes_sort_key(r[4].decode(), r[0].decode(), int(r[5])))
    found = dict(zip(ref_items[::2], ref_items[1::2], strict=True))
    out: list[PendingWrite] = []
    for task_id, channel, type_, data, _path, _idx in rows:
        if type_ == REF_TYPE:
            key = blob_field(checkpoint_ns, channel.decode(), "").encode()[:-1]
            raws = [found.get(f) for f in ref_fields(key, data)]
            if any(not raw for raw in raws):
                raise LookupError(f"a pending write of task {task_id.decode()!r} lost its list items")
            value: Any = [decode_item(serde, raw) for raw in raws]
        else:
            value = serde.loads_typed((type_.decode(), data))
        out.append((task_id.decode(), channel.decode(), value))
    return out


def ref_write(record: bytes, lineage: bytes, start: int, end: int) -> bytes:
    """A write record whose list value is items ``start <= i < end`` of ``lineage``."""
    task_id, channel, _type, _data, task_path, idx = unpack(record)
    return pack([task_id, channel, REF_TYPE, b"%s\x00%d\x00%d" % (lineage, start, end), task_path, idx])


def ref_fields(channel_key: bytes, data: bytes) -> list[bytes]:
    """The item fields a reference's data ``lineage\0start\0end`` names."""
    lineage, start, end = data.split(b"\x00")
    return [item_field(channel_key, lineage, i) for i in range(int(start), int(end))]


def blob_fields_of(record: bytes) -> list[bytes]:
    """The blobs-hash fields a checkpoint record refers to (one per channel it has)."""
    items = unpack(record)
    return items[1 : 1 + int(items[0])]


def parent_of(record: bytes) -> str:
    """The parent checkpoint id in a checkpoint record (``""``: none)."""
    return unpack(record)[-1].decode()


def decode_blob(serde: SerializerProtocol, raw: bytes) -> Any:
    """The channel value a blob holds, or :data:`NO_VALUE`."""
    typed = _untyped(raw)
    return NO_VALUE if typed[0] == _EMPTY[0] else serde.loads_typed(typed)


def channel_values(blobs: dict[bytes, Any], checkpoint_ns: str) -> dict[str, Any]:
    """A checkpoint's ``channel_values`` from its decoded blobs (blob field -> value)."""
    skip = len(checkpoint_ns.encode()) + 1
    return {
        unversioned(field)[skip:].decode(): value for field, value in blobs.items() if value is not NO_VALUE
    }


def decode_tuple(
    serde: SerializerProtocol,
    thread_id: str,
    checkpoint_ns: str,
    entry: Sequence[Any],
    values: dict[str, Any],
) -> CheckpointTuple:
    """Build a CheckpointTuple.

    Args:
        entry: one ``load`` script reply ``[checkpoint_id, record, write records,
            descriptors, ref items]`` (the last two may be absent).
        values: the checkpoint's channel values, decoded from the blobs its record names
            (channels without a value left out).
    """
    raw_id, record, write_records = entry[:3]
    ref_items = entry[4] if len(entry) > 4 else ()
    checkpoint_id = raw_id.decode()
    items = unpack(record)
    cp_type, cp_bytes, md_type, md_bytes, parent = items[1 + int(items[0]) :]
    type_ = cp_type.decode()
    if type_.startswith(ZLIB_PREFIX):
        type_, cp_bytes = type_[len(ZLIB_PREFIX) :], zlib.decompress(cp_bytes)
    elif type_.startswith(ZDICT_PREFIX):
        z = zlib.decompressobj(zdict=_zdict(items[1 : 1 + int(items[0])]))
        type_, cp_bytes = type_[len(ZDICT_PREFIX) :], z.decompress(cp_bytes) + z.flush()
        if not z.eof:  # cut short (zlib.decompress refuses that itself; an object must be asked)
            raise zlib.error("incomplete compressed checkpoint")
    checkpoint: Checkpoint = serde.loads_typed((type_, cp_bytes))
    parent_id = parent.decode()
    return CheckpointTuple(
        config=checkpoint_config(thread_id, checkpoint_ns, checkpoint_id),
        checkpoint={**checkpoint, "channel_values": values},
        metadata=serde.loads_typed((md_type.decode(), md_bytes)),
        parent_config=(checkpoint_config(thread_id, checkpoint_ns, parent_id) if parent_id else None),
        pending_writes=decode_writes(serde, write_records or (), checkpoint_ns, ref_items),
    )


def metadata_matches(metadata: CheckpointMetadata, filter: dict[str, Any] | None) -> bool:
    """InMemorySaver's filter rule: every filter key equals the metadata value."""
    return not filter or all(metadata.get(k) == v for k, v in filter.items())
