"""The ``redis`` saver's record codec (checkpoint/redis/records.py, lists.py) on its own: no Redis.

Round trips over seeded random checkpoints, metadata, channel values and pending writes, with
LangGraph's ``InMemorySaver`` as the oracle of what must come back; the formats this release
reads (format 1 and 2 as the frozen releases in tests/legacy_redis_saver* wrote them) and the
tags older releases must refuse loudly; corrupt records. A dict stands in for each Redis hash:
what the scripts store and return is the codec's bytes unchanged. The saver's use of the codec
on a real Redis is tested in tests/integration/test_redis_saver*.py.
"""

from __future__ import annotations

import base64
import itertools
import json
import random
import uuid
import zlib
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME, SCHEDULED
from legacy_redis_saver_v2 import records as format2_release

from threadline.checkpoint.redis import lists, records
from threadline.checkpoint.redis.lists import DESCRIPTOR_MAX_BYTES, MAX_SEGMENTS, DictRef, Segment
from threadline.checkpoint.redis.records import EMPTY_BLOB_BYTES, FENCING_TOKEN, NO_VALUE, REF_TYPE

from legacy_redis_saver import base as format1_release

pytestmark = pytest.mark.unit

SERDE = JsonPlusSerializer()  # the saver's default serde
# A thread as the release before format 2 stored it (written by legacy_redis_saver/make_fixture.py).
FORMAT1_FIXTURE = Path(__file__).resolve().parents[1] / "legacy_redis_saver" / "format1_thread.json"
SEEDS = range(20)
FORMATS = (1, 2, 3)


def flags(fmt: int) -> dict[str, bool]:
    """``encode_record``'s options for what the saver writes in format ``fmt``."""
    return {"compress": fmt >= 2, "zdict": fmt >= 3}


# --- seeded random inputs ---------------------------------------------------------------------

# Names never hold a NUL (it separates the parts of a field); everything else may appear.
_CHARS = "abcXYZ0189 _-:|./é✓"


def text(rng: random.Random, lo: int = 0, hi: int = 12) -> str:
    return "".join(rng.choice(_CHARS) for _ in range(rng.randint(lo, hi)))


def an_id(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128)))


def a_version(rng: random.Random) -> str:
    # format 1-2's 51 characters, or format 3's 25
    if rng.random() < 0.5:
        return f"{rng.randint(1, 10**6):032}.0.{rng.random()}"
    return f"{rng.randint(1, 10**6):08}.{rng.getrandbits(64):016x}"


