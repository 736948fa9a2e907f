"""Search and list_namespaces of :class:`~threadline.store.redis.RedisStore`, in bounded pages
(ADR 0015).

Every call has a :class:`Budget` of ``max_scan``: each index member read, each step of the
namespace skip-scan, each vector-set element returned and each root visited (a prefix that is
empty or starts with ``*`` visits every root, in order) costs one. When it runs out, the call
answers with what it found so far and logs a warning.

Orders: a search without ``query`` and the scoreless items of one with it come in
``(namespace, key)`` order (InMemoryStore's is insertion order); a ranked search orders by
score, ties in ``(namespace, key)`` order; namespaces come sorted, as InMemoryStore's.

What it needs of the store is :class:`SearchedStore`, so this module sits below ``redis.py``
(which calls it) and does not import it.
"""

from __future__ import annotations

import heapq
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

import redis.asyncio as aioredis
from langchain_core.embeddings import Embeddings
from langgraph.store.base import Item, ListNamespacesOp, MatchCondition, SearchItem, SearchOp

from threadline.store import redis_format as fmt

logger = logging.getLogger("threadline.store.redis")

MIN_EF = 200  # VSIM exploration factor at least: sets this small rank exactly


class SearchedStore(Protocol):
    """What search and list_namespaces use of :class:`~threadline.store.redis.RedisStore`."""

    client: aioredis.Redis
    keys: fmt.Keys
    mode: str
    dims: int
    embeddings: Embeddings | None
    max_scan: int
    page_size: int

    def call(self, name: str, keys: Sequence[bytes], args: Sequence[Any]) -> fmt.Command: ...

    async def script(self, name: str, keys: Sequence[bytes], args: Sequence[Any]) -> Any: ...

    async def run(self, commands: Sequence[fmt.Command]) -> list[Any]: ...

    async def read(
        self, root: str, members: Sequence[bytes], what: str, refresh: bool = False
    ) -> list[list[Any]]: ...


class Budget:
    """What one call may still look at; ``hit`` once it stopped short because of it."""

    __slots__ = ("hit", "left")

    def __init__(self, n: int) -> None:
        self.left, self.hit = n, False

    def take(self, n: int) -> int:
        n = min(n, self.left)
        self.left -= n
        if n == 0:
            self.hit = True
        return n


@dataclass(slots=True)
class Found:
    root: str
    member: bytes
    item: Item
    ttl: bool
    vectors: int
    blob: bytes | None = None


async def roots(store: SearchedStore, budget: Budget) -> AsyncIterator[tuple[str, bytes]]:
    """Every root in order, with its generation (for ROOT_DROP); one budget each."""
    lo = b"-"
    while True:
        n = budget.take(store.page_size)
        if not n:
            return
        reply = await store.script("roots", [store.keys.roots, store.keys.gen], [lo, b"+", n])
        pairs = list(zip(reply[::2], reply[1::2], strict=True))
        budget.left += n - len(pairs)
        for label, gen in pairs:
            yield label.decode(), gen
        if len(pairs) < n:
            return
        lo = b"(" + pairs[-1][0]


async def scan(
    store: SearchedStore, root: str, rest: Sequence[str], budget: Budget, what: str
) -> AsyncIterator[Found]:
    """The live items of root ``root`` under ``rest``, in order, ``page_size`` a round trip (the
    next page's members come with this page's items)."""
    index, lo_hi = store.keys.index(root), fmt.prefix_range(rest)
    asked = budget.take(store.page_size)
    members = (
        await store.client.execute_command("ZRANGEBYLEX", index, *lo_hi, "LIMIT", 0, asked) if asked else []
    )
    width = 6 if what == "e" else 5
    while True:
        budget.left += asked - len(members)
        if not members:
            return
        full = len(members) == asked
        keys = [index, store.keys.vectors(root), *(store.keys.item(root, m) for m in members)]
        commands = [store.call("read", keys, [store.mode, what, "0", *members])]
        asked = budget.take(store.page_size) if full else 0
        if asked:
            commands.append(("ZRANGEBYLEX", index, b"(" + members[-1], lo_hi[1], "LIMIT", 0, asked))
        replies = await store.run(commands)
        for j, m in enumerate(members):
            fields = replies[0][1 + j * width : 1 + (j + 1) * width]
            if fields[0] is not None:
                namespace, key = fmt.parse_member(root, m)
                blob = fields[5] if what == "e" else None
                yield Found(
                    root,
                    m,
                    fmt.decode_item(namespace, key, fields),
                    fields[3] is not None,
                    int(fields[4] or 0),
                    blob,
                )
        members = replies[1] if asked else []


