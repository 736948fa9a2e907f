"""The harness of the store contract suite (``test_store_contract.py``): a store under test
beside ``InMemoryStore`` (the oracle), the same calls on both, every result compared.

What the oracle lacks, the harness models, and says so here:

- **TTL**: InMemoryStore has none. A put's ``ttl`` goes to the store under test only; the
  harness waits (on the store's state, never a fixed sleep) until the store lost an item with a
  short TTL, then deletes it from the oracle.
- **Timestamps**: the two stores' clocks differ, so an item's ``created_at``/``updated_at`` must
  lie within the wall-clock window of the put the model names (InMemoryStore sets both at every
  put); the oracle's own timestamps are checked against the same model.
- **Order**: InMemoryStore orders search results by insertion (arbitrary, and not kept by any
  persistent store): a page must then be a slice, at its offset, of the store's own full answer,
  which must hold the oracle's full answer, in any order (a page that holds the whole answer
  may come in an order of its own); a store with a documented order
  (``Backend.ordered``) is held to it. Ranked results compare score by score (within ``TOL``),
  items of equal scores in any order.
- **Artefacts of the oracle**, not behaviour: InMemoryStore lists a namespace that a ``get`` or
  ``search`` touched or whose last item was deleted (its ``defaultdict``), so empty namespaces
  are pruned before listing; and it keeps the vectors of fields a re-put no longer indexes, so a
  put replaces an oracle item by delete + put.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from langgraph.store.base import BaseStore, GetOp, ListNamespacesOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

DIMS = 16
TOL = 1e-5
SHORT_TTL = 1 / 60  # minutes: a second
LONG_TTL = 60.0  # never reached in a test
EVERYTHING = 10_000  # a limit that takes every item


def embed(texts: Sequence[str]) -> list[list[float]]:
    """Deterministic and local: each word adds 1 to one of 15 dimensions (by CRC-32), plus a
    constant 0.5 so no vector is zero. Integers and halves are exact in float32 too."""
    out = []
    for text in texts:
        vector = [0.0] * DIMS
        vector[0] = 0.5
        for word in re.findall(r"\w+", text.lower()):
            vector[1 + zlib.crc32(word.encode()) % (DIMS - 1)] += 1.0
        out.append(vector)
    return out


def index_config() -> dict[str, Any]:
    return {"dims": DIMS, "embed": embed, "fields": ["text", "title"]}


@dataclass
class Backend:
    """A store under test. ``deviations``: feature -> the upstream behaviour that disagrees with
    InMemoryStore there (its random sequences leave the feature out; the feature's focused case
    is a strict xfail naming it)."""

    name: str
    index: bool = False
    ttl: bool = True
    ordered: bool = False  # results in (namespace, key) order where InMemoryStore's is arbitrary
    sweep: bool = False  # expired items go only when sweep_ttl() runs
    deviations: dict[str, str] = field(default_factory=dict)
    # feature -> why its case cannot run here (a disagreement that shows only sometimes; a test
    # of its own makes it show every time)
    unstable: dict[str, str] = field(default_factory=dict)


def now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Life:
    """Put windows of one item since it was (re)created: (oracle, subject) per put."""

    first: tuple[tuple[datetime, datetime], tuple[datetime, datetime]]
    last: tuple[tuple[datetime, datetime], tuple[datetime, datetime]]
    short: bool = False  # a short TTL: it expires during the test
    value: dict[str, Any] = field(default_factory=dict)


Key = tuple[tuple[str, ...], str]


class Pair:
    """The oracle and a store under test, driven together; every method compares."""

    def __init__(self, subject: BaseStore, backend: Backend, seed: int | str = "", strict: str = "") -> None:
        self.oracle = InMemoryStore(index=index_config() if backend.index else None)
        self.subject = subject
        self.backend = backend
        # Checked as the store documents them, not as InMemoryStore: its deviations, but the
        # one a focused case is about (``strict``).
        self.relaxed = set(backend.deviations) - {strict}
        self.seed = seed
        self.lives: dict[Key, Life] = {}
        self.ops = 0

    def where(self, what: str) -> str:
        return f"{self.backend.name} seed={self.seed} op#{self.ops}: {what}"

    # -- writes ------------------------------------------------------------------------------

    async def put(
        self,
        ns: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        index: Any = None,
        ttl: float | None = None,
    ) -> None:
        self.ops += 1
        await self.oracle.adelete(ns, key)
        o0 = now()
        await self.oracle.aput(ns, key, value, index=index)
        o1, s0 = now(), now()
        if ttl is not None and self.backend.ttl:
            await self.subject.aput(ns, key, value, index=index, ttl=ttl)
        else:
            await self.subject.aput(ns, key, value, index=index)
        window = ((o0, o1), (s0, now()))
        life = self.lives.get((ns, key))
        self.lives[(ns, key)] = Life(life.first if life else window, window, ttl == SHORT_TTL, value)

    async def delete(self, ns: tuple[str, ...], key: str) -> None:
        self.ops += 1
        await self.oracle.adelete(ns, key)
        await self.subject.adelete(ns, key)
        self.lives.pop((ns, key), None)

    async def batch(self, ops: list[Any]) -> None:
        """One abatch on both (puts here go to keys the batch creates: see the module doc)."""
        self.ops += 1
        live = {ns for ns, _ in self.lives}  # what a listing in the batch sees: the oracle's
        o0 = now()  # GetOps before it in the batch make empty namespaces (see the module doc)
        expected = await self.oracle.abatch(ops)
        o1, s0 = now(), now()
        got = await self.subject.abatch(ops)
        window = ((o0, o1), (s0, now()))
        assert len(got) == len(expected), self.where("batch")
        for op, g, e in zip(ops, got, expected, strict=True):
            if isinstance(op, GetOp):
                self.check_item(g, e, f"batch {op}")
            elif isinstance(op, SearchOp):
                self.check_same_items(g, e, f"batch {op}")
            elif isinstance(op, ListNamespacesOp):
                e = [ns for ns in e if ns in live]
                assert g == e, self.where(f"batch {op}: {g} != {e}")
        for op in ops:
            if isinstance(op, PutOp):
                if op.value is None:
                    self.lives.pop((op.namespace, op.key), None)
                else:
                    self.lives[(op.namespace, op.key)] = Life(window, window, False, dict(op.value))

    async def expire(self, keys: list[Key], timeout: float = 20.0) -> None:
        """Wait until the store under test lost every one of ``keys`` (short TTLs), then take
        them out of the oracle."""
        pending, deadline = set(keys), time.monotonic() + timeout
        while pending:
            if self.backend.sweep:
                await self.subject.sweep_ttl()  # type: ignore[attr-defined]
            for k in sorted(pending):
                if await self.subject.aget(*k, refresh_ttl=False) is None:
                    pending.discard(k)
            if pending:
                assert time.monotonic() < deadline, self.where(f"still there after {timeout}s: {pending}")
                await asyncio.sleep(0.05)
        for k in keys:
            await self.oracle.adelete(*k)
            self.lives.pop(k, None)

    # -- reads -------------------------------------------------------------------------------

    async def get(self, ns: tuple[str, ...], key: str, refresh: bool = True) -> None:
        self.ops += 1
        expected = await self.oracle.aget(ns, key)
        got = await self.subject.aget(ns, key, refresh_ttl=refresh)
        self.check_item(got, expected, f"get {ns} {key!r}")

    async def search(
        self,
        prefix: tuple[str, ...],
        *,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        query: str | None = None,
        refresh: bool = True,
    ) -> None:
        self.ops += 1
        what = f"search {prefix} filter={filter} limit={limit} offset={offset} query={query!r}"
        kw: dict[str, Any] = {"filter": filter, "query": query}
        expected = await self.oracle.asearch(prefix, limit=limit, offset=offset, **kw)
        everything = await self.oracle.asearch(prefix, limit=EVERYTHING, **kw)
        got = await self.subject.asearch(prefix, limit=limit, offset=offset, refresh_ttl=refresh, **kw)
        assert len(got) == len(expected), self.where(f"{what}: {len(got)} items, oracle {len(expected)}")
        if query and self.backend.index:
            self.check_ranked(got, expected, everything, what)
            return
        own = await self.subject.asearch(prefix, limit=EVERYTHING, refresh_ttl=False, **kw)
        self.check_same_items(own, everything, what + " (all)")
        ids = [(i.namespace, i.key) for i in own]
        page = [(i.namespace, i.key) for i in got]
        if offset == 0 and len(ids) <= limit:
            # One page holds the whole answer: the same items is all paging needs. (RediSearch
            # orders equal scores as it likes: redis-stack answered one search in two orders.)
            self.check_same_items(got, everything, what)
        else:
            assert page == ids[offset : offset + limit], self.where(
                f"{what}: the page is not a slice of the store's own full answer:\n page {page}\n all {ids}"
            )
        if self.backend.ordered:
            assert ids == sorted(ids), self.where(f"{what}: not in (namespace, key) order")

    async def list(
        self,
        prefix: tuple[str, ...] | None = None,
        suffix: tuple[str, ...] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> None:
        self.ops += 1
        for ns in [ns for ns, items in self.oracle._data.items() if not items]:
            del self.oracle._data[ns]  # the oracle's artefact: see the module doc
        kw = {"prefix": prefix, "suffix": suffix, "max_depth": max_depth, "limit": limit, "offset": offset}
        expected = await self.oracle.alist_namespaces(**kw)
        got = await self.subject.alist_namespaces(**kw)
        assert got == expected, self.where(f"list_namespaces {kw}:\n got {got}\n oracle {expected}")

    # -- comparisons -------------------------------------------------------------------------

    def check_item(self, got: Any, expected: Any, what: str) -> None:
        assert (got is None) == (expected is None), self.where(f"{what}: {got} vs oracle {expected}")
        if expected is None:
            return
        assert (got.namespace, got.key) == (expected.namespace, expected.key), self.where(what)
        assert got.value == expected.value, self.where(f"{what}: {got.value} != {expected.value}")
        life = self.lives[(expected.namespace, expected.key)]
        self._within(expected.updated_at, life.last[0], f"{what}: oracle updated_at")
        self._within(expected.created_at, life.last[0], f"{what}: oracle created_at")
        self._within(got.updated_at, life.last[1], f"{what}: updated_at")
        kept = "created_at" in self.relaxed
        self._within(got.created_at, (life.first if kept else life.last)[1], f"{what}: created_at")

    def _within(self, t: datetime, window: tuple[datetime, datetime], what: str) -> None:
        lo, hi = window[0] - timedelta(milliseconds=5), window[1] + timedelta(milliseconds=5)
        if "timestamps" in self.relaxed:  # naive UTC, whole seconds: as it stores them
            t, lo = t.replace(tzinfo=UTC), lo.replace(microsecond=0)
        assert t.tzinfo is not None, self.where(f"{what} {t} has no timezone")
        assert lo <= t <= hi, self.where(f"{what} {t} not within {window}")

    def check_same_items(self, got: list[Any], expected: list[Any], what: str) -> None:
        """The same items, in any order."""
        by_id = {(e.namespace, e.key): e for e in expected}
        ids = [(g.namespace, g.key) for g in got]
        assert len(set(ids)) == len(ids), self.where(f"{what}: an item twice")
        assert set(ids) == set(by_id), self.where(
            f"{what}: missing {set(by_id) - set(ids)}, extra {set(ids) - set(by_id)}"
        )
        for g in got:
            self.check_item(g, by_id[(g.namespace, g.key)], what)

    def check_ranked(self, got: list[Any], expected: list[Any], everything: list[Any], what: str) -> None:
        """Score by score (within TOL); each item with its own score; equal scores any order."""
        by_id = {(e.namespace, e.key): e for e in everything}
        ids = [(g.namespace, g.key) for g in got]
        assert len(set(ids)) == len(ids), self.where(f"{what}: an item twice")
        for position, (g, e) in enumerate(zip(got, expected, strict=True)):
            assert (g.score is None) == (e.score is None), self.where(f"{what}: #{position} {g} vs {e}")
            if e.score is not None:
                assert abs(g.score - e.score) <= TOL, self.where(
                    f"{what}: #{position} {g.score} vs {e.score}"
                )
            own = by_id.get((g.namespace, g.key))
            assert own is not None, self.where(f"{what}: {g.namespace} {g.key!r} is no answer")
            if own.score is None:
                assert g.score is None, self.where(f"{what}: {g} has no vector in the oracle")
            else:
                assert g.score is not None and abs(own.score - g.score) <= TOL, self.where(
                    f"{what}: {g} scored {g.score}, oracle {own.score}"
                )
            self.check_item(g, own, what)


# -- random sequences ------------------------------------------------------------------------

FEATURES = (
    "filter",  # search filters at all: equality on fields every item has
    "eq_ops",  # {"tag": {"$eq": "a"}}, {"tag": {"$ne": "a"}}
    "range_ops",  # $gt/$gte/$lt/$lte on one-digit numbers
    "range_multidigit",  # the same on negative, multi-digit and float numbers
    "nested_filter",  # {"nested": {"a": 1}}
    "missing",  # $ne and == None on a field some items lack
    "mixed_eq",  # {"mixed": 1} against 1, 1.0, True, "1" (Python equality)
    "list_filter",  # {"lst": [1, 2]}
    "weird_labels",  # labels and keys with {}%#:, spaces, capitals, non-ASCII
    "short_labels",  # one-letter labels
    "deep_gets",  # gets in namespaces of two labels and more
    "many_gets",  # gets among 110 namespaces that hold the same key
    "many_listed",  # listings of more namespaces than a page
    "wildcards",  # '*' in list_namespaces prefixes and suffixes
    "created_at",  # created_at is the last put's time, as InMemoryStore's
    "timestamps",  # timezone-aware, to the microsecond
    "batch",  # one abatch: reads see the state before its puts
    "ttl",  # long TTLs on puts, and a short-TTL episode
    "ttl_refresh",  # reads with and without refresh_ttl
    "list_namespaces",  # prefixes, suffixes, max_depth, limit and offset
    "query",  # semantic search (stores with an index)
    "scoreless_fill",  # a ranked page filled with items without vectors (offset not applied)
)

WORDS = "apple banana cherry delta echo fox golf hotel india juliet kilo lima mango".split()
ROOTS = ("alice", "bob", "carol")
LABELS = ("notes", "prefs", "n1", "n2", "xx", "yy")
SHORT = ("x", "y")
WEIRD = ("Zed", "dé", "{t}", "%x", "a#b", "sp ace", "ö:ü", "日本")
KEYS = tuple(f"k{i}" for i in range(8))
WEIRD_KEYS = ("K 1", "ключ", "{k}", "%", "a:b")


class RandomOps:
    """Seeded random operations for a :class:`Pair`, over the features it may use."""

    def __init__(self, pair: Pair, rng: random.Random, features: set[str]) -> None:
        self.pair, self.rng, self.f = pair, rng, features
        weird = "weird_labels" in features
        self.roots = ROOTS + (WEIRD[:3] if weird else ())
        self.labels = LABELS + (WEIRD if weird else ()) + (SHORT if "short_labels" in features else ())
        self.keys = KEYS + (WEIRD_KEYS if weird else ())
        self.namespaces: list[tuple[str, ...]] = [(r,) for r in self.roots]
        self.fresh = 0

    def value(self) -> dict[str, Any]:
        rng = self.rng
        text = " ".join(rng.sample(WORDS, rng.randint(1, 4)))
        v: dict[str, Any] = {
            "n": rng.randint(0, 9),
            "big": rng.randint(-50, 150),
            "f": round(rng.uniform(-10, 10), 2),
            "tag": rng.choice("abc"),
            "flag": rng.random() < 0.5,
            "nested": {"a": rng.randint(0, 3), "b": rng.choice("xy")},
            "mixed": rng.choice([1, 1.0, True, "1", 0, False]),
            "lst": [rng.randint(0, 2), rng.randint(0, 2)],
            "text": text,
            "title": "title " + rng.choice(WORDS),
            "tags": [f"tag-{w}" for w in rng.sample(WORDS, rng.randint(1, 3))],
        }
        if rng.random() < 0.6:
            v["opt"] = rng.choice("xy")
        return v

    def index(self) -> Any:
        return self.rng.choice([None, None, None, False, ["text"], ["tags[*]"], ["nested.b", "title"]])

    def namespace(self) -> tuple[str, ...]:
        rng = self.rng
        if rng.random() < 0.15:
            parent = rng.choice(self.namespaces)
            if len(parent) < 7:
                ns = (*parent, rng.choice(self.labels))
                if ns not in self.namespaces:
                    self.namespaces.append(ns)
                return ns
        return rng.choice(self.namespaces)

    def filter(self) -> dict[str, Any] | None:
        rng, f = self.rng, self.f
        if "filter" not in f:
            return None
        kinds = ["eq"] + (["ops_eq"] if "eq_ops" in f else [])
        kinds += ["range"] if "range_ops" in f else []
        kinds += ["range_big"] if "range_multidigit" in f else []
        kinds += [k for k in ("nested_filter", "missing", "mixed_eq", "list_filter") if k in f]
        out: dict[str, Any] = {}
        for _ in range(rng.choice([0, 1, 1, 2])):
            kind = rng.choice(kinds)
            if kind == "eq":
                field_, v = rng.choice([("tag", rng.choice("abc")), ("n", rng.randint(0, 9)), ("flag", True)])
                out[field_] = v
            elif kind == "ops_eq":
                out["tag"] = {rng.choice(["$eq", "$ne"]): rng.choice("abc")}
            elif kind in ("range", "range_big"):
                op = rng.choice(["$gt", "$gte", "$lt", "$lte"])
                if kind == "range":
                    out["n"] = {op: rng.randint(0, 9)} if rng.random() < 0.7 else {"$gte": 2, "$lt": 7}
                else:
                    bound = rng.choice([-7, 9, 10, 99, 100, 2.5, -0.5])
                    out[rng.choice(["big", "f"])] = (
                        {op: bound} if rng.random() < 0.7 else {"$gt": -3, "$lte": 60}
                    )
            elif kind == "nested_filter":
                out["nested"] = {"a": rng.randint(0, 3)} if rng.random() < 0.7 else {"b": rng.choice("xy")}
            elif kind == "missing":
                out["opt"] = rng.choice([{"$ne": "x"}, None, "y"])
            elif kind == "mixed_eq":
                out["mixed"] = rng.choice([1, True, 0, "1"])
            else:
                out["lst"] = [rng.randint(0, 2), rng.randint(0, 2)]
        return out or None

    def query(self) -> str | None:
        if "query" not in self.f or not self.pair.backend.index or self.rng.random() < 0.4:
            return None
        return " ".join(self.rng.sample(WORDS, self.rng.randint(1, 3)))

    def ttl(self) -> float | None:
        return LONG_TTL if "ttl" in self.f and self.rng.random() < 0.3 else None

    def refresh(self) -> bool:
        return "ttl_refresh" not in self.f or self.rng.random() < 0.5

    def pattern(self, labels: tuple[str, ...]) -> tuple[str, ...]:
        if "wildcards" not in self.f:
            return labels
        return tuple("*" if self.rng.random() < 0.25 else x for x in labels)

    async def bulk(self) -> None:
        """Past a page: 130 items in one namespace, 110 namespaces, a namespace 7 deep."""
        pair = self.pair
        for i in range(130):
            await pair.put(("alice", "bulk"), f"b{i:03d}", self.value(), ttl=self.ttl())
        shared = "many_gets" in self.f  # every one of them holds key "k"
        for i in range(110):
            await pair.put(
                ("bob", f"ns{i:03d}", self.rng.choice(LABELS)), "k" if shared else f"k{i}", self.value()
            )
        deep = ("carol", "d1", "d2", "d3", "d4", "d5", "d6")
        for depth in range(1, len(deep) + 1):
            await pair.put(deep[:depth], f"at{depth}", self.value())
        self.namespaces += [("alice", "bulk"), deep, ("bob", "ns007", "xx")]

    async def step(self) -> None:
        rng, pair = self.rng, self.pair
        r = rng.random()
        if r < 0.42:
            index = self.index()
            if "scoreless_fill" not in self.f and pair.backend.index:
                index = None if index is False else index  # every item gets a vector
            await pair.put(self.namespace(), rng.choice(self.keys), self.value(), index=index, ttl=self.ttl())
        elif r < 0.5:
            if pair.lives:
                ns, key = rng.choice(sorted(pair.lives))
                await pair.delete(ns, key)
        elif r < 0.62:
            if pair.lives and rng.random() < 0.7:
                ns, key = rng.choice(sorted(pair.lives))
            else:
                ns, key = self.namespace(), rng.choice(self.keys)
            if len(ns) == 1 or "deep_gets" in self.f:
                await pair.get(ns, key, refresh=self.refresh())
        elif r < 0.85:
            await self.search()
        elif r < 0.97:
            if {"list_namespaces", "many_listed"} <= self.f:  # (each listing here holds more than a page)
                await self.list()
        elif "batch" in self.f:
            await self.batch()

    async def search(self) -> None:
        rng = self.rng
        ns = self.namespace()
        prefix = () if rng.random() < 0.15 else ns[: rng.randint(1, len(ns))]
        flt, query = self.filter(), self.query()
        total = len(await self.pair.oracle.asearch(prefix, filter=flt, limit=EVERYTHING))
        limit = rng.choice([0, 1, 3, 10, 10, 50, 150])
        offset = rng.choice([0, 0, 0, 1, 5, max(0, total - 2), total, total + 1])
        await self.pair.search(
            prefix, filter=flt, limit=limit, offset=offset, query=query, refresh=self.refresh()
        )

    async def list(self) -> None:
        rng = self.rng
        ns = self.namespace()
        prefix = self.pattern(ns[: rng.randint(1, len(ns))]) if rng.random() < 0.6 else None
        suffix = self.pattern(ns[-rng.randint(1, len(ns)) :]) if rng.random() < 0.3 else None
        depth = rng.choice([None, None, 1, 2, 3, 5])
        kw = {"prefix": prefix, "suffix": suffix, "max_depth": depth}
        await self.pair.list(**kw)  # everything first: the default limit is 100
        total = len(await self.pair.oracle.alist_namespaces(**kw, limit=EVERYTHING))
        limit = rng.choice([1, 5, 10, 100, 200])
        offset = rng.choice([0, 3, max(0, total - 3), total, total + 2])
        await self.pair.list(**kw, limit=limit, offset=offset)

    async def batch(self) -> None:
        rng = self.rng
        self.fresh += 1
        ns = self.namespace() if "deep_gets" in self.f else (rng.choice(self.roots),)
        new = (ns, f"batch{self.fresh}")
        ops: list[Any] = [GetOp(*new), PutOp(ns, new[1], self.value()), GetOp(*new)]
        ops += [PutOp(ns, new[1], self.value()), SearchOp(ns[:1], limit=EVERYTHING)]
        olds = [k for k in sorted(self.pair.lives) if len(k[0]) == 1 or "deep_gets" in self.f]
        if olds and rng.random() < 0.5:
            old = rng.choice(olds)
            ops += [GetOp(*old), PutOp(*old, None)]
            ops += [ListNamespacesOp(limit=EVERYTHING)] if "many_listed" in self.f else []
        await self.pair.batch(ops)

    async def ttl_episode(self) -> None:
        """Items with a TTL of a second, some over live ones: they are there, then gone from
        gets, searches and listings (the indexes hold their members until a read drops them)."""
        pair, rng = self.pair, self.rng
        keys: list[Key] = []
        for i in range(8):
            ns = self.namespace() if i % 2 else (rng.choice(self.roots), "ttl-only")
            if "deep_gets" not in self.f:  # expire() watches them by get
                ns = ns[:1]
            key = rng.choice(self.keys) if i < 3 else f"short{i}"
            if (ns, key) not in keys:
                await pair.put(ns, key, self.value(), ttl=SHORT_TTL)
                keys.append((ns, key))
        for ns, key in keys[:3]:
            await pair.get(ns, key, refresh=False)
        await pair.expire(keys)
        await pair.search((), limit=EVERYTHING, refresh=False)
        if "many_listed" in self.f:
            await pair.list(limit=EVERYTHING)
        for ns, key in keys[:3]:
            await pair.get(ns, key, refresh=False)

    async def final(self) -> None:
        await self.pair.search((), limit=EVERYTHING, refresh=False)
        if "many_listed" in self.f:
            await self.pair.list(limit=EVERYTHING)
        for root in self.roots:
            await self.pair.search((root,), limit=EVERYTHING, refresh=False)


async def run_sequence(pair: Pair, seed: int, features: set[str], steps: int) -> None:
    rng = random.Random(seed)
    ops = RandomOps(pair, rng, features)
    await ops.bulk()
    for i in range(steps):
        await ops.step()
        if i == steps // 2 and "ttl" in features and pair.backend.ttl:
            await ops.ttl_episode()
    await ops.final()


def describe(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