def a_value(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["int", "float", "str", "bool", "none", "bytes", "message"]
    if depth < 3:
        kinds += ["list", "dict"]
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.choice([0, -1, rng.randint(-(2**63), 2**63 - 1), rng.randint(-1000, 1000)])
    if kind == "float":
        return rng.uniform(-1e9, 1e9)
    if kind == "str":
        return text(rng, 0, 60)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "bytes":
        return rng.randbytes(rng.randint(0, 24))
    if kind == "message":
        return rng.choice([HumanMessage, AIMessage])(content=text(rng, 0, 40), id=an_id(rng))
    if kind == "list":
        return [a_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {text(rng, 1, 8): a_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def a_checkpoint(rng: random.Random, channels: list[str]) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = an_id(rng)
    cp["channel_versions"] = {ch: a_version(rng) for ch in channels}
    # Some channels have a version but no value (stored as ``empty``, read back as absent).
    cp["channel_values"] = {ch: a_value(rng) for ch in channels if rng.random() < 0.8}
    cp["versions_seen"] = {
        text(rng, 1, 10): {
            ch: cp["channel_versions"][ch] for ch in rng.sample(channels, rng.randint(0, len(channels)))
        }
        for _ in range(rng.randint(0, 3))
    }
    cp["updated_channels"] = rng.sample(channels, rng.randint(0, len(channels))) or None
    return cp


def a_put(rng: random.Random) -> tuple[dict[str, Any], Checkpoint, dict[str, Any]]:
    """``(config, checkpoint, metadata)`` of one put, parent and fencing token sometimes."""
    channels = list(dict.fromkeys(text(rng, 1, 14) for _ in range(rng.randint(0, 10))))
    configurable: dict[str, Any] = {
        "thread_id": f"t-{an_id(rng)}",
        "checkpoint_ns": rng.choice(["", "", "child:" + an_id(rng), "a|b:" + text(rng, 1, 6)]),
        # LangGraph copies other str/number configurable keys into the metadata (not __*).
        "user_id": text(rng, 0, 10),
        "attempt": rng.randint(0, 9),
        "__pregel_internal": "not metadata",
    }
    if rng.random() < 0.6:
        configurable["checkpoint_id"] = an_id(rng)
    if rng.random() < 0.5:
        configurable[FENCING_TOKEN] = str(rng.randint(1, 10**9))
    metadata = {
        "source": rng.choice(["input", "loop", "update", "fork"]),
        "step": rng.randint(-1, 500),
        "parents": {text(rng, 1, 6): an_id(rng) for _ in range(rng.randint(0, 2))},
        **{f"k{i}": a_value(rng, 2) for i in range(rng.randint(0, 3))},
    }
    return {"configurable": configurable}, a_checkpoint(rng, channels), metadata


# --- the stand-in for Redis -------------------------------------------------------------------


def blobs_of(config: dict[str, Any], cp: Checkpoint) -> dict[bytes, bytes]:
    """The blobs hash after a put of ``cp`` (every channel new), as the put script stores it."""
    _thread, ns, _parent = records.thread_ns_id(config)
    out = {}
    for channel, version in cp["channel_versions"].items():
        field = records.blob_field(ns, channel, version).encode()
        blob = records.encode_blob(SERDE, field, cp["channel_values"].get(channel, NO_VALUE))
        out[blob.field] = blob.data
    return out


def read(
    thread_id: str, ns: str, checkpoint_id: str, record: bytes, blobs: dict[bytes, bytes], writes=()
) -> CheckpointTuple:
    """What a read does with the load script's reply: blobs by the record's fields, decoded."""
    values = {f: records.decode_blob(SERDE, blobs[f]) for f in records.blob_fields_of(record) if f in blobs}
    entry = [checkpoint_id.encode(), record, list(writes)]
    return records.decode_tuple(SERDE, thread_id, ns, entry, records.channel_values(values, ns))


def oracle_put(config: dict[str, Any], cp: Checkpoint, metadata: dict[str, Any]) -> CheckpointTuple:
    memory = InMemorySaver()
    saved = memory.put(config, cp, metadata, dict(cp["channel_versions"]))
    found = memory.get_tuple(saved)
    assert found is not None
    return found


def cp_type_and_bytes(record: bytes) -> tuple[bytes, bytes]:
    items = records.unpack(record)
    k = int(items[0])
    return items[1 + k], items[2 + k]


# --- netstrings -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_netstrings_round_trip_any_bytes(seed: int) -> None:
    rng = random.Random(seed)
    # Items that look like netstrings themselves, empty ones, NULs, digits and colons.
    pool = [b"", b":", b"0:", b"12:", b"\x00", b"9" * 30, b"3:abc"]
    items = [
        rng.choice(pool) if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 300))
        for _ in range(rng.randint(0, 30))
    ]
    packed = records.pack(items)
    assert records.unpack(packed) == items
    assert len(packed) == sum(len(i) + len(str(len(i))) + 1 for i in items)


def test_an_empty_sequence_packs_to_nothing() -> None:
    assert records.pack([]) == b""
    assert records.unpack(b"") == []


@pytest.mark.parametrize("garbage", [b"abc", b"12", b"x:ab", b"-:", b"3ab"])
def test_bytes_that_are_no_netstring_raise_value_error(garbage: bytes) -> None:
    with pytest.raises(ValueError):
        records.unpack(garbage)


# --- field names and configs ------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_member_and_split_member_are_inverse(seed: int) -> None:
    rng = random.Random(seed)
    ns, checkpoint_id = text(rng, 0, 20), an_id(rng)
    assert records.split_member(records.member(ns, checkpoint_id).encode()) == (ns, checkpoint_id)


def _zrevrangebylex(members: list[bytes], high: str, low: str) -> list[bytes]:
    """Redis' ZREVRANGEBYLEX over members of equal score: ``(`` exclusive, ``[`` inclusive,
    compared as bytes (memcmp)."""

    def within(m: bytes) -> bool:
        hi, lo = high[1:].encode(), low[1:].encode()
        above = m >= lo if low[0] == "[" else m > lo
        below = m <= hi if high[0] == "[" else m < hi
        return above and below

    return sorted((m for m in members if within(m)), reverse=True)


@pytest.mark.parametrize("seed", SEEDS)
def test_ns_range_selects_exactly_one_namespace_newest_first(seed: int) -> None:
    rng = random.Random(seed)
    # Namespaces that prefix one another: "" of every one, "a" of "ab" and "a:b".
    namespaces = ["", "a", "ab", "a:b", "b", "a|x", "é"]
    ids = sorted(an_id(rng) for _ in range(30))  # uuid6 text sorts by time; any text sorts
    placed = [(rng.choice(namespaces), i) for i in ids]
    members = [records.member(ns, i).encode() for ns, i in placed]
    for ns in namespaces:
        mine = sorted((i for n, i in placed if n == ns), reverse=True)
        got = _zrevrangebylex(members, *records.ns_range(ns))
        assert [records.split_member(m) for m in got] == [(ns, i) for i in mine]
        if mine:
            before = rng.choice(mine)
            got = _zrevrangebylex(members, *records.ns_range(ns, before))
            assert [records.split_member(m)[1] for m in got] == [i for i in mine if i < before]


def test_item_fields_and_version_fields_never_collide() -> None:
    version = records.blob_field("ns", "messages", "00000001.0123456789abcdef").encode()
    item = lists.item_field(records.unversioned(version), b"00000001.0123456789abcdef", 0)
    assert version.count(b"\x00") == 2 and item.count(b"\x00") == 3
    assert records.unversioned(version) == b"ns\x00messages"
    assert records.unversioned(item) != records.unversioned(version), "an item is not a version"
    assert records.write_field("ns", "cp", "task", -3) == "ns\x00cp\x00task\x00-3"


def test_thread_ns_id_and_fencing_token_read_the_config() -> None:
    assert records.thread_ns_id({"configurable": {"thread_id": 7}}) == ("7", "", None)
    full = {"thread_id": "t", "checkpoint_ns": "n", "checkpoint_id": "c", FENCING_TOKEN: "42"}
    assert records.thread_ns_id({"configurable": full}) == ("t", "n", "c")
    assert records.fencing_token({"configurable": full}) == "42"
    for not_a_token in (None, 42, b"42"):
        assert records.fencing_token({"configurable": {"thread_id": "t", FENCING_TOKEN: not_a_token}}) == ""
    assert records.fencing_token({"configurable": {"thread_id": "t"}}) == ""
    assert records.checkpoint_config("t", "n", "c") == {
        "configurable": {"thread_id": "t", "checkpoint_ns": "n", "checkpoint_id": "c"}
    }


# --- checkpoint records -----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seed", SEEDS)
def test_a_checkpoint_reads_back_as_in_memory_saver_returns_it(seed: int, fmt: int) -> None:
    rng = random.Random(f"{seed}/{fmt}")
    config, cp, metadata = a_put(rng)
    record = records.encode_record(SERDE, config, cp, metadata, **flags(fmt))
    thread_id, ns, parent = records.thread_ns_id(config)
    got = read(thread_id, ns, cp["id"], record, blobs_of(config, cp))
    want = oracle_put(config, cp, metadata)
    assert got.checkpoint == want.checkpoint
    assert got.config == want.config
    assert got.parent_config == want.parent_config
    # The fencing token is a per-turn control value: kept out of the metadata, unlike InMemorySaver.
    assert FENCING_TOKEN not in got.metadata
    assert got.metadata == {k: v for k, v in want.metadata.items() if k != FENCING_TOKEN}
    assert got.pending_writes == []
    # What the scripts and the listing read without decoding the whole record:
    assert records.decode_metadata(SERDE, record) == got.metadata
    assert records.parent_of(record) == (parent or "")
    fields = [records.blob_field(ns, ch, v).encode() for ch, v in cp["channel_versions"].items()]
    assert records.blob_fields_of(record) == fields


def _incompressible(rng: random.Random) -> Checkpoint:
    """A checkpoint zlib cannot shorten: random bytes where a real one keeps its sends."""
    return {**empty_checkpoint(), "id": an_id(rng), "pending_sends": [rng.randbytes(400)]}


def _stripped_bytes(cp: Checkpoint) -> tuple[str, bytes]:
    return SERDE.dumps_typed({k: v for k, v in cp.items() if k != "channel_values"})


@pytest.mark.parametrize("seed", SEEDS)
def test_format_2_compresses_only_when_that_is_shorter(seed: int) -> None:
    rng = random.Random(seed)
    config, cp, metadata = a_put(rng)
    if seed % 4 == 0:
        cp = _incompressible(rng)
    serde_type, raw = _stripped_bytes(cp)
    shorter = len(zlib.compress(raw, 1)) < len(raw)
    assert shorter is (seed % 4 != 0), "the seeds draw both cases"
    tag, data = cp_type_and_bytes(records.encode_record(SERDE, config, cp, metadata, compress=True))
    if shorter:
        assert (tag, zlib.decompress(data)) == (b"zlib:" + serde_type.encode(), raw)
    else:
        assert (tag, data) == (serde_type.encode(), raw)
    # Format 1 never compresses.
    assert cp_type_and_bytes(records.encode_record(SERDE, config, cp, metadata)) == (serde_type.encode(), raw)


@pytest.mark.parametrize("seed", SEEDS)
def test_format_3_always_tags_its_bytes_and_needs_the_fields_as_dictionary(seed: int) -> None:
    rng = random.Random(seed)
    config, cp, metadata = a_put(rng)
    if seed % 4 == 0:
        cp = _incompressible(rng)  # tagged even when not shorter
    record = records.encode_record(SERDE, config, cp, metadata, compress=True, zdict=True)
    tag, data = cp_type_and_bytes(record)
    serde_type, raw = _stripped_bytes(cp)
    assert tag == b"zlibd:" + serde_type.encode()
    fields = records.blob_fields_of(record)
    z = zlib.decompressobj(zdict=b"".join(fields))
    assert z.decompress(data) + z.flush() == raw
    if fields:  # compressed against the record's own field names: unreadable without them
        with pytest.raises(zlib.error):
            zlib.decompress(data)


def test_format_3_records_are_shorter_than_format_2_for_many_versions() -> None:
    rng = random.Random(3)
    cp = empty_checkpoint()
    cp["channel_versions"] = {f"channel-{i}": a_version(rng) for i in range(12)}
    cp["versions_seen"] = {"node": dict(cp["channel_versions"])}
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    sizes = [len(records.encode_record(SERDE, config, cp, {}, **flags(fmt))) for fmt in FORMATS]
    assert sizes[0] > sizes[1] > sizes[2], sizes


def test_a_record_without_a_parent_has_no_parent_config() -> None:
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = empty_checkpoint()
    for fmt in FORMATS:
        record = records.encode_record(SERDE, config, cp, {"step": -1}, **flags(fmt))
        assert records.parent_of(record) == ""
        assert read("t", "", cp["id"], record, {}).parent_config is None


# --- blobs and list items ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_blobs_and_items_round_trip_any_value(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(10):
        value = a_value(rng)
        blob = records.encode_blob(SERDE, b"f", value)
        assert blob.field == b"f" and blob.value is value
        assert records.decode_blob(SERDE, blob.data) == value
        assert records.decode_item(SERDE, records.encode_item(SERDE, value)) == value
        assert not lists.is_reference(blob.data)
        assert lists.decode_segments(blob.data) is None and lists.decode_dref(blob.data) is None


def test_no_value_is_the_empty_blob_of_its_documented_size() -> None:
    blob = records.encode_blob(SERDE, b"f", NO_VALUE)
    assert blob.data == b"empty\x00" and len(blob.data) == EMPTY_BLOB_BYTES
    assert records.decode_blob(SERDE, blob.data) is NO_VALUE
    # ... and a value that merely looks empty is a value.
    for value in ("", b"", [], {}, None, 0):
        assert records.decode_blob(SERDE, records.encode_blob(SERDE, b"f", value).data) == value


def test_channel_values_names_channels_and_leaves_out_those_without_a_value() -> None:
    ns = "parent:1|child:2"
    decoded = {
        records.blob_field(ns, "messages", "0001.abc").encode(): ["m"],
        records.blob_field(ns, "branch:to:node", "0002.def").encode(): NO_VALUE,
        records.blob_field(ns, "état", "0003.0.5").encode(): None,
    }
    assert records.channel_values(decoded, ns) == {"messages": ["m"], "état": None}


@pytest.mark.parametrize("seed", SEEDS)
def test_segments_round_trip(seed: int) -> None:
    rng = random.Random(seed)
    segments = []
    for _ in range(rng.randint(0, MAX_SEGMENTS)):
        start = rng.randint(0, 10**6)
        segments.append(Segment(a_version(rng).encode(), start, start + rng.randint(1, 1000)))
    raw = lists.encode_segments(segments)
    assert lists.is_reference(raw)
    assert lists.decode_segments(raw) == segments
    assert lists.decode_dref(raw) is None


@pytest.mark.parametrize("lineage_chars", [25, 51])  # format 3's versions, format 2's
def test_the_longest_descriptor_fits_what_the_scripts_read(lineage_chars: int) -> None:
    lineage = b"9" * lineage_chars
    segments = [Segment(lineage, 10**12, 10**12 + 10**6) for _ in range(MAX_SEGMENTS)]
    assert len(lists.encode_segments(segments)) <= DESCRIPTOR_MAX_BYTES


def _names(segments: list[Segment]) -> list[tuple[bytes, int]]:
    """The items a list described by ``segments`` holds, by name: (lineage, list position)."""
    return [(s.lineage, i) for s in segments for i in range(s.start, s.end)]


def _true_prefix(a: list[Segment], b: list[Segment]) -> int:
    n = 0
    for x, y in zip(_names(a), _names(b), strict=False):
        if x != y:
            break
        n += 1
    return n


def _contiguous(rng: random.Random, lineages: list[bytes]) -> list[Segment]:
    """Segments as a put makes them: they tile the list's positions from 0."""
    out, pos = [], 0
    for _ in range(rng.randint(0, 5)):
        size = rng.randint(1, 6)
        out.append(Segment(rng.choice(lineages), pos, pos + size))
        pos += size
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_shared_prefix_is_exact_for_a_list_that_extends_a_prefix(seed: int) -> None:
    rng = random.Random(seed)
    base = _contiguous(rng, [b"L%d" % i for i in range(6)])
    keep = rng.randint(0, base[-1].end if base else 0)
    # ``other`` holds base's first ``keep`` items, then items of a lineage of its own.
    other = [Segment(s.lineage, s.start, min(s.end, keep)) for s in base if s.start < keep]
    if rng.random() < 0.7:
        other.append(Segment(b"fresh", keep, keep + rng.randint(1, 4)))
    assert lists.shared_prefix(base, other) == keep == _true_prefix(base, other)
    assert lists.shared_prefix(other, base) == keep


@pytest.mark.parametrize("seed", SEEDS)
def test_shared_prefix_never_claims_an_item_the_lists_do_not_share(seed: int) -> None:
    rng = random.Random(seed)
    lineages = [b"A", b"B", b"C"]
    for _ in range(50):
        a, b = _contiguous(rng, lineages), _contiguous(rng, lineages)
        assert lists.shared_prefix(a, b) <= _true_prefix(a, b)
    assert lists.shared_prefix([], []) == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_dict_references_round_trip(seed: int) -> None:
    rng = random.Random(seed)
    refs = []
    for _ in range(rng.randint(1, 4)):
        start = rng.randint(0, 10**5)
        key, channel = text(rng, 0, 10), text(rng, 1, 10).encode()
        refs.append(DictRef(key, channel, a_version(rng).encode(), start, start + rng.randint(1, 50)))
    raw = lists.encode_dref(refs)
    assert lists.is_reference(raw)
    assert lists.decode_dref(raw) == refs
    assert lists.decode_segments(raw) is None


def test_is_reference_of_what_is_not_stored() -> None:
    assert not lists.is_reference(None) and not lists.is_reference(b"")
    assert not lists.is_reference(b"tl-seg") and not lists.is_reference(b"tl-segment\x00x")


# --- pending writes ---------------------------------------------------------------------------


def store_writes(stored: dict[bytes, bytes], triples: list[bytes]) -> None:
    """The put_writes script: a regular write is kept once stored, a special one replaced."""
    for field, record, overwrite in zip(triples[::3], triples[1::3], triples[2::3], strict=True):
        if overwrite == b"1" or field not in stored:
            stored[field] = record


@pytest.mark.parametrize("seed", SEEDS)
def test_pending_writes_read_back_as_in_memory_saver_returns_them(seed: int) -> None:
    rng = random.Random(seed)
    memory = InMemorySaver()
    ns = rng.choice(["", "child:" + an_id(rng)])
    config = memory.put({"configurable": {"thread_id": "t", "checkpoint_ns": ns}}, empty_checkpoint(), {}, {})
    stored: dict[bytes, bytes] = {}
    tasks = [an_id(rng) for _ in range(3)]
    paths = ["", "~__pregel_pull, reply", "~__pregel_push, 0", "~__pregel_pull, ask"]
    channels = ["messages", "branch:to:reply", "state", ERROR, INTERRUPT, RESUME, SCHEDULED]
    for _ in range(rng.randint(1, 8)):  # tasks write; some are retried with other values
        task_id, task_path = rng.choice(tasks), rng.choice(paths)
        writes = [(rng.choice(channels), a_value(rng, 1)) for _ in range(rng.randint(0, 4))]
        memory.put_writes(config, writes, task_id, task_path)
        store_writes(stored, records.encode_writes(SERDE, config, writes, task_id, task_path))
    found = memory.get_tuple(config)
    assert found is not None
    replies: list[bytes | None] = [*stored.values(), None]  # None: deleted meanwhile
    rng.shuffle(replies)
    assert records.decode_writes(SERDE, replies, ns) == found.pending_writes


def test_special_writes_get_their_negative_index_and_replace() -> None:
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "n", "checkpoint_id": "c"}}
    triples = records.encode_writes(
        SERDE, config, [("a", 1), (ERROR, "boom"), ("b", 2), (INTERRUPT, "?")], "task", ""
    )
    fields, flags_ = triples[::3], triples[2::3]
    assert fields == [
        b"n\x00c\x00task\x000",
        b"n\x00c\x00task\x00-1",
        b"n\x00c\x00task\x002",
        b"n\x00c\x00task\x00-3",
    ]
    assert flags_ == [b"0", b"1", b"0", b"1"]