async def items(
    store: SearchedStore, prefix: tuple[str, ...], budget: Budget, what: str
) -> AsyncIterator[Found]:
    """The live items under ``prefix`` in order; an empty prefix visits every root, and forgets
    one whose index it found empty."""
    if prefix:
        async with aclosing(scan(store, prefix[0], prefix[1:], budget, what)) as it:
            async for found in it:
                yield found
        return
    async with aclosing(roots(store, budget)) as rs:
        async for root, gen in rs:
            seen = 0
            async with aclosing(scan(store, root, (), budget, what)) as it:
                async for found in it:
                    seen += 1
                    yield found
            if not seen and not budget.hit:
                await store.script("root_drop", [store.keys.roots, store.keys.gen], [root, gen])


async def first(
    store: SearchedStore, op: SearchOp, budget: Budget, want: int, keep: Callable[[Found], bool]
) -> list[Found]:
    """The first ``want`` items under the prefix that match the filter and ``keep``."""
    out: list[Found] = []
    if want <= 0:
        return out
    async with aclosing(items(store, op.namespace_prefix, budget, "f")) as it:
        async for found in it:
            if keep(found) and fmt.matches(found.item.value, op.filter):
                out.append(found)
                if len(out) >= want:
                    break
    return out


async def search(store: SearchedStore, op: SearchOp) -> list[SearchItem]:
    fmt.check_filter(op.filter)
    if op.limit < 0 or op.offset < 0:
        raise ValueError("limit and offset must not be negative")
    budget = Budget(store.max_scan)
    query = None
    if op.query and store.embeddings is not None:
        query = await store.embeddings.aembed_query(op.query)
    kept: list[tuple[float | None, Found]]
    if query is None:
        kept = [(None, f) for f in (await first(store, op, budget, op.offset + op.limit, _any))[op.offset :]]
    elif store.mode == "v":
        kept = await _ranked_by_vector_sets(store, op, query, budget)
    else:
        kept = await _ranked_exactly(store, op, query, budget)
    if budget.hit:
        logger.warning("store search under %r stopped after max_scan=%d", op.namespace_prefix, store.max_scan)
    if op.refresh_ttl:
        by_root: dict[str, list[bytes]] = defaultdict(list)
        for _, f in kept:
            if f.ttl:
                by_root[f.root].append(f.member)
        for root, members in by_root.items():
            await store.read(root, members, "r", refresh=True)
    return [fmt.search_item(f.item, score) for score, f in kept]


def _any(found: Found) -> bool:
    return True


async def _ranked_exactly(
    store: SearchedStore, op: SearchOp, query: list[float], budget: Budget
) -> list[tuple[float | None, Found]]:
    """Cosine over every candidate under the prefix (at most ``max_scan``), as InMemoryStore
    ranks: the best vector of each item, then items without vectors to fill ``limit``."""
    k = op.offset + op.limit
    heap: list[tuple[float, int, Found]] = []  # the k best as (score, -seq): ties by order
    scoreless: list[Found] = []
    seq = 0
    async with aclosing(items(store, op.namespace_prefix, budget, "e")) as it:
        async for found in it:
            if not fmt.matches(found.item.value, op.filter):
                continue
            seq += 1
            if found.vectors and found.blob:
                entry = (fmt.cosine(query, fmt.unpack_vectors(found.blob, store.dims)), -seq, found)
                if len(heap) < k:
                    heapq.heappush(heap, entry)
                elif k and entry[:2] > heap[0][:2]:
                    heapq.heapreplace(heap, entry)
            elif len(scoreless) < op.limit:
                scoreless.append(found)
    ranked = sorted(heap, key=lambda e: (-e[0], -e[1]))
    kept: list[tuple[float | None, Found]] = [(s, f) for s, _, f in ranked[op.offset :]]
    return kept + [(None, f) for f in scoreless[: op.limit - len(kept)]]


