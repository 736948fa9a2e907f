"""The stored format of :class:`~threadline.store.redis.RedisStore` (ADR 0015), without I/O:
key names, index members, item records, vectors, and the search filter as InMemoryStore
evaluates it.

A namespace ``(L, r1, …, rk)`` lives under its *root* label ``L``: every key of a root shares
the cluster hash tag ``{L'}`` (``L`` with ``%``, ``{``, ``}``, ``#`` percent-encoded). The root's
index holds one member per item, ``r1\\0…rk\\0\\0key`` (UTF-8): labels are non-empty and hold no
NUL, so the empty label ends the namespace, and the members' byte order is the order of
``(namespace, key)`` tuples in Python. The root set (tag ``{#}``) lists the roots.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from langgraph.store.base import Item, SearchItem

FIELDS = (b"v", b"c", b"u", b"t", b"n")  # value, created µs, updated µs, ttl ms, vectors
VECTORS_FIELD = b"e"  # the item's vectors, float32 little-endian (exact mode only)
LEX_MAX = b"\xff"  # above every UTF-8 member byte
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Command = tuple[Any, ...]  # one Redis command and its arguments, as ``execute_command`` takes them


def _tag(label: str) -> str:
    return label.replace("%", "%25").replace("{", "%7B").replace("}", "%7D").replace("#", "%23")


class Keys:
    """Key names under ``prefix``."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix.encode()
        meta = self.prefix + b":{#}:"
        self.roots, self.gen, self.meta = meta + b"roots", meta + b"gen", meta + b"meta"
        self.probe = meta + b"probe"  # never written: what setup() asks VCARD about

    def root(self, label: str) -> bytes:
        return self.prefix + b":{" + _tag(label).encode() + b"}:"

    def index(self, label: str) -> bytes:
        """ZSET (lex, scores 0): one member per item of the root."""
        return self.root(label) + b"x"

    def vectors(self, label: str) -> bytes:
        """Vector set of the root (Redis 8): elements ``member\\0j``, one per vector."""
        return self.root(label) + b"v"

    def item(self, label: str, member: bytes) -> bytes:
        """HASH of one item: ``v`` JSON value, ``c``/``u`` µs, ``t`` TTL ms, ``n``, ``e``."""
        return self.root(label) + b"i:" + member


def labels_prefix(labels: Sequence[str]) -> bytes:
    """The members of every namespace under ``(L, *labels)`` start with this."""
    return b"".join(label.encode() + b"\0" for label in labels)


def member(namespace: Sequence[str], key: str) -> bytes:
    """The index member of ``key`` in ``namespace`` (the root label left out)."""
    return labels_prefix(namespace[1:]) + b"\0" + key.encode()


def parse_member(root: str, m: bytes) -> tuple[tuple[str, ...], str]:
    """``(namespace, key)`` of member ``m`` of root ``root``."""
    labels = [root]
    pos = 0
    while m[pos : pos + 1] != b"\0":
        end = m.index(b"\0", pos)
        labels.append(m[pos:end].decode())
        pos = end + 1
    return tuple(labels), m[pos + 1 :].decode()


def prefix_range(rest: Sequence[str]) -> tuple[bytes, bytes]:
    """ZRANGEBYLEX bounds of every member under ``(L, *rest)``."""
    if not rest:
        return b"-", b"+"
    start = labels_prefix(rest)
    return b"[" + start, b"(" + start + LEX_MAX


def prefix_hash(rest: Sequence[str]) -> int:
    """48 bits naming ``(L, *rest)`` in a vector's attributes (a FILTER ``h in .p``)."""
    return int.from_bytes(hashlib.sha1(labels_prefix(rest)).digest()[:6], "big")


def vector_attributes(namespace: Sequence[str]) -> bytes:
    """``{"p": [...]}``: the hashes of every prefix of the namespace below its root."""
    rest = namespace[1:]
    return json.dumps({"p": [prefix_hash(rest[:i]) for i in range(1, len(rest) + 1)]}).encode()


def encode_value(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def timestamp(us: bytes) -> datetime:
    return EPOCH + timedelta(microseconds=int(us))


def ttl_ms(minutes: float | None) -> int:
    """The TTL in ms Redis gets (0: none)."""
    return 0 if minutes is None else max(1, round(minutes * 60_000))


def decode_item(namespace: tuple[str, ...], key: str, fields: Sequence[Any]) -> Item:
    """An :class:`Item` from the ``FIELDS`` read (``v`` present)."""
    v, c, u = fields[0], fields[1], fields[2]
    return Item(
        value=json.loads(v), key=key, namespace=namespace, created_at=timestamp(c), updated_at=timestamp(u)
    )


def search_item(item: Item, score: float | None = None) -> SearchItem:
    return SearchItem(item.namespace, item.key, item.value, item.created_at, item.updated_at, score)


def pack_vectors(vectors: Sequence[Sequence[float]], dims: int) -> list[bytes]:
    out = []
    for vector in vectors:
        if len(vector) != dims:
            raise ValueError(f"an embedding has {len(vector)} dimensions, the index {dims}")
        out.append(struct.pack(f"<{dims}f", *vector))
    return out


def unpack_vectors(blob: bytes, dims: int) -> list[tuple[float, ...]]:
    size = 4 * dims
    return [struct.unpack(f"<{dims}f", blob[i : i + size]) for i in range(0, len(blob), size)]


def cosine(query: Sequence[float], vectors: Sequence[Sequence[float]]) -> float:
    """The best cosine similarity of ``query`` with one of ``vectors`` (0 for a zero vector),
    as InMemoryStore scores an item (its max pooling)."""
    qn = math.sqrt(sum(a * a for a in query))
    best = -math.inf
    for v in vectors:
        vn = math.sqrt(sum(b * b for b in v))
        best = max(best, sum(a * b for a, b in zip(query, v, strict=True)) / (qn * vn) if vn else 0.0)
    return best


# The search filter, as InMemoryStore's ``_compare_values`` and ``_apply_operator``: Python
# equality (so ``1 == 1.0 == True``), nested dicts match key by key, lists element by element.
# One deviation: where InMemoryStore raises (``float()`` of a missing or non-numeric value under
# ``$gt``/``$gte``/``$lt``/``$lte``), the item does not match.

OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def check_filter(filter: dict[str, Any] | None) -> None:
    """Raise ``ValueError`` for an operator InMemoryStore does not know (before any I/O)."""

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if any(isinstance(k, str) and k.startswith("$") for k in value):
                for k in value:
                    if k not in OPERATORS:
                        raise ValueError(f"Unsupported operator: {k}")
            else:
                for v in value.values():
                    walk(v)
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v)

    walk(filter or {})


def matches(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    return all(_compare(value.get(k), f) for k, f in (filter or {}).items())


def _compare(item_value: Any, filter_value: Any) -> bool:
    if isinstance(filter_value, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in filter_value):
            return all(_operator(item_value, op, v) for op, v in filter_value.items())
        if not isinstance(item_value, dict):
            return False
        return all(_compare(item_value.get(k), v) for k, v in filter_value.items())
    if isinstance(filter_value, list | tuple):
        return (
            isinstance(item_value, list | tuple)
            and len(item_value) == len(filter_value)
            and all(_compare(i, f) for i, f in zip(item_value, filter_value, strict=True))
        )
    return bool(item_value == filter_value)


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    try:
        a, b = float(value), float(operand)
    except (TypeError, ValueError):
        return False
    if op == "$gt":
        return a > b
    if op == "$gte":
        return a >= b
    if op == "$lt":
        return a < b
    if op == "$lte":
        return a <= b
    raise ValueError(f"Unsupported operator: {op}")