def test_writes_need_a_checkpoint_id() -> None:
    with pytest.raises(ValueError, match="checkpoint_id"):
        records.encode_writes(SERDE, {"configurable": {"thread_id": "t"}}, [("a", 1)], "task", "")


def _write_by_reference(
    rng: random.Random, ns: str, items: list[Any], start: int
) -> tuple[bytes, bytes, list[bytes]]:
    """``(write record, its record by reference, ref items)`` of a write of ``items`` to
    ``messages``, its items stored at ``start…`` of a lineage."""
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ns, "checkpoint_id": "c"}}
    record = records.encode_writes(SERDE, config, [("messages", items)], "task-1", "~path")[1]
    lineage = a_version(rng).encode()
    ref = records.ref_write(record, lineage, start, start + len(items))
    key = f"{ns}\x00messages".encode()
    pairs = [
        [lists.item_field(key, lineage, start + i), records.encode_item(SERDE, v)]
        for i, v in enumerate(items)
    ]
    rng.shuffle(pairs)  # the script returns them in no promised order
    return record, ref, [x for pair in pairs for x in pair]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_write_stored_by_reference_reads_back_its_list(seed: int) -> None:
    rng = random.Random(seed)
    ns = rng.choice(["", "sub:" + an_id(rng)])
    items = [a_value(rng, 1) for _ in range(rng.randint(0, 6))]
    record, ref, ref_items = _write_by_reference(rng, ns, items, rng.randint(0, 500))
    plain, by_ref = records.unpack(record), records.unpack(ref)
    assert by_ref[2] == REF_TYPE
    assert [by_ref[i] for i in (0, 1, 4, 5)] == [plain[i] for i in (0, 1, 4, 5)], (
        "task, channel, path, idx kept"
    )
    assert records.decode_writes(SERDE, [ref], ns, ref_items) == [("task-1", "messages", items)]
    # A reference and a plain write of the same checkpoint read together, in order.
    other = records.encode_writes(
        SERDE,
        {"configurable": {"thread_id": "t", "checkpoint_ns": ns, "checkpoint_id": "c"}},
        [("x", 1)],
        "task-0",
        "~path",
    )[1]
    assert records.decode_writes(SERDE, [ref, other], ns, ref_items) == [
        ("task-0", "x", 1),
        ("task-1", "messages", items),
    ]


