"""``RedisStore``: LangGraph's long-term memory store (``BaseStore``) on plain Redis structures.

No RedisJSON or RediSearch: it works in any db of Redis ≥ 6.2 and Valkey, and on Redis Cluster.
Results are InMemoryStore's (the contract suite, ``tests/integration/test_store_contract.py``,
holds it to that), with the orders, bounds and deviations ADR 0015 documents.

=====================  ======================================================================
module                 holds
=====================  ======================================================================
``redis``              :class:`RedisStore`: set-up, ``abatch`` (gets and puts), script calls
``redis_search``       search (filters, semantic ranking) and list_namespaces, in bounded pages
``redis_scripts``      the Lua scripts, each with its KEYS/ARGV/reply documented
``redis_format``       keys, index members, item records, vectors, the filter; no I/O
=====================  ======================================================================

Items expire by Redis key expiry (no sweeper); indexes drop members of expired items when a
read passes them. Each call's work is bounded by ``max_scan`` (index members and roots looked
at) and memory by ``page_size`` members a round trip.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)
from redis.exceptions import NoScriptError

from threadline.redis_client import is_cluster
from threadline.store import redis_format as fmt
from threadline.store import redis_search
from threadline.store.redis_format import Command
from threadline.store.redis_scripts import SCRIPTS

logger = logging.getLogger(__name__)

DEFAULT_MAX_SCAN = 1000
DEFAULT_PAGE_SIZE = 100
DEFAULT_PREFIX = "tl:store"


class RedisStore(BaseStore):
    """LangGraph ``BaseStore`` on plain Redis (ADR 0015).

    Args:
        client: an async redis-py client (``Redis`` or ``RedisCluster``) with
            ``decode_responses=False``; the caller owns it.
        index: semantic search (``dims``, ``embed``, ``fields``), as InMemoryStore's.
        ttl: ``default_ttl`` (minutes) and ``refresh_on_read``; Redis expires items itself.
        max_scan: at most this many index members (and roots, for an empty prefix) one search
            or list_namespaces looks at; past it the result is what was found so far.
        page_size: index members read per round trip.
        prefix: of every key.
        vector_sets: use Redis 8 vector sets for ``query`` (None: when the server has them).

    Call :meth:`setup` once before use (it loads the scripts and probes the server).
    """

    supports_ttl = True

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        max_scan: int = DEFAULT_MAX_SCAN,
        page_size: int = DEFAULT_PAGE_SIZE,
        prefix: str = DEFAULT_PREFIX,
        vector_sets: bool | None = None,
    ) -> None:
        if max_scan < 1 or page_size < 1:
            raise ValueError("max_scan and page_size must be at least 1")
        self.client = client
        self.keys = fmt.Keys(prefix)
        self.max_scan = max_scan
        self.page_size = page_size
        self.ttl_config = ttl
        self.index_config: dict[str, Any] | None = None
        self.embeddings = None
        self.dims = 0
        if index:
            self.index_config = dict(index)
            self.embeddings = ensure_embeddings(index.get("embed"))
            self.dims = int(index["dims"])
            self.index_config["__tokenized_fields"] = [
                (p, tokenize_path(p)) if p != "$" else (p, p) for p in (index.get("fields") or ["$"])
            ]
        self._want_vector_sets = vector_sets
        self.mode = ""  # 'v' vector sets, 'e' exact, '' no index: set by setup()
        self.cluster = is_cluster(client)
        self._shas: dict[str, str] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- set-up ------------------------------------------------------------------------------

    async def setup(self) -> None:
        """Load the scripts, probe for vector sets and pin the vector mode of this prefix."""
        if self.client.get_encoder().decode_responses:
            raise ValueError("RedisStore needs a client with decode_responses=False")
        self._loop = asyncio.get_running_loop()
        await self._load_scripts()
        if self.index_config is None:
            return
        has = bool(await self.script("probe", [self.keys.probe], []))
        if self._want_vector_sets and not has:
            raise RuntimeError("vector_sets=True, but this server has no vector sets (Redis 8)")
        mode = "v" if has and self._want_vector_sets is not False else "e"
        # The first store with an index on this prefix decides how vectors are kept; a later
        # one follows it (an upgraded server keeps reading the vectors its data has).
        await self.client.hsetnx(self.keys.meta, "vectors", mode)
        await self.client.hsetnx(self.keys.meta, "dims", self.dims)
        stored, dims = await self.client.hmget(self.keys.meta, ["vectors", "dims"])
        if int(dims) != self.dims:
            raise ValueError(f"the store under {self.keys.prefix!r} has {int(dims)} dims, not {self.dims}")
        stored_mode = stored.decode()
        if stored_mode != mode and (self._want_vector_sets is not None or (stored_mode == "v" and not has)):
            raise RuntimeError(f"the store under {self.keys.prefix!r} keeps vectors as {stored_mode!r}")
        self.mode = stored_mode

    async def _load_scripts(self) -> None:
        for name, source in SCRIPTS.items():
            self._shas[name] = await self.client.script_load(source)

    # -- script calls ------------------------------------------------------------------------

    def call(self, name: str, keys: Sequence[bytes], args: Sequence[Any]) -> Command:
        """The EVALSHA of script ``name``, for :meth:`run`."""
        return ("EVALSHA", self._shas[name], len(keys), *keys, *args)

    async def script(self, name: str, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        return (await self.run([self.call(name, keys, args)]))[0]

    async def run(self, commands: Sequence[Command]) -> list[Any]:
        """Commands in one round trip (one pipeline, no MULTI; a Cluster pipeline splits by
        node, so callers that need an order across slots make two calls). Scripts Redis lost
        (a restart, SCRIPT FLUSH) are loaded again, once, and the commands repeated — every
        script is safe to repeat."""
        if not self._shas:
            raise RuntimeError("call RedisStore.setup() first")
        for attempt in (1, 2):
            if len(commands) == 1:
                try:
                    return [await self.client.execute_command(*commands[0])]
                except NoScriptError:
                    if attempt == 2:
                        raise
                    await self._load_scripts()
                    continue
            pipe = self.client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            replies = await pipe.execute(raise_on_error=False)
            if attempt == 1 and any(isinstance(r, NoScriptError) for r in replies):
                await self._load_scripts()
                continue
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            return replies
        raise AssertionError("unreachable")

    async def touch_roots(self, keep: dict[str, int]) -> None:
        """Add roots to the root set, keeping it as long as their indexes (ms; 0: no TTL)."""
        if keep:
            await self.script("root_touch", [self.keys.roots, self.keys.gen], self._touch_args(keep))

    # -- the store ---------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs :meth:`abatch` on the store's event loop (from another thread, as LangGraph's
        async-only stores do); from that loop itself it raises, as they do."""
        if self._loop is None:
            raise RuntimeError("call RedisStore.setup() first")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise asyncio.InvalidStateError(
                "Synchronous calls to RedisStore detected in its event loop: use the async "
                "methods (await store.aget(...), store.aput(...), ...)"
            )
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), self._loop).result()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """As InMemoryStore: every read of a batch sees the store as it was before the batch's
        puts, and of several puts of one item the last wins."""
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        gets: list[tuple[int, GetOp]] = []
        reads = []
        for i, op in enumerate(ops):
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                if not op.namespace:
                    raise InvalidNamespaceError("Namespace cannot be empty.")
                puts[(op.namespace, op.key)] = op
            elif isinstance(op, GetOp):
                gets.append((i, op))
            elif isinstance(op, SearchOp):
                reads.append((i, redis_search.search(self, op)))
            elif isinstance(op, ListNamespacesOp):
                reads.append((i, redis_search.list_namespaces(self, op)))
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        done = await asyncio.gather(self._gets(gets, results), *(coro for _, coro in reads))
        for (i, _), result in zip(reads, done[1:], strict=True):
            results[i] = result
        if puts:
            await self._puts(list(puts.values()))
        return results

    async def _gets(self, gets: list[tuple[int, GetOp]], results: list[Result]) -> None:
        groups: dict[tuple[str, bool], list[tuple[int, GetOp]]] = defaultdict(list)
        for i, op in gets:
            if op.namespace:
                groups[(op.namespace[0], bool(op.refresh_ttl))].append((i, op))

        async def one(root: str, refresh: bool, group: list[tuple[int, GetOp]]) -> None:
            members = [fmt.member(op.namespace, op.key) for _, op in group]
            found = await self.read(root, members, "f", refresh=refresh)
            for (i, op), fields in zip(group, found, strict=True):
                if fields[0] is not None:
                    results[i] = fmt.decode_item(op.namespace, op.key, fields)

        await asyncio.gather(*(one(root, refresh, group) for (root, refresh), group in groups.items()))

    async def read(
        self, root: str, members: Sequence[bytes], what: str, refresh: bool = False
    ) -> list[list[Any]]:
        """The fields (``what``: see the READ script) of items of one root; a missing item's
        fields are ``None`` (and its member leaves the index)."""
        if not members:
            return []
        keys = [self.keys.index(root), self.keys.vectors(root), *(self.keys.item(root, m) for m in members)]
        reply = await self.script("read", keys, [self.mode, what, "1" if refresh else "0", *members])
        if int(reply[0]) > 0:
            await self.touch_roots({root: int(reply[0])})
        width = {"f": 5, "e": 6, "k": 1, "r": 0}[what]
        return [reply[1 + j * width : 1 + (j + 1) * width] for j in range(len(members))] if width else []

    async def _puts(self, ops: list[PutOp]) -> None:
        vectors = await self._embed(ops)
        writes: list[Command] = []
        keep: dict[str, int] = {}
        for op in ops:
            root, m = op.namespace[0], fmt.member(op.namespace, op.key)
            keys = [self.keys.item(root, m), self.keys.index(root), self.keys.vectors(root)]
            if op.value is None:
                writes.append(self.call("delete", keys, [m, self.mode]))
                continue
            ttl = fmt.ttl_ms(op.ttl)
            keep[root] = 0 if ttl == 0 or keep.get(root) == 0 else max(keep.get(root, 0), 2 * ttl)
            blobs = fmt.pack_vectors(vectors.get((op.namespace, op.key), []), self.dims)
            args = [m, fmt.encode_value(op.value), ttl, len(blobs), self.mode]
            if self.mode == "v":
                args += [b"", fmt.vector_attributes(op.namespace), *blobs]
            else:
                args += [b"".join(blobs), b""]
            writes.append(self.call("put", keys, args))
        touch = [self.call("root_touch", [self.keys.roots, self.keys.gen], self._touch_args(keep))]
        # The root set is touched after the items are in (ROOT_DROP's guard relies on it).
        if self.cluster or not keep:
            await self.run(writes)
            if keep:
                await self.run(touch)
        else:
            await self.run(writes + touch)

    @staticmethod
    def _touch_args(keep: dict[str, int]) -> list[Any]:
        return [a for root, ms in sorted(keep.items()) for a in (root, ms)]

    async def _embed(self, ops: list[PutOp]) -> dict[tuple[tuple[str, ...], str], list[list[float]]]:
        """The vectors of each put, from the texts InMemoryStore embeds (each text once)."""
        if self.embeddings is None or self.index_config is None:
            return {}
        texts: dict[str, list[tuple[tuple[str, ...], str]]] = defaultdict(list)
        for op in ops:
            if op.value is None or op.index is False:
                continue
            if op.index is None:
                paths = self.index_config["__tokenized_fields"]
            else:
                paths = [(p, tokenize_path(p)) for p in op.index]
            for _, field in paths:
                for text in get_text_at_path(op.value, field):
                    texts[text].append((op.namespace, op.key))
        if not texts:
            return {}
        embedded = await self.embeddings.aembed_documents(list(texts))
        out: dict[tuple[tuple[str, ...], str], list[list[float]]] = defaultdict(list)
        for (_, owners), vector in zip(texts.items(), embedded, strict=True):
            for owner in owners:
                out[owner].append(vector)
        return out
