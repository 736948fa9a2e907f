"""The ``sqlite`` backend: an async bridge over LangGraph's **sync** ``SqliteSaver``.

Each async method runs the matching sync method in a worker thread (``asyncio.to_thread``).
All threads share ONE ``sqlite3`` connection opened with ``check_same_thread=False``; what
makes that safe is the saver's own ``threading.Lock``, taken around every cursor. We add no
lock of our own.

Why not ``AsyncSqliteSaver``: it needs aiosqlite and captures the running event loop at
construction (its sync methods then refuse to run on that loop), so it cannot be built before
the loop runs nor used from another loop (tests, the CLI). The sync saver plus ``to_thread``
needs none of that: one plain connection, one lock that the library already takes. A thread
hop measured ~0.15 ms here, against ~20 ms per turn for any saver at turn 300.

Only the methods the sync saver really implements are bridged (``_bridge`` refuses anything
else at import time), so capability detection stays truthful: ``copy_thread`` and ``prune``
are not implemented by ``SqliteSaver`` 3.1.2 and stay absent. ``delete_for_runs`` (what
rollback needs) is ours: SQL against the saver's two tables, in a worker thread, under its lock.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver

from threadline.config import CheckpointSettings
from threadline.errors import StoreUnavailable

# A locked or unreadable database file: the store is failing, not the request.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (sqlite3.OperationalError,)


def _bridge(sync_name: str) -> Callable[..., Any]:
    """An async method that runs ``self.<sync_name>`` in a worker thread.

    Raises:
        TypeError: at import time, when ``SqliteSaver`` does not implement ``sync_name``
            (bridging the base class's ``NotImplementedError`` would lie to capability checks).
    """
    if getattr(SqliteSaver, sync_name) is getattr(BaseCheckpointSaver, sync_name):
        raise TypeError(f"SqliteSaver does not implement {sync_name}; do not bridge it")

    async def bridged(self: ThreadedSqliteSaver, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self, sync_name), *args, **kwargs)

    bridged.__name__ = bridged.__qualname__ = f"a{sync_name}"
    bridged.__doc__ = f"Run :meth:`SqliteSaver.{sync_name}` in a worker thread."
    return bridged


class ThreadedSqliteSaver(SqliteSaver):
    """``SqliteSaver`` whose async methods run its sync methods in worker threads.

    If the awaiting task is cancelled, the worker thread still runs its statement to the end
    (threads cannot be interrupted); the saver's lock and the per-call commit keep the file
    consistent either way.
    """

    aget_tuple = _bridge("get_tuple")
    aput = _bridge("put")
    aput_writes = _bridge("put_writes")
    adelete_thread = _bridge("delete_thread")
    aget_delta_channel_history = _bridge("get_delta_channel_history")

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint whose metadata ``run_id`` is one of ``run_ids``, and the
        pending writes stored on those checkpoints (``SqliteSaver`` 3.1.2 lacks it). The
        metadata is the JSON ``SqliteSaver.put`` writes; channel values live inside the
        checkpoint row, so nothing else refers to a deleted one. A scan of the table, like
        the ``redis`` saver's: rollback is rare."""
        ids = [str(r) for r in run_ids]
        if not ids:
            return
        marks = ",".join("?" * len(ids))
        mine = f"json_extract(CAST(metadata AS TEXT), '$.run_id') IN ({marks})"
        with self.cursor() as cur:  # the saver's lock, one commit for both statements
            cur.execute(
                "DELETE FROM writes WHERE (thread_id, checkpoint_ns, checkpoint_id) IN "
                f"(SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints WHERE {mine})",
                ids,
            )
            cur.execute(f"DELETE FROM checkpoints WHERE {mine}", ids)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Run :meth:`delete_for_runs` in a worker thread."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Run :meth:`SqliteSaver.list` to the end in a worker thread, then yield its items.

        The sync ``list()`` holds the saver's lock while it yields; iterating it lazily from
        the event loop would hold that lock across awaits (and across threads).
        """

        def materialise() -> list[CheckpointTuple]:
            return list(self.list(config, filter=filter, before=before, limit=limit))

        for item in await asyncio.to_thread(materialise):
            yield item


def _connect(path: str) -> sqlite3.Connection:
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    # timeout: another process on the same file (a second local replica) holds the write lock
    # for milliseconds per turn; wait for it instead of failing with "database is locked".
    conn = sqlite3.connect(path, check_same_thread=False, timeout=10)
    try:
        # SqliteSaver.setup() also sets WAL; we set it first so the schema is created in WAL
        # mode. WAL lets readers (another local process, the sqlite3 shell) read while a turn
        # commits, and a commit appends to one file instead of rewriting pages twice.
        conn.execute("PRAGMA journal_mode=WAL")
    except BaseException:
        conn.close()
        raise
    return conn


@asynccontextmanager
async def open_saver(settings: CheckpointSettings) -> AsyncIterator[ThreadedSqliteSaver]:
    """Open the SQLite file at ``CHECKPOINT_SQLITE_PATH`` (parent directories created).

    Raises:
        StoreUnavailable: the file cannot be created, opened or set up.
    """
    path = str(settings.sqlite_path)
    try:
        conn = await asyncio.to_thread(_connect, path)
    except (OSError, sqlite3.Error) as exc:
        raise StoreUnavailable("sqlite", f"cannot open {path}: {exc}") from exc
    saver = ThreadedSqliteSaver(conn)
    try:
        try:
            await asyncio.to_thread(saver.setup)  # schema now, not inside the first turn
        except sqlite3.Error as exc:
            raise StoreUnavailable("sqlite", f"cannot set up {path}: {exc}") from exc
        yield saver
    finally:
        await asyncio.to_thread(_close, saver)


def _close(saver: ThreadedSqliteSaver) -> None:
    # Under the saver's lock: a worker thread left running by a cancelled task finishes first.
    with saver.lock:
        saver.conn.close()