def test_a_reference_whose_items_are_gone_raises_lookup_error_naming_the_task() -> None:
    rng = random.Random(1)
    _record, ref, ref_items = _write_by_reference(rng, "", ["a", "b", "c"], 10)
    missing_one = ref_items[2:]
    with pytest.raises(LookupError, match="'task-1' lost its list items"):
        records.decode_writes(SERDE, [ref], "", missing_one)
    # Items of the same lineage in another namespace are not this write's.
    with pytest.raises(LookupError):
        records.decode_writes(SERDE, [ref], "other-ns", ref_items)


def test_ref_fields_name_the_items_in_order() -> None:
    assert records.ref_fields(b"ns\x00messages", b"L\x003\x005") == [
        b"ns\x00messages\x00L\x003",
        b"ns\x00messages\x00L\x004",
    ]
    assert records.ref_fields(b"ns\x00messages", b"L\x007\x007") == []


# --- metadata filters -------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_metadata_filters_select_what_in_memory_saver_lists(seed: int) -> None:
    rng = random.Random(seed)
    memory = InMemorySaver()
    stored: dict[str, bytes] = {}
    pool = {"source": ["input", "loop"], "step": [0, 1, 2], "user": ["ann", "bob", None], "n": [1, 1.0, True]}
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for _ in range(12):
        cp = {**empty_checkpoint(), "id": an_id(rng)}
        metadata = {k: rng.choice(v) for k, v in pool.items() if rng.random() < 0.7}
        memory.put(config, cp, metadata, {})
        stored[cp["id"]] = records.encode_record(SERDE, config, cp, metadata)
    for _ in range(20):
        filter_ = {k: rng.choice(v) for k, v in pool.items() if rng.random() < 0.4}
        want = {t.checkpoint["id"] for t in memory.list(config, filter=filter_)}
        got = {
            i
            for i, r in stored.items()
            if records.metadata_matches(records.decode_metadata(SERDE, r), filter_)
        }
        assert got == want, filter_


