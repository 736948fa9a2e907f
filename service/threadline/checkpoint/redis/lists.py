"""Lists stored item by item (format 2, ADR 0007) and dicts of such lists stored by reference
(format 3): the fields of list items, the descriptor blob (segments of lineages) and the
dict-reference blob. No I/O; the rest of the record format (and the lineages it names) is
:mod:`threadline.checkpoint.redis.records`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

# Type tag of a blob whose value is a dict of lists of list items stored in the thread's blobs
# (format 3): a MessagesState graph's input, ``{"messages": [the human message]}``, once its
# message is stored as an item of the messages list (see :func:`encode_dref`).
DREF_TYPE = b"tl-dref"
# Type tag of a descriptor blob (a list stored item by item). Not a serde type: a release
# that predates format 2 fails loudly on it (serde: "Unknown serialization type") instead of
# reading the channel as empty.
SEGMENTS_TYPE = b"tl-seg"
# Descriptors are never longer than this (at most MAX_SEGMENTS segments of ~60 bytes); the
# scripts read only blobs up to this size, so big values never pass through Lua.
DESCRIPTOR_MAX_BYTES = 2048
MAX_SEGMENTS = 16


class Segment(NamedTuple):
    """Positions ``start <= i < end`` of a list value, stored in lineage ``lineage``."""

    lineage: bytes
    start: int
    end: int


def item_field(channel_key: bytes, lineage: bytes, position: int) -> bytes:
    """The blobs-hash field of one list item: ``ns\0channel\0lineage\0position``.

    Four parts, where a version's field has three: the two never collide.
    """
    return b"%s\x00%s\x00%d" % (channel_key, lineage, position)


def encode_segments(segments: Sequence[Segment]) -> bytes:
    """The descriptor blob of a list stored item by item (see :data:`SEGMENTS_TYPE`)."""
    parts = [SEGMENTS_TYPE]
    for seg in segments:
        parts += [seg.lineage, b"%d" % seg.start, b"%d" % seg.end]
    return b"\x00".join(parts) + (b"\x00" if not segments else b"")


def shared_prefix(a: Sequence[Segment], b: Sequence[Segment]) -> int:
    """How many first items two lists described by segments share for certain.

    An item is named by (lineage, position) and never rewritten (see the drop script), so
    equal names mean equal items.
    """
    n = 0
    for x, y in zip(a, b, strict=False):
        if x.lineage != y.lineage or x.start != y.start:
            return n
        n = min(x.end, y.end)
        if x.end != y.end:
            return n
    return n


class DictRef(NamedTuple):
    """One key of a dict stored by reference: items ``start <= i < end`` of a lineage of a
    channel (in the blob's namespace)."""

    key: str
    channel: bytes
    lineage: bytes
    start: int
    end: int


def encode_dref(refs: Sequence[DictRef]) -> bytes:
    """The blob of a dict whose values are lists of stored list items (keys hold no NUL)."""
    parts = [DREF_TYPE]
    for r in refs:
        parts += [r.key.encode(), r.channel, r.lineage, b"%d" % r.start, b"%d" % r.end]
    return b"\x00".join(parts)


def is_reference(raw: bytes | None) -> bool:
    """Whether a blob is a descriptor or a dict by reference (its value needs items)."""
    return bool(raw) and (raw.startswith(SEGMENTS_TYPE + b"\x00") or raw.startswith(DREF_TYPE + b"\x00"))


def decode_dref(raw: bytes) -> list[DictRef] | None:
    """The references of a :func:`encode_dref` blob, or None if ``raw`` is another blob."""
    if not raw.startswith(DREF_TYPE + b"\x00"):
        return None
    p = raw[len(DREF_TYPE) + 1 :].split(b"\x00")
    return [
        DictRef(p[i].decode(), p[i + 1], p[i + 2], int(p[i + 3]), int(p[i + 4])) for i in range(0, len(p), 5)
    ]


def decode_segments(raw: bytes) -> list[Segment] | None:
    """The segments of a descriptor blob, or None if ``raw`` is a whole value."""
    if not raw.startswith(SEGMENTS_TYPE + b"\x00"):
        return None
    parts = raw[len(SEGMENTS_TYPE) + 1 :].split(b"\x00")
    return [Segment(parts[i], int(parts[i + 1]), int(parts[i + 2])) for i in range(0, len(parts) - 2, 3)]
