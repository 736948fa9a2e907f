"""Long-term memory benchmark (``make bench-store``): puts, gets, searches and namespace
listings per second and stored bytes per item, on each backend's store, side by side with
LangGraph's own stores in one run.

Rows, each store alone in turn on servers this script starts (the machine's load drifts: read
the ratios, taken within one run):

* ``InMemoryStore`` — LangGraph's, the floor (no durability);
* ``tenant(InMemoryStore)`` — the same through threadline's per-principal view (scoping and
  the item quota), what every API request and graph run goes through;
* ``AsyncSqliteStore``, ``AsyncPostgresStore`` — LangGraph's, which threadline serves as they are;
* ``threadline RedisStore`` on Redis 7.0 (exact search) and on Redis 8.2 (vector sets);
* ``langgraph-checkpoint-redis RedisStore`` on Redis 8.2 with RediSearch — the seeds' library
  (its ``get`` finds nothing with redisvl 0.28: its gets/s are for ``None`` answers).

Semantic search (``--semantic``, a 16-dimension hash embedding) runs on the stores that have it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from threadline.config import QuotaSettings
from threadline.quotas import LocalQuotas
from threadline.store.redis import RedisStore
from threadline.store.tenant import Tenancy

from servers import PostgresServer, RedisServer, redis_stack_binaries

DIMS = 16
NAMESPACES = 20


def embed(texts: list[str]) -> list[list[float]]:
    out = []
    for text in texts:
        v = [0.0] * DIMS
        for word in text.split():
            v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIMS] += 1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        out.append([x / norm for x in v])
    return out


INDEX = {"dims": DIMS, "embed": embed, "fields": ["text"]}
WORDS = "tea coffee code review run walk book film music city river cloud".split()


def value_of(i: int) -> dict[str, Any]:
    words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7, 11))
    return {"text": f"note {i}: {words}", "n": i % 10, "tags": ["a", "b"], "pad": "x" * 120}


async def timed(n: int, op: Callable[[int], Awaitable[Any]]) -> float:
    """Operations per second of ``n`` calls of ``op`` one after the other (concurrency 1)."""
    start = time.perf_counter()
    for i in range(n):
        await op(i)
    return n / (time.perf_counter() - start)


async def measure(
    store: BaseStore, n: int, semantic: bool, size: Callable[[], Awaitable[int]]
) -> dict[str, float]:
    before = await size()
    ns = [("bench", f"user{j}") for j in range(NAMESPACES)]
    row = {"put/s": await timed(n, lambda i: store.aput(ns[i % NAMESPACES], f"k{i}", value_of(i)))}
    row["bytes/item"] = (await size() - before) / n
    row["get/s"] = await timed(n, lambda i: store.aget(ns[i % NAMESPACES], f"k{i}"))
    searches = max(n // 10, 20)
    row["search/s"] = await timed(
        searches, lambda i: store.asearch(ns[i % NAMESPACES], filter={"n": i % 10}, limit=10)
    )
    row["list/s"] = await timed(searches, lambda i: store.alist_namespaces(prefix=("bench",), limit=100))
    if semantic:
        row["semantic/s"] = await timed(
            searches, lambda i: store.asearch(ns[i % NAMESPACES], query=f"{WORDS[i % 12]} review", limit=10)
        )
    return row


def redis_size(url: str) -> Callable[[], Awaitable[int]]:
    async def size() -> int:
        client = aioredis.Redis.from_url(url)
        try:
            return int((await client.info("memory"))["used_memory"])
        finally:
            await client.aclose()

    return size


async def nothing() -> int:
    return 0


@asynccontextmanager
async def stores(
    semantic: bool, workdir: Path
) -> AsyncIterator[list[tuple[str, Callable[[], Any], Callable[[], Awaitable[int]]]]]:
    """(name, async context manager of the store, its stored size in bytes) of every row."""
    index = INDEX if semantic else None
    redis7 = RedisServer().start()
    binary, modules = redis_stack_binaries()
    redis8 = RedisServer(binary=binary).start()
    stack = RedisServer(binary=binary, modules=modules).start()
    postgres = PostgresServer().start()
    try:

        @asynccontextmanager
        async def memory():
            yield InMemoryStore(index=index)

        @asynccontextmanager
        async def tenant():
            quotas = LocalQuotas(QuotaSettings(store_items_per_principal=0))
            yield Tenancy(InMemoryStore(index=index), quotas, 64 * 1024, scoped=True).of("bench")

        @asynccontextmanager
        async def sqlite():
            from langgraph.store.sqlite.aio import AsyncSqliteStore

            async with AsyncSqliteStore.from_conn_string(str(workdir / "store.sqlite")) as store:
                await store.setup()
                yield store

        @asynccontextmanager
        async def pg():
            from langgraph.store.postgres import AsyncPostgresStore

            async with AsyncPostgresStore.from_conn_string(postgres.create_database("bench_store")) as store:
                await store.setup()
                yield store

        def ours(server: RedisServer):
            @asynccontextmanager
            async def open_():
                client = aioredis.Redis.from_url(server.url(1))
                store = RedisStore(client, index=index)
                await store.setup()
                try:
                    yield store
                finally:
                    await client.aclose()

            return open_

        @asynccontextmanager
        async def library():
            from langgraph.store.redis import RedisStore as LibraryStore

            with LibraryStore.from_conn_string(stack.url(0), index=index) as store:
                await asyncio.to_thread(store.setup)
                yield store

        async def sqlite_size() -> int:
            return await asyncio.to_thread(
                lambda: sum(f.stat().st_size for f in workdir.glob("store.sqlite*"))
            )

        async def pg_size() -> int:
            import psycopg

            url = postgres.url("bench_store")
            async with await psycopg.AsyncConnection.connect(url) as conn:
                cur = await conn.execute(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN "
                    "pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'"
                )
                return int((await cur.fetchone())[0])

        rows = [
            ("InMemoryStore (floor)", memory, nothing),
            ("tenant(InMemoryStore)", tenant, nothing),
            ("AsyncSqliteStore", sqlite, sqlite_size),
            ("AsyncPostgresStore", pg, pg_size),
            ("threadline RedisStore, Redis 7.0", ours(redis7), redis_size(redis7.url(1))),
            ("threadline RedisStore, Redis 8.2", ours(redis8), redis_size(redis8.url(1))),
            ("checkpoint-redis RedisStore, 8.2+modules", library, redis_size(stack.url(0))),
        ]
        if semantic:  # sqlite-vec needs extension loading, pgvector is not installed here
            rows = [r for r in rows if r[0] not in ("AsyncSqliteStore", "AsyncPostgresStore")]
        yield rows
    finally:
        for server in (redis7, redis8, stack):
            server.close()
        postgres.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000, help="items put (and got) per store")
    parser.add_argument("--semantic", action="store_true", help="with an index: semantic search too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        async with stores(args.semantic, Path(tmp)) as rows:
            results: list[tuple[str, dict[str, float]]] = []
            for name, open_store, size in rows:
                async with open_store() as store:
                    results.append((name, await measure(store, args.items, args.semantic, size)))
                    print(f"  measured {name}", file=sys.stderr, flush=True)
    columns = list(results[0][1])
    print(
        f"\n{args.items} items of ~230 bytes in {NAMESPACES} namespaces, concurrency 1,"
        " operations per second:\n"
    )
    print("| store | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name, row in results:
        cells = [f"{row[c]:,.0f}" if row.get(c) else "—" for c in columns]
        print(f"| {name} | " + " | ".join(cells) + " |")
    by_name = dict(results)
    print()
    for mine, theirs in (
        ("tenant(InMemoryStore)", "InMemoryStore (floor)"),
        ("threadline RedisStore, Redis 8.2", "checkpoint-redis RedisStore, 8.2+modules"),
        ("threadline RedisStore, Redis 7.0", "checkpoint-redis RedisStore, 8.2+modules"),
    ):
        ratios = ", ".join(
            f"{c} {by_name[mine][c] / by_name[theirs][c]:.2f}×" for c in columns if by_name[theirs].get(c)
        )
        print(f"{mine} ÷ {theirs}: {ratios}")


if __name__ == "__main__":
    asyncio.run(main())