def test_metadata_filter_rule() -> None:
    metadata = {"source": "loop", "step": 2}
    assert records.metadata_matches(metadata, None) and records.metadata_matches(metadata, {})
    assert records.metadata_matches(metadata, {"step": 2, "source": "loop"})
    assert not records.metadata_matches(metadata, {"step": 3})
    assert records.metadata_matches(metadata, {"user": None}), "an absent key equals None"
    assert not records.metadata_matches(metadata, {"user": "ann"})


# --- the formats this release reads -----------------------------------------------------------


def test_reads_the_thread_the_format_1_release_stored() -> None:
    """``format1_thread.json`` holds the keys the release before format 2 wrote (four turns and
    a pending write): its latest checkpoint decodes to the conversation it had."""
    fixture = json.loads(FORMAT1_FIXTURE.read_text())
    keys = {
        name: {base64.b64decode(f): base64.b64decode(v) for f, v in kind["hash"].items()}
        for name, kind in fixture["keys"].items()
        if "hash" in kind
    }
    latest = max(base64.b64decode(m) for m in fixture["keys"]["idx"]["zset"])
    ns, checkpoint_id = records.split_member(latest)
    record = keys["cp"][latest]
    writes = [r for f, r in keys["w"].items() if f.startswith(latest + b"\x00")]
    found = read("any-thread", ns, checkpoint_id, record, keys["blobs"], writes)
    messages = [[m.type, m.content] for m in found.checkpoint["channel_values"]["messages"]]
    assert messages == fixture["messages"]
    assert [(t, c, [m.content for m in v]) for t, c, v in found.pending_writes] == [
        ("task-pending", "messages", ["pending"])
    ]
    assert found.metadata["step"] == 10 and found.parent_config is not None
    # Every checkpoint of that thread decodes, and its parent is the one before it in the index.
    order = sorted(base64.b64decode(m) for m in fixture["keys"]["idx"]["zset"])
    for previous, current in itertools.pairwise(order):
        assert records.parent_of(keys["cp"][current]) == records.split_member(previous)[1]
        read("t", "", records.split_member(current)[1], keys["cp"][current], keys["blobs"])


