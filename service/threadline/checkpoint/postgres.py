"""The ``postgres`` backend: ``AsyncPostgresSaver`` over a connection pool, migrated once.

``AsyncPostgresSaver.setup()`` runs its migrations with no lock of its own, so replicas that
start together would race on ``checkpoint_migrations`` (duplicate-key errors, or two
``CREATE INDEX CONCURRENTLY`` on one table). We run ``setup()`` while holding a session-level
Postgres advisory lock taken on a dedicated connection.

The lock is taken by polling ``pg_try_advisory_lock``, not by a blocking ``pg_advisory_lock``:
a replica blocked inside ``SELECT pg_advisory_lock(...)`` holds a snapshot for as long as it
waits, and ``CREATE INDEX CONCURRENTLY`` in the lock holder waits for every older snapshot to
go away. Holder and waiter then wait for each other through the holder's *client* (the lock
and the index build are on different connections), a cycle Postgres cannot see: measured with
4 replicas on a fresh database, the blocking variant hung forever (CREATE INDEX waiting on
``virtualxid``, three sessions on ``advisory``). A failed ``pg_try_advisory_lock`` returns at
once and holds nothing; the same test passes in ~0.3 s. ``CREATE INDEX
CONCURRENTLY`` itself cannot run inside a transaction: the pool's connections are autocommit,
and a session advisory lock needs no transaction.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import psycopg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from threadline.config import CheckpointSettings
from threadline.errors import StoreUnavailable

# The server away or the pool exhausted: the store is failing, not the request.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (psycopg.OperationalError, PoolTimeout)

log = logging.getLogger(__name__)

# Seconds to wait for the first connection at start-up before reporting StoreUnavailable.
CONNECT_TIMEOUT = 10.0
# Seconds between two pg_try_advisory_lock attempts while another replica migrates.
LOCK_POLL_INTERVAL = 0.1
# The advisory lock key: a fixed 64-bit number derived from a name, the same in every replica.
MIGRATION_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"threadline:checkpoint-migrations").digest()[:8], "big", signed=True
)
# The saver serializes all its work behind one asyncio.Lock per instance, so it never uses
# more than one connection at a time; a second one is a spare for when the first is broken.
POOL_MIN_SIZE, POOL_MAX_SIZE = 1, 2


def describe(conninfo: str) -> str:
    """``host:port/dbname`` of a DSN or URL, without user or password (for errors and logs)."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<unparsable postgres dsn>"
    host, port = params.get("host", "localhost"), params.get("port", 5432)
    return f"{host}:{port}/{params.get('dbname', '')}"


class RollbackPostgresSaver(AsyncPostgresSaver):
    """``AsyncPostgresSaver`` plus ``delete_for_runs`` (langgraph-checkpoint-postgres leaves it
    to the base class, which raises; rollback needs it)."""

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint whose metadata ``run_id`` is one of ``run_ids``, with the
        pending writes stored on it, in one transaction. Channel blobs stay (their versions
        carry a random part, so no later checkpoint reuses one; ``delete_thread`` removes
        them)."""
        ids = [str(r) for r in run_ids]
        if not ids:
            return
        async with self._cursor() as cur, cur.connection.transaction():
            await cur.execute(
                "DELETE FROM checkpoint_writes WHERE (thread_id, checkpoint_ns, checkpoint_id) IN "
                "(SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints "
                "WHERE metadata->>'run_id' = ANY(%s))",
                (ids,),
            )
            await cur.execute("DELETE FROM checkpoints WHERE metadata->>'run_id' = ANY(%s)", (ids,))


@asynccontextmanager
async def open_pool(
    conninfo: str, name: str, max_size: int = POOL_MAX_SIZE
) -> AsyncIterator[AsyncConnectionPool]:
    """An open pool on ``conninfo`` as LangGraph's Postgres saver and store need it; closed on
    exit.

    Raises:
        StoreUnavailable: no connection within ``CONNECT_TIMEOUT`` seconds.
    """
    pool = AsyncConnectionPool(
        conninfo,
        open=False,
        min_size=POOL_MIN_SIZE,
        max_size=max_size,
        # What LangGraph's SQL needs: dict rows, and CREATE INDEX CONCURRENTLY in setup()
        # must not run inside a transaction.
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        # A connection broken by a Postgres restart is found and replaced when taken out,
        # instead of failing the turn that gets it.
        check=AsyncConnectionPool.check_connection,
        timeout=CONNECT_TIMEOUT,
        name=name,
    )
    try:
        try:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        except PoolTimeout as exc:
            raise StoreUnavailable(
                "postgres", f"no connection to {describe(conninfo)} within {CONNECT_TIMEOUT:g}s"
            ) from exc
        yield pool
    finally:
        await pool.close()


@asynccontextmanager
async def open_saver(settings: CheckpointSettings) -> AsyncIterator[AsyncPostgresSaver]:
    """Open a pool on ``CHECKPOINT_POSTGRES_URL``, run the migrations once, yield the saver.

    Raises:
        StoreUnavailable: no connection within ``CONNECT_TIMEOUT`` seconds, or the migrations
            failed on a connection error.
    """
    conninfo = settings.postgres_url or ""
    async with open_pool(conninfo, "threadline-checkpoints") as pool:
        saver = RollbackPostgresSaver(pool)  # type: ignore[arg-type]
        try:
            await migrate(saver, conninfo)
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(
                "postgres", f"migrations on {describe(conninfo)} failed: {type(exc).__name__}"
            ) from exc
        yield saver


async def migrate(saver: AsyncPostgresSaver, conninfo: str) -> None:
    """Run ``saver.setup()`` under the migration advisory lock (see the module docstring)."""
    async with await psycopg.AsyncConnection.connect(
        conninfo, autocommit=True, connect_timeout=int(CONNECT_TIMEOUT)
    ) as lock_conn:
        waited = False
        while True:
            cur = await lock_conn.execute("SELECT pg_try_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
            row = await cur.fetchone()
            if row and row[0]:
                break
            if not waited:
                log.info("checkpoint migrations: waiting for another replica to finish them")
                waited = True
            await asyncio.sleep(LOCK_POLL_INTERVAL)
        try:
            await saver.setup()
        finally:
            # Closing the connection would release it too; unlock explicitly to be prompt.
            await lock_conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
