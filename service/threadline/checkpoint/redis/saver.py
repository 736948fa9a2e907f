"""``redis`` backend: a LangGraph checkpoint saver on plain Redis data structures.

Strings, hashes and sorted sets only, no RedisJSON or RediSearch, so it works in any db
number, on Redis >= 6.2, Valkey and managed Redis. The keys are named in
:mod:`threadline.redis_keys`; the record format is :mod:`threadline.checkpoint.redis.records`,
the Lua scripts (with their KEYS/ARGV) :mod:`threadline.checkpoint.redis.scripts`.

Round trips: ``put`` is one Lua script call (the changed channels' blobs in its ARGV when
they are small, as a turn's are; else a plain HSET of them before the script, in one
MULTI/EXEC), ``put_writes`` one Lua script, a latest (or by-id) ``get_tuple`` at most two: a
Lua script that finds the checkpoint and returns its record and pending writes, then one
HMGET of the channel blobs this process does not hold decoded already (none when it wrote or
read them last: :mod:`threadline.checkpoint.redis.cache`). Large values never pass through
Lua: on Redis 7.0 a 150 KB argument or reply costs a script ~0.25 ms of server time, a plain
HSET/HMGET of it ~0.02 ms (measured at turn 300 of the benchmark conversation).

Each operation is written once, as a generator that yields the I/O it needs (a step of
:mod:`threadline.checkpoint.redis.steps`) and receives the reply; the sync and async methods
differ only in the driver that performs that I/O (:mod:`~threadline.checkpoint.redis.drivers`).
The operations, by stage, are the mixins of :mod:`~threadline.checkpoint.redis.reads`,
:mod:`~threadline.checkpoint.redis.writes` and :mod:`~threadline.checkpoint.redis.upkeep`;
this module holds the saver's setup and its public methods.

Fencing: a config whose ``configurable`` carries a non-empty ``fencing_token`` makes ``put``
and ``put_writes`` conditional, inside the same script, on ``GET tl:{thread}:lease`` being
that token; otherwise nothing is written and :class:`FencedError` is raised. LangGraph passes
the run's ``configurable`` through to every ``aput``/``aput_writes`` (verified in
``tests/integration/test_redis_saver.py``); the token is not stored in checkpoint metadata.
"""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import redis
import redis.asyncio as aioredis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from threadline import redis_client
from threadline.checkpoint.redis import pipelining
from threadline.checkpoint.redis.cache import BlobCache
from threadline.checkpoint.redis.drivers import _Drivers
from threadline.checkpoint.redis.reads import _Reads
from threadline.checkpoint.redis.records import thread_ns_id
from threadline.checkpoint.redis.scripts import SCRIPTS
from threadline.checkpoint.redis.upkeep import _Upkeep
from threadline.checkpoint.redis.writes import _Writes, _Written

# Default budget of the decoded-blob cache, in serialized bytes (CHECKPOINT_REDIS_CACHE_MB).
DEFAULT_CACHE_BYTES = 16 * 2**20
# What put writes by default (CHECKPOINT_REDIS_FORMAT); see the class.
LATEST_FORMAT = 3