@pytest.mark.parametrize("seed", SEEDS)
def test_reads_what_the_format_1_release_writes(seed: int) -> None:
    rng = random.Random(seed)
    config, cp, metadata = a_put(rng)
    record, blobs = format1_release.encode_put(SERDE, config, cp, metadata, dict(cp["channel_versions"]))
    thread_id, ns, _parent = records.thread_ns_id(config)
    got = read(thread_id, ns, cp["id"], record, {b.field: b.data for b in blobs})
    assert got == format1_release.decode_tuple(
        SERDE,
        thread_id,
        ns,
        [cp["id"].encode(), record, []],
        format1_release.channel_values(
            {b.field: format1_release.decode_blob(SERDE, b.data) for b in blobs}, ns
        ),
    )
    assert got.checkpoint == oracle_put(config, cp, metadata).checkpoint


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_reads_what_the_format_2_release_writes(seed: int, compress: bool) -> None:
    rng = random.Random(seed)
    config, cp, metadata = a_put(rng)
    record = format2_release.encode_record(SERDE, config, cp, metadata, compress=compress)
    thread_id, ns, _parent = records.thread_ns_id(config)
    got = read(thread_id, ns, cp["id"], record, blobs_of(config, cp))
    want = oracle_put(config, cp, metadata)
    assert (got.checkpoint, got.parent_config) == (want.checkpoint, want.parent_config)
    # Its descriptors and writes are this release's too.
    segments = [Segment(b"0001.abc", 0, 3), Segment(b"0002.def", 3, 5)]
    assert lists.decode_segments(format2_release.encode_segments(segments)) == segments
    write_config = {"configurable": {**config["configurable"], "checkpoint_id": "c"}}
    old = format2_release.encode_writes(SERDE, write_config, [("a", 1), (ERROR, "x")], "task", "p")
    assert old == records.encode_writes(SERDE, write_config, [("a", 1), (ERROR, "x")], "task", "p")