async def _ranked_by_vector_sets(
    store: SearchedStore, op: SearchOp, query: list[float], budget: Budget
) -> list[tuple[float | None, Found]]:
    """VSIM on each root's vector set (at most ``max_scan`` elements in all, restricted to the
    prefix by a FILTER on the elements' prefix hashes), then the filter on the items read."""
    prefix, rest = op.namespace_prefix, op.namespace_prefix[1:]
    blob = fmt.pack_vectors([query], store.dims)[0]
    under = fmt.labels_prefix(rest)
    candidates: list[tuple[float, str, bytes]] = []

    async def rank(root: str) -> None:
        count = budget.take(store.max_scan)
        if not count:
            return
        command = ["VSIM", store.keys.vectors(root), "FP32", blob, "WITHSCORES", "COUNT", count]
        command += ["EF", max(count, MIN_EF)]
        if rest:
            command += ["FILTER", f"{fmt.prefix_hash(rest)} in .p", "FILTER-EF", count * 10]
        reply = await store.client.execute_command(*command)
        pairs = (
            list(reply.items())
            if isinstance(reply, dict)
            else list(zip(reply[::2], reply[1::2], strict=True))
        )
        budget.left += count - len(pairs)
        seen: set[bytes] = set()
        for element, score in pairs:  # best first: an item's first element is its best vector
            m = element.rsplit(b"\0", 1)[0]
            if m not in seen and m.startswith(under):
                seen.add(m)
                candidates.append((2 * float(score) - 1, root, m))  # VSIM's score is (1 + cos) / 2

    if prefix:
        await rank(prefix[0])
    else:
        async with aclosing(roots(store, budget)) as rs:
            async for root, _ in rs:
                await rank(root)
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
    need, matched = op.offset + op.limit, []
    for start in range(0, len(candidates), store.page_size):
        if len(matched) >= need:
            break
        page = candidates[start : start + store.page_size]
        by_root: dict[str, list[bytes]] = defaultdict(list)
        for _, root, m in page:
            by_root[root].append(m)
        fields: dict[tuple[str, bytes], list[Any]] = {}
        for root, members in by_root.items():
            for m, got in zip(members, await store.read(root, members, "f"), strict=True):
                fields[(root, m)] = got
        for score, root, m in page:
            got = fields[(root, m)]
            if got[0] is None:
                continue
            namespace, key = fmt.parse_member(root, m)
            item = fmt.decode_item(namespace, key, got)
            if fmt.matches(item.value, op.filter):
                matched.append((score, Found(root, m, item, got[3] is not None, int(got[4] or 0))))
    kept: list[tuple[float | None, Found]] = list(matched[op.offset : need])
    if len(kept) < op.limit:
        fill = await first(store, op, budget, op.limit - len(kept), lambda f: not f.vectors)
        kept += [(None, f) for f in fill]
    return kept


async def list_namespaces(store: SearchedStore, op: ListNamespacesOp) -> list[tuple[str, ...]]:
    if op.limit < 0 or op.offset < 0 or (op.max_depth is not None and op.max_depth < 0):
        raise ValueError("limit, offset and max_depth must not be negative")
    merged = _merge(op.match_conditions or ())
    if merged is None:
        return []
    pre, suf = merged
    budget = Budget(store.max_scan)
    if op.max_depth == 0:  # InMemoryStore: every namespace cut to ()
        found = await _namespaces(store, pre, suf, 1, 1, budget)
        return [()][op.offset : op.offset + op.limit] if found else []
    out = await _namespaces(store, pre, suf, op.max_depth or 0, op.offset + op.limit, budget)
    if budget.hit:
        logger.warning("store list_namespaces stopped after max_scan=%d", store.max_scan)
    return out[op.offset :]


async def _namespaces(
    store: SearchedStore, pre: list[str], suf: list[str], depth: int, want: int, budget: Budget
) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    if want <= 0:
        return out
    fixed: list[str] = []  # the prefix's labels below the root up to its first wildcard
    for label in pre[1:]:
        if label == "*":
            break
        fixed.append(label)
    lo, hi = fmt.prefix_range(fixed)

    async def one_root() -> AsyncIterator[tuple[str, bytes]]:
        if budget.take(1):
            yield pre[0], b""

    source = one_root() if pre and pre[0] != "*" else roots(store, budget)
    conditions = [len(pre), *pre, len(suf), *suf]
    async with aclosing(source) as rs:
        async for root, _ in rs:
            cursor: bytes = lo
            while len(out) < want and budget.left > 0:
                args = [cursor, hi, want - len(out), budget.left, depth, root, *conditions]
                done, cursor, steps, *flat = await store.script("namespaces", [store.keys.index(root)], args)
                budget.left -= int(steps)
                pairs = list(zip(flat[::2], flat[1::2], strict=True))
                live = await store.read(root, [m for _, m in pairs], "k")
                for (labels, _), fields in zip(pairs, live, strict=True):
                    if fields[0] is None:  # an expired item, now out of the index: look again
                        cursor, done = (b"[" + labels) if labels else b"-", 0
                        break
                    out.append((root, *(x.decode() for x in labels.split(b"\0")[:-1])))
                if done:
                    break
            if len(out) >= want:
                break
            if budget.left <= 0:
                budget.hit = True
                break
    return out


def _merge(conditions: Sequence[MatchCondition]) -> tuple[list[str], list[str]] | None:
    """One prefix and one suffix pattern that match what all ``conditions`` match (None if
    none can)."""
    pre: list[str] = []
    suf: list[str] = []  # reversed while merging
    for condition in conditions:
        if condition.match_type not in ("prefix", "suffix"):
            raise ValueError(f"Unsupported match type: {condition.match_type}")
        path = list(condition.path)
        target = pre if condition.match_type == "prefix" else suf
        if condition.match_type == "suffix":
            path.reverse()
        for i, label in enumerate(path):
            if i == len(target):
                target.append(label)
            elif target[i] == "*":
                target[i] = label
            elif label not in ("*", target[i]):
                return None
    suf.reverse()
    return pre, suf