class RedisCheckpointSaver(_Reads, _Writes, _Upkeep, _Drivers, BaseCheckpointSaver[str]):
    """LangGraph checkpoint saver on plain Redis; see the module docstring.

    Args:
        client: an async client with ``decode_responses=False`` (records are bytes).
        ttl_seconds: every key of a thread expires this long after its last write.
        sync_client: needed only for the sync methods (tools, scripts).
        serde: defaults to LangGraph's ``JsonPlusSerializer``.
        cache_bytes: budget of the decoded-blob cache (:mod:`threadline.checkpoint.redis.cache`),
            in serialized bytes; 0 turns it off (and with it format 2's deltas: a list is
            then stored whole at each version, as in format 1).
        format: what ``put`` writes (all are always read). 3: as 2, and a pending write whose
            list value a child checkpoint appended is stored by reference to those items, and
            records compress their versions against their own field names; 2: a list value is
            stored item by item, each item once, when it extends the version this process
            holds; 1: every value whole, readable by releases before format 2
            (``CHECKPOINT_REDIS_FORMAT``).
        keep_last: 0 keeps every checkpoint; N keeps the N newest of each namespace of a
            thread, plus every older one the delta chain of a kept one needs (see
            :meth:`aretain`), trimming once a thread holds ``RETAIN_BATCH`` more
            (``CHECKPOINT_KEEP_LAST``).

    Raises:
        ValueError: a client decodes responses, ``ttl_seconds`` is not positive, an unknown
            ``format``, or a negative ``keep_last``.
    """

    # adelete_for_runs takes the runs' thread (threadline.checkpoint.delete_for_runs).
    deletes_runs_of_one_thread = True

    def get_next_version(self, current: str | int | None, channel: None) -> str:
        """The channel version after ``current``: ``<counter>.<random>``.

        Formats 1 and 2 make them as the in-memory, SQLite and Postgres savers do (a 32-digit
        counter and a float: 51 characters). Format 3 makes them 25 characters, a 12-digit
        counter and 48 random bits in hex: a version is written ~20 times a turn (field names,
        records, descriptors, lineage names), ~0.6 KB a turn at 51 characters. LangGraph orders
        versions as strings (``max()``, ``>``): a 12-digit version is greater than any 32-digit
        one (which has 20 leading zeros), and counts on from it, so a thread written before
        continues in order. A release that makes 32-digit versions must not continue a thread
        after this one (the upgrade step: every replica on this release before format 3).
        """
        if self.format < 3:
            return InMemorySaver.get_next_version(self, current, channel)  # type: ignore[arg-type]
        if current is None:
            counter = 0
        elif isinstance(current, int):
            counter = current
        else:
            counter = int(current.split(".")[0])
        return f"{counter + 1:012}.{random.getrandbits(48):012x}"

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        ttl_seconds: int,
        sync_client: redis.Redis | None = None,
        serde: SerializerProtocol | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        format: int = LATEST_FORMAT,
        keep_last: int = 0,
    ) -> None:
        super().__init__(serde=serde)
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        if format not in (1, 2, 3):
            raise ValueError("format must be 1, 2 or 3")
        for c in (client, sync_client):
            if c is not None and c.get_connection_kwargs().get("decode_responses"):
                raise ValueError("RedisCheckpointSaver needs clients with decode_responses=False")
        self.ttl_seconds = ttl_seconds
        self.format = format
        if keep_last < 0:
            raise ValueError("keep_last must be 0 (keep all) or positive")
        self.keep_last = keep_last
        # Serialized bytes sent to Redis by write operations, by op (put, put_writes): what
        # the metrics wrapper reports as threadline_checkpoint_written_bytes_total.
        self.written_bytes: dict[str, int] = {"put": 0, "put_writes": 0}
        self._client = client
        self._sync_client = sync_client
        self._owns_clients = False
        self.cache = BlobCache(cache_bytes)
        # (thread, ns, checkpoint id) -> its list-valued pending writes this process stored;
        # and the items this process stored in a child of that checkpoint, by ``ns\0channel``
        # (LangGraph may put the child before the step's writes are in: then the writes refer).
        self._written: OrderedDict[tuple[str, str, str], list[_Written]] = OrderedDict()
        # ... and (write field, record) of every write it stored there, as the w field holds them
        self._packed: OrderedDict[tuple[str, str, str], list[tuple[bytes, bytes]]] = OrderedDict()
        # (thread, ns, checkpoint id) -> the small dicts of lists it stored (_dict_of_lists)
        self._dicts: OrderedDict[tuple[str, str, str], list[tuple[bytes, dict[str, list[bytes]]]]] = (
            OrderedDict()
        )
        # put_writes calls in flight, by (thread, ns, checkpoint id), on a Cluster: see aput.
        self._writing: dict[tuple[str, str, str], set[asyncio.Future[None]]] = {}
        self._placed: OrderedDict[tuple[str, str, str], dict[bytes, list[tuple[bytes, int, bytes]]]] = (
            OrderedDict()
        )
        self._scripts = {n: client.register_script(s) for n, s in SCRIPTS.items()}
        # Concurrent runs' script calls share round trips with every other user of the client
        # (not on a Cluster: see the module).
        self._pipelining = pipelining.shared(client)
        self._sync_scripts = (
            {n: sync_client.register_script(s) for n, s in SCRIPTS.items()} if sync_client is not None else {}
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        ttl_seconds: int,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        format: int = LATEST_FORMAT,
        keep_last: int = 0,
        sentinel_password: str | None = None,
    ) -> RedisCheckpointSaver:
        """A saver with its own async and sync clients for ``url``.

        The clients follow :mod:`threadline.redis_client`'s timeout and retry policy (every
        write here is safe to repeat). :meth:`aclose` closes them.

        Args:
            url: ``redis://``, ``rediss://`` (any db number), ``redis+sentinel://`` or
                ``redis+cluster://`` URL (:mod:`threadline.urls`).
            ttl_seconds, cache_bytes, format, keep_last: see the class.
            sentinel_password: the sentinels' own password (``REDIS_SENTINEL_PASSWORD``).

        Returns:
            The saver (no connection is made until the first call).
        """
        saver = cls(
            redis_client.async_client(url, sentinel_password=sentinel_password),
            ttl_seconds=ttl_seconds,
            sync_client=redis_client.sync_client(url, sentinel_password=sentinel_password),
            cache_bytes=cache_bytes,
            format=format,
            keep_last=keep_last,
        )
        saver._owns_clients = True
        return saver

    @property
    def client(self) -> aioredis.Redis:
        """The async client (others may share it, and so its batcher: ``pipelining.shared``)."""
        return self._client

    async def aclose(self) -> None:
        """Close the clients this saver created (:meth:`from_url`); given clients stay open.
        Script calls on their way are sent first."""
        if self._pipelining is not None:
            await self._pipelining.aclose()
        if self._owns_clients:
            await self._client.aclose()
            if self._sync_client is not None:
                self._sync_client.close()

    # --- public API (async) ------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Fetch one checkpoint with its channel values and pending writes (one round trip).

        Args:
            config: ``thread_id``, optional ``checkpoint_ns`` (default ``""``) and optional
                ``checkpoint_id`` (default: the latest of that namespace).

        Returns:
            The tuple, pending writes ordered by ``(task_path, task_id, idx)``; None if absent.

        Raises:
            redis.RedisError: Redis is unreachable or refused the call.
        """
        return await self._run_async(self._op_get(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """List checkpoints newest first, as InMemorySaver filters them.

        Args:
            config: the thread; its ``checkpoint_ns`` (if present, even ``""``) restricts to
                one namespace, its ``checkpoint_id`` to one checkpoint. None lists every
                thread (a SCAN: for tools, not for request paths).
            filter: metadata keys that must all be equal.
            before: only checkpoints with an id below this config's ``checkpoint_id``.
            limit: at most this many tuples.

        Returns:
            An async iterator of tuples.

        Raises:
            redis.RedisError: Redis is unreachable or refused the call.
        """
        async for item in self._iter_async(self._op_list(config, filter, before, limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and the blobs of its changed channels (one round trip).

        Args:
            config: ``thread_id``, ``checkpoint_ns``, the parent's ``checkpoint_id`` and,
                optionally, ``fencing_token``.
            checkpoint: the checkpoint.
            metadata: its metadata.
            new_versions: the channels whose value changed since the parent.

        Returns:
            The config of the stored checkpoint.

        Raises:
            FencedError: ``fencing_token`` no longer holds the thread's lease; nothing written.
            redis.RedisError: Redis is unreachable or refused the call.
        """
        if self.format >= 3 and self._writing:
            # LangGraph runs a step's put_writes and its child's put concurrently. On a Cluster
            # the put waits for the parent's writes in flight, to store them by reference (with
            # the batcher they were queued first and go first: ADR 0007 decision 9).
            thread_id, ns, parent = thread_ns_id(config)
            pending = self._writing.get((thread_id, ns, parent or ""))
            if pending:
                await asyncio.wait(list(pending))
        return await self._run_async(self._op_put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for a checkpoint (one round trip).

        Args:
            config: the checkpoint's config, optionally with ``fencing_token``.
            writes: ``(channel, value)`` pairs.
            task_id: the task that made them.
            task_path: its path (the first sort key of pending writes).

        Raises:
            FencedError: ``fencing_token`` no longer holds the thread's lease; nothing written.
            redis.RedisError: Redis is unreachable or refused the call.
        """
        if self.format < 3 or self._pipelining is not None:  # nothing to wait for: see aput
            await self._run_async(self._op_put_writes(config, writes, task_id, task_path))
            return
        thread_id, ns, checkpoint_id = thread_ns_id(config)
        key = (thread_id, ns, checkpoint_id or "")
        done = asyncio.get_running_loop().create_future()
        self._writing.setdefault(key, set()).add(done)
        try:
            await self._run_async(self._op_put_writes(config, writes, task_id, task_path))
        finally:
            done.set_result(None)
            waiting = self._writing[key]
            waiting.discard(done)
            if not waiting:
                del self._writing[key]

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, blob and write of a thread (one DEL).

        The thread's lease and fence counter are kept (they expire on their own): deleting a
        conversation must not hand its lease to a second turn while one is in flight, and the
        token counter must never restart.

        Args:
            thread_id: the thread.

        Raises:
            redis.RedisError: Redis is unreachable or refused the call.
        """
        await self._run_async(self._op_delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str], *, thread_id: str | None = None) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id`` is listed.

        With ``thread_id``, of that thread only: one HGETALL of its records and one script,
        whatever else Redis holds (a rollback: ``threadline.checkpoint.delete_for_runs``).
        Without, scans every thread (SCAN; an admin operation: 1008 hashes read in 0.83 s for
        one rollback in issue 18). Blobs no remaining checkpoint refers to are deleted too.

        Args:
            run_ids: the runs.
            thread_id: the thread the runs ran on, when known.

        Raises:
            redis.RedisError: Redis is unreachable or refused the call.
        """
        await self._run_async(self._op_delete_for_runs(run_ids, thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, blob and write of one thread into another.

        Args:
            source_thread_id: the thread to copy; missing means nothing is copied.
            target_thread_id: the thread to copy into (merged with what it holds).

        Raises:
            redis.RedisError: Redis is unreachable or refused the call.
        """
        await self._run_async(self._op_copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Drop old checkpoints of threads, with their writes and unreferenced blobs.

        ``keep_latest`` keeps the latest checkpoint of each namespace and, as
        :meth:`aretain` does, the ancestors its ``DeltaChannel`` chains need (the parent chain
        back to each valueless channel's nearest value), so a delta channel never reads as
        empty after a prune.

        Args:
            thread_ids: the threads.
            strategy: ``keep_latest`` (per namespace) or ``delete`` (everything).

        Raises:
            ValueError: unknown strategy.
            redis.RedisError: Redis is unreachable or refused the call.
        """
        await self._run_async(self._op_prune(thread_ids, strategy))

    async def aretain(self, thread_id: str, keep: int) -> None:
        """Drop all but the ``keep`` newest checkpoints of each namespace of ``thread_id``.

        Never one a pending write or interrupt needs (the newest of a namespace holds them),
        nor an ancestor the delta chain of a kept one needs (a channel without a value there
        keeps the parent chain back to its nearest value). Runs by itself after puts when
        the saver has ``keep_last``.

        Args:
            thread_id: the thread.
            keep: checkpoints kept per namespace, at least 1.

        Raises:
            ValueError: ``keep`` below 1.
            redis.RedisError: Redis is unreachable or refused the call.
        """
        if keep < 1:
            raise ValueError("keep must be at least 1")
        await self._run_async(self._op_retain(thread_id, keep))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel, the writes since its nearest stored value (the seed) on the parent
        chain of ``config``'s checkpoint, as ``BaseCheckpointSaver`` defines it.

        Two round trips however deep the chain: one script walks it inside Redis (records,
        writes and descriptors are small), then one HMGET of the seeds' values.

        Args:
            config: the target checkpoint (``checkpoint_id`` absent: the latest).
            channels: channel names; empty gives an empty mapping.

        Returns:
            ``{channel: {"writes": [...oldest first], "seed"?: value}}``.

        Raises:
            redis.RedisError: Redis is unreachable or refused the call.
        """
        return await self._run_async(self._op_delta_history(config, channels))

    # --- public API (sync twins; need sync_client) ------------------------------------------

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Sync :meth:`aget_delta_channel_history`."""
        return self._run_sync(self._op_delta_history(config, channels))

    def retain(self, thread_id: str, keep: int) -> None:
        """Sync :meth:`aretain`."""
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self._run_sync(self._op_retain(thread_id, keep))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Sync :meth:`aget_tuple`."""
        return self._run_sync(self._op_get(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Sync :meth:`alist`."""
        return self._iter_sync(self._op_list(config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Sync :meth:`aput`."""
        return self._run_sync(self._op_put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Sync :meth:`aput_writes`."""
        self._run_sync(self._op_put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Sync :meth:`adelete_thread`."""
        self._run_sync(self._op_delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str], *, thread_id: str | None = None) -> None:
        """Sync :meth:`adelete_for_runs`."""
        self._run_sync(self._op_delete_for_runs(run_ids, thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Sync :meth:`acopy_thread`."""
        self._run_sync(self._op_copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Sync :meth:`aprune`."""
        self._run_sync(self._op_prune(thread_ids, strategy))