@pytest.mark.parametrize("seed", SEEDS)
def test_formats_1_and_2_stay_readable_by_their_releases(seed: int) -> None:
    """A rolling update writes the old format until every replica reads the new one."""
    rng = random.Random(seed)
    config, cp, metadata = a_put(rng)
    thread_id, ns, _parent = records.thread_ns_id(config)
    want = read(
        thread_id, ns, cp["id"], records.encode_record(SERDE, config, cp, metadata), blobs_of(config, cp)
    )
    values = want.checkpoint["channel_values"]
    entry = [cp["id"].encode(), records.encode_record(SERDE, config, cp, metadata), []]
    assert format1_release.decode_tuple(SERDE, thread_id, ns, entry, values) == want
    entry = [cp["id"].encode(), records.encode_record(SERDE, config, cp, metadata, compress=True), []]
    assert format2_release.decode_tuple(SERDE, thread_id, ns, entry, values) == want


def test_older_releases_refuse_format_3_loudly() -> None:
    """Format 3's tags are no serde type: a release before it fails on them ("Unknown
    serialization type") instead of reading a checkpoint without its pending writes."""
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "p"}}
    cp = empty_checkpoint()
    record = records.encode_record(SERDE, config, cp, {}, compress=True, zdict=True)
    for release in (format1_release, format2_release):
        with pytest.raises(NotImplementedError, match="Unknown serialization type: zlibd:"):
            release.decode_tuple(SERDE, "t", "", [cp["id"].encode(), record, []], {})
    rng = random.Random(0)
    _record, ref, _items = _write_by_reference(rng, "", ["m"], 0)
    with pytest.raises(NotImplementedError, match="Unknown serialization type: tl-ref"):
        format2_release.decode_writes(SERDE, [ref])
    dref = lists.encode_dref([DictRef("messages", b"messages", b"L", 0, 1)])
    with pytest.raises(NotImplementedError, match="Unknown serialization type: tl-dref"):
        format2_release.decode_blob(SERDE, dref)


