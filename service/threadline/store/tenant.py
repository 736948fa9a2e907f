"""A principal's view of the store: what the ``/store`` routes and a run's graph are given.

* **Isolation.** Without custom auth, a principal's items live under a first namespace label
  of its own (:func:`principal_label`): the SDK sends ``["memories", "u1"]``, the store holds
  ``[<label>, "memories", "u1"]``, and every result has the label taken off again, so no
  principal reads, lists or searches another's items, and a graph sees the same namespaces
  its run's owner does through the API. With custom auth, the ``@auth.on.store`` handlers
  decide, as on langgraph-api: namespaces are stored as the handlers leave them.
* **Quotas.** Every item written counts toward ``QUOTA_STORE_ITEMS_PER_PRINCIPAL`` (the run's
  owner, for a graph) until deleted or expired, and its value is at most
  ``QUOTA_STORE_ITEM_BYTES`` of JSON, so a principal holds at most their product.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterable

import orjson
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from threadline.quotas import STORE_ITEM_BYTES, Quotas


class ItemTooLarge(Exception):
    """A value past ``QUOTA_STORE_ITEM_BYTES``; nothing was stored."""

    def __init__(self, limit: int) -> None:
        super().__init__(STORE_ITEM_BYTES)
        self.limit = limit
        self.message = f"value: larger than {STORE_ITEM_BYTES}={limit} bytes of JSON"


# The longest TTL an item may have (about 19 years): a longer one overflows Redis's expiry.
MAX_TTL_MINUTES = 10_000_000

# Namespaces read per round trip by a listing with a suffix condition.
NAMESPACE_PAGE = 100


def principal_label(principal: str) -> str:
    """The first namespace label of ``principal``'s items: a digest (fixed length, no
    periods, and no principal name in Redis keys)."""
    return "p" + hashlib.sha256(principal.encode()).hexdigest()[:24]


def _suffixes(op: ListNamespacesOp) -> list[MatchCondition]:
    return [c for c in op.match_conditions or () if c.match_type == "suffix"]


def _ends_with(namespace: tuple[str, ...], suffix: tuple[str, ...]) -> bool:
    """InMemoryStore's suffix rule: the last labels are ``suffix``'s, ``*`` matching any."""
    if len(suffix) > len(namespace):
        return False
    tail = namespace[len(namespace) - len(suffix) :]
    return all(s in ("*", n) for s, n in zip(suffix, tail, strict=True))


def item_digest(namespace: tuple[str, ...], key: str) -> str:
    """A stored item's name in the quota's count."""
    return hashlib.sha256(orjson.dumps([*namespace, key])).hexdigest()[:32]


class Tenancy:
    """Hands out each principal's :class:`TenantStore` over one store.

    Args:
        store: the process's store (:func:`threadline.store.open_store`).
        quotas: the per-principal quotas.
        item_bytes: ``QUOTA_STORE_ITEM_BYTES`` (0: no limit).
        scoped: put each principal's items under its own label (no custom auth).
        max_scan: ``MAX_STORE_SCAN``, the namespaces a listing with a suffix walks at most.
    """

    def __init__(
        self, store: BaseStore, quotas: Quotas | None, item_bytes: int, scoped: bool, max_scan: int = 10_000
    ) -> None:
        self.store, self.quotas, self.item_bytes, self.scoped = store, quotas, item_bytes, scoped
        self.max_scan = max_scan

    def of(self, principal: str) -> TenantStore:
        return TenantStore(self, principal)


class TenantStore(BaseStore):
    """``principal``'s store: scoped, counted and bounded as the module says."""

    def __init__(self, tenancy: Tenancy, principal: str) -> None:
        self._tenancy = tenancy
        self._base = tenancy.store
        self.principal = principal
        self._prefix: tuple[str, ...] = (principal_label(principal),) if tenancy.scoped else ()
        # What the base store does with TTLs: the quota counts an item as long as it lives.
        self.supports_ttl = self._base.supports_ttl
        self.ttl_config = self._base.ttl_config
        try:  # made by a route or a run, on the loop that a sync node's batch goes back to
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        walked = [self._prefix and isinstance(op, ListNamespacesOp) and _suffixes(op) for op in ops]
        inner = [self._inner(op) for op, walk in zip(ops, walked, strict=True) if not walk]
        puts = [op for op in inner if isinstance(op, PutOp)]
        for op in puts:
            if op.value is not None:
                await self._count(op)
        direct = iter(await self._base.abatch(inner))
        quotas = self._tenancy.quotas
        if quotas is not None:
            for op in puts:
                if op.value is None:
                    await quotas.release_store_item(self.principal, item_digest(op.namespace, op.key))
        return [
            await self._walk_namespaces(op) if walk else self._outer(next(direct))  # type: ignore[arg-type]
            for op, walk in zip(ops, walked, strict=True)
        ]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """For a sync node, which LangGraph runs in a worker thread while the run's event loop
        goes on: the batch runs on that loop."""
        if self._loop is None:
            raise RuntimeError("this store's sync API is for the nodes of a graph threadline runs")
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), self._loop).result()

    async def _count(self, op: PutOp) -> None:
        """Raises ItemTooLarge past QUOTA_STORE_ITEM_BYTES, QuotaExceeded past
        QUOTA_STORE_ITEMS_PER_PRINCIPAL: nothing is stored then."""
        limit = self._tenancy.item_bytes
        if limit and len(orjson.dumps(op.value)) > limit:
            raise ItemTooLarge(limit)
        if op.ttl is not None and not 0 < op.ttl <= MAX_TTL_MINUTES:
            raise ValueError(f"ttl: more than 0 and at most {MAX_TTL_MINUTES} minutes")
        quotas = self._tenancy.quotas
        if quotas is None:
            return
        minutes = op.ttl if op.ttl is not None else (self.ttl_config or {}).get("default_ttl")
        expires = time.time() + minutes * 60 if minutes and self.supports_ttl else None
        await quotas.reserve_store_item(self.principal, item_digest(op.namespace, op.key), expires)

    async def _walk_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        """A listing with a suffix condition, matched on the principal's own labels (in the
        store, a suffix wildcard could stand for the principal's label): the principal's
        namespaces a page at a time, at most ``max_scan`` of them, in the store's order."""
        prefixes = [c for c in op.match_conditions or () if c.match_type == "prefix"]
        base_op = ListNamespacesOp(tuple(self._inner_prefixes(prefixes)), None, NAMESPACE_PAGE, 0)
        found: list[tuple[str, ...]] = []
        seen: set[tuple[str, ...]] = set()
        start = 0
        while len(found) < op.offset + op.limit and start < self._tenancy.max_scan:
            (page,) = await self._base.abatch([base_op._replace(offset=start)])
            for namespace in page:
                own = tuple(namespace[len(self._prefix) :])
                if all(_ends_with(own, c.path) for c in _suffixes(op)):
                    shown = own[: op.max_depth] if op.max_depth is not None else own
                    if shown not in seen:
                        seen.add(shown)
                        found.append(shown)
            if len(page) < NAMESPACE_PAGE:
                break
            start += NAMESPACE_PAGE
        return found[op.offset : op.offset + op.limit]

    def _inner_prefixes(self, prefixes: list[MatchCondition]) -> list[MatchCondition]:
        p = self._prefix
        return [MatchCondition("prefix", (*p, *c.path)) for c in prefixes] or [MatchCondition("prefix", p)]

    def _inner(self, op: Op) -> Op:
        p = self._prefix
        if not p:
            return op
        if isinstance(op, GetOp):
            return GetOp((*p, *op.namespace), op.key, op.refresh_ttl)
        if isinstance(op, PutOp):
            return PutOp((*p, *op.namespace), op.key, op.value, op.index, op.ttl)
        if isinstance(op, SearchOp):
            return SearchOp(
                (*p, *op.namespace_prefix), op.filter, op.limit, op.offset, op.query, op.refresh_ttl
            )
        if isinstance(op, ListNamespacesOp):
            # No suffix condition here: a listing with one is walked (_walk_namespaces).
            prefixes = [c for c in op.match_conditions or () if c.match_type == "prefix"]
            depth = None if op.max_depth is None else op.max_depth + len(p)
            return ListNamespacesOp(tuple(self._inner_prefixes(prefixes)), depth, op.limit, op.offset)
        raise TypeError(f"unknown store operation {type(op).__name__}")

    def _outer(self, result: Result) -> Result:
        n = len(self._prefix)
        if not n:
            return result
        if isinstance(result, SearchItem):
            return SearchItem(
                result.namespace[n:],
                result.key,
                result.value,
                result.created_at,
                result.updated_at,
                result.score,
            )
        if isinstance(result, Item):
            return Item(
                value=result.value,
                key=result.key,
                namespace=result.namespace[n:],
                created_at=result.created_at,
                updated_at=result.updated_at,
            )
        if isinstance(result, list):
            return [self._outer(r) if isinstance(r, Item) else tuple(r[n:]) for r in result]
        return result

    def __repr__(self) -> str:  # no principal name in a log line
        return f"TenantStore({type(self._base).__name__}, scoped={bool(self._prefix)})"