def test_the_format_1_release_refuses_a_list_stored_item_by_item() -> None:
    descriptor = lists.encode_segments([Segment(b"L", 0, 2)])
    with pytest.raises(NotImplementedError, match="Unknown serialization type: tl-seg"):
        format1_release.decode_blob(SERDE, descriptor)


# --- corrupt and unknown records --------------------------------------------------------------


def test_an_unknown_checkpoint_type_raises_naming_it() -> None:
    """A record of a later format this release does not know fails loudly, as format 3 does
    in the releases before it."""
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    record = records.encode_record(SERDE, config, empty_checkpoint(), {})
    items = records.unpack(record)
    items[1 + int(items[0])] = b"zstd:msgpack"
    with pytest.raises(NotImplementedError, match="Unknown serialization type: zstd:msgpack"):
        read("t", "", "c", records.pack(items), {})


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_record_cut_short_before_its_parent_id_raises_value_error(fmt: int) -> None:
    rng = random.Random(fmt)
    config, cp, metadata = a_put(rng)
    config["configurable"]["checkpoint_id"] = "parent-id"
    record = records.encode_record(SERDE, config, cp, metadata, **flags(fmt))
    # Netstrings carry no end mark: a cut inside the last item (the parent id) goes unnoticed.
    parent_starts = len(record) - len(b"parent-id")
    for cut in range(1, parent_starts):
        with pytest.raises(ValueError):
            read("t", "", "c", record[:cut], {})
    with pytest.raises(IndexError):  # no record at all: not even its field count
        read("t", "", "c", b"", {})


def test_a_format_2_record_whose_compressed_bytes_are_damaged_raises_zlib_error() -> None:
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = a_checkpoint(random.Random(5), [f"ch{i}" for i in range(10)])
    record = records.encode_record(SERDE, config, cp, {}, compress=True)
    tag, data = cp_type_and_bytes(record)
    assert tag.startswith(b"zlib:")
    items = records.unpack(record)
    at = 2 + int(items[0])
    for damaged in [data[:-1], data[:-4], data[: len(data) // 2], bytes([data[0] ^ 0xFF]) + data[1:]]:
        items[at] = damaged
        with pytest.raises(zlib.error):
            read("t", "", "c", records.pack(items), {})


def test_a_format_3_record_whose_compressed_bytes_are_cut_short_is_refused() -> None:
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = a_checkpoint(random.Random(5), [f"ch{i}" for i in range(10)])
    record = records.encode_record(SERDE, config, cp, {}, compress=True, zdict=True)
    items = records.unpack(record)
    at = 2 + int(items[0])
    items[at] = items[at][:-1]
    with pytest.raises((zlib.error, ValueError)):
        read("t", "", "c", records.pack(items), {})
