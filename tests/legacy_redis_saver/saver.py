"""``redis`` backend: a LangGraph checkpoint saver on plain Redis data structures.

Strings, hashes and sorted sets only, no RedisJSON or RediSearch, so it works in any db
number, on Redis >= 6.2, Valkey and managed Redis. The key layout and record format are in
:mod:`threadline.checkpoint.base`.

Round trips: ``put`` is one MULTI/EXEC (plain HSET of the changed channels' blobs plus a
Lua script for the small rest), ``put_writes`` one Lua script, a latest (or by-id)
``get_tuple`` at most two: a Lua script that finds the checkpoint and returns its record and
pending writes, then one HMGET of the channel blobs this process does not hold decoded already
(none when it wrote or read them last: :mod:`threadline.checkpoint.cache`). Large values
never pass through Lua: on Redis 7.0 a 150 KB argument or reply costs a script ~0.25 ms of
server time, a plain HSET/HMGET of it ~0.02 ms (measured at turn 300 of the benchmark
conversation).

Each operation is written once, as a generator that yields the I/O it needs (:class:`Script`
or :class:`Commands`) and receives the reply; the sync and async methods differ only in the
driver that performs that I/O (``_run_sync``/``_run_async`` and the ``_iter_*`` twins).

Fencing: a config whose ``configurable`` carries a non-empty ``fencing_token`` makes ``put``
and ``put_writes`` conditional, inside the same script, on ``GET tl:{thread}:lease`` being
that token; otherwise nothing is written and :class:`FencedError` is raised. LangGraph passes
the run's ``configurable`` through to every ``aput``/``aput_writes`` (verified in
``tests/integration/test_redis_saver.py``); the token is not stored in checkpoint metadata.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from typing import Any, ClassVar

import redis
import redis.asyncio as aioredis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from redis.exceptions import NoScriptError

from threadline import redis_client
from legacy_redis_saver.base import (
    NO_VALUE,
    Commands,
    Emit,
    FencedError,
    Script,
    blob_fields_of,
    channel_values,
    checkpoint_config,
    decode_blob,
    decode_metadata,
    decode_tuple,
    encode_put,
    encode_writes,
    fencing_token,
    member,
    metadata_matches,
    ns_range,
    split_member,
    thread_ns_id,
)
from legacy_redis_saver.cache import MISS, BlobCache
from threadline.redis_keys import INDEX_KEY_PATTERN, ThreadKeys, thread_id_of_index_key

Step = Script | Commands | Emit
Op = Generator[Step, Any, Any]

# Checkpoints loaded per script call while listing.
_PAGE = 100
# Default budget of the decoded-blob cache, in serialized bytes (CHECKPOINT_REDIS_CACHE_MB).
DEFAULT_CACHE_BYTES = 16 * 2**20

# Shared by every script. KEYS are always a thread's ThreadKeys in order:
# 1 idx, 2 cp, 3 blobs, 4 widx, 5 w, 6 lease, 7 fence counter.
_LUA_LIB = r"""
local function items(s, pos, n)  -- n netstrings from pos; returns them and the next pos
  local out = {}
  for i = 1, n do
    local colon = string.find(s, ':', pos, true)
    local size = tonumber(string.sub(s, pos, colon - 1))
    out[i] = string.sub(s, colon + 1, colon + size)
    pos = colon + size + 1
  end
  return out, pos
end
local function blob_fields(record)  -- the blobs-hash fields a checkpoint record refers to
  local head, pos = items(record, 1, 1)
  return (items(record, pos, tonumber(head[1])))
end
local function writes_of(m)  -- write fields of the checkpoint with index member m
  return redis.call('ZRANGEBYLEX', KEYS[4], '[' .. m .. '\0', '(' .. m .. '\1')
end
local function fenced(token)
  return token ~= '' and redis.call('GET', KEYS[6]) ~= token
end
local function refresh(ttl)  -- every key of the thread except the lease (it has its own)
  for _, i in ipairs({1, 2, 3, 4, 5, 7}) do redis.call('EXPIRE', KEYS[i], ttl) end
end
"""


class RedisCheckpointSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoint saver on plain Redis; see the module docstring.

    Args:
        client: an async client with ``decode_responses=False`` (records are bytes).
        ttl_seconds: every key of a thread expires this long after its last write.
        sync_client: needed only for the sync methods (tools, scripts).
        serde: defaults to LangGraph's ``JsonPlusSerializer``.
        cache_bytes: budget of the decoded-blob cache (:mod:`threadline.checkpoint.cache`),
            in serialized bytes; 0 turns it off.

    Raises:
        ValueError: a client decodes responses, or ``ttl_seconds`` is not positive.
    """

    # KEYS[1..5] = idx, cp, blobs, widx, w
    # ARGV = checkpoint_ns, checkpoint_id pairs; an empty id means the latest of that ns
    # returns per pair {checkpoint_id, record, {write records}}, or nil when there is no
    #   such checkpoint (the caller HMGETs the blobs the record names: no big values in Lua)
    LUA_LOAD = (
        _LUA_LIB
        + r"""
local out = {}
for i = 1, #ARGV, 2 do
  local ns, id = ARGV[i], ARGV[i + 1]
  if id == '' then
    local latest = redis.call('ZREVRANGEBYLEX', KEYS[1], '(' .. ns .. '\1', '[' .. ns .. '\0',
                              'LIMIT', 0, 1)
    if latest[1] then id = string.sub(latest[1], #ns + 2) end
  end
  local m = ns .. '\0' .. id
  local record = id ~= '' and redis.call('HGET', KEYS[2], m)
  if record then
    local wf, writes = writes_of(m), {}
    if #wf > 0 then writes = redis.call('HMGET', KEYS[5], unpack(wf)) end
    out[#out + 1] = {id, record, writes}
  else
    out[#out + 1] = false
  end
end
return out
"""
    )

    # Runs in one MULTI/EXEC right after a plain HSET of this put's blobs (big values stay out
    # of Lua). When fenced it takes those fields out again, so the thread is as before: their
    # versions are fresh (get_next_version adds a random part), so no other checkpoint refers
    # to them -- unless this very checkpoint is already stored (a retried put whose first
    # attempt went through), and then they are its own and stay.
    # KEYS[1..7] = ThreadKeys
    # ARGV[1] = ttl seconds, ARGV[2] = fencing token or '', ARGV[3] = index member,
    # ARGV[4] = checkpoint record, ARGV[5..] = the blob fields HSET just before
    # returns 1, or 0 when fenced (nothing written)
    LUA_PUT = (
        _LUA_LIB
        + r"""
if fenced(ARGV[2]) then
  if #ARGV > 4 and redis.call('HEXISTS', KEYS[2], ARGV[3]) == 0 then
    redis.call('HDEL', KEYS[3], unpack(ARGV, 5))
  end
  return 0
end
redis.call('ZADD', KEYS[1], 0, ARGV[3])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
refresh(ARGV[1])
return 1
"""
    )

    # KEYS[1..7] = ThreadKeys
    # ARGV[1] = ttl seconds, ARGV[2] = fencing token or '',
    # ARGV[3..] = write field, write record, '1' to replace an existing write / '0' to keep it
    # returns 1, or 0 when fenced (nothing written)
    LUA_PUT_WRITES = (
        _LUA_LIB
        + r"""
if fenced(ARGV[2]) then return 0 end
for i = 3, #ARGV, 3 do
  if ARGV[i + 2] == '1' or redis.call('HEXISTS', KEYS[5], ARGV[i]) == 0 then
    redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
    redis.call('ZADD', KEYS[4], 0, ARGV[i])
  end
end
refresh(ARGV[1])
return 1
"""
    )

    # KEYS[1..5] = idx, cp, blobs, widx, w
    # ARGV = index members of checkpoints to delete
    # deletes them, their writes, and every blob no remaining checkpoint refers to
    # returns the number of checkpoints deleted
    LUA_DROP = (
        _LUA_LIB
        + r"""
local n = 0
for _, m in ipairs(ARGV) do
  n = n + redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], m)
  local wf = writes_of(m)
  if #wf > 0 then
    redis.call('HDEL', KEYS[5], unpack(wf))
    redis.call('ZREM', KEYS[4], unpack(wf))
  end
end
local live, dead = {}, {}
for _, record in ipairs(redis.call('HVALS', KEYS[2])) do
  for _, f in ipairs(blob_fields(record)) do live[f] = true end
end
for _, f in ipairs(redis.call('HKEYS', KEYS[3])) do
  if not live[f] then dead[#dead + 1] = f end
end
for i = 1, #dead, 1000 do  -- unpack() has a stack limit
  redis.call('HDEL', KEYS[3], unpack(dead, i, math.min(i + 999, #dead)))
end
return n
"""
    )

    _SCRIPTS: ClassVar[dict[str, str]] = {
        "load": LUA_LOAD,
        "put": LUA_PUT,
        "put_writes": LUA_PUT_WRITES,
        "drop": LUA_DROP,
    }

    # String versions "<counter>.<random>" like the in-memory, SQLite and Postgres savers.
    get_next_version = InMemorySaver.get_next_version

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        ttl_seconds: int,
        sync_client: redis.Redis | None = None,
        serde: SerializerProtocol | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        super().__init__(serde=serde)
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        for c in (client, sync_client):
            if c is not None and c.get_connection_kwargs().get("decode_responses"):
                raise ValueError("RedisCheckpointSaver needs clients with decode_responses=False")
        self.ttl_seconds = ttl_seconds
        self._client = client
        self._sync_client = sync_client
        self._owns_clients = False
        self.cache = BlobCache(cache_bytes)
        self._scripts = {n: client.register_script(s) for n, s in self._SCRIPTS.items()}
        self._sync_scripts = (
            {n: sync_client.register_script(s) for n, s in self._SCRIPTS.items()}
            if sync_client is not None
            else {}
        )

    @classmethod
    def from_url(
        cls, url: str, *, ttl_seconds: int, cache_bytes: int = DEFAULT_CACHE_BYTES
    ) -> RedisCheckpointSaver:
        """A saver with its own async and sync clients for ``url``.

        The clients follow :mod:`threadline.redis_client`'s timeout and retry policy (every
        write here is safe to repeat). :meth:`aclose` closes them.

        Args:
            url: ``redis://`` or ``rediss://`` URL, with any db number.
            ttl_seconds, cache_bytes: see the class.

        Returns:
            The saver (no connection is made until the first call).
        """
        saver = cls(
            redis_client.async_client(url),
            ttl_seconds=ttl_seconds,
            sync_client=redis_client.sync_client(url),
            cache_bytes=cache_bytes,
        )
        saver._owns_clients = True
        return saver

    async def aclose(self) -> None:
        """Close the clients this saver created (:meth:`from_url`); given clients stay open."""
        if self._owns_clients:
            await self._client.aclose()
            if self._sync_client is not None:
                self._sync_client.close()

    # --- operations: written once, I/O yielded to a driver ------------------------------------

    def _op_load(self, thread_id: str, wanted: Sequence[tuple[str, str]], remember: bool = True) -> Op:
        """Tuples for ``(ns, checkpoint_id)`` pairs (``""`` id: latest), None where absent.

        At most two round trips however many: the load script, then one HMGET per checkpoint
        for the channel blobs the cache does not hold, pipelined (none when it holds them all).
        Fetched blobs are cached when ``remember`` (not while listing history, which would
        push the latest versions out).
        """
        keys = ThreadKeys.of(thread_id)
        entries = yield Script("load", keys.data, [x for pair in wanted for x in pair])
        # Per checkpoint found: each blob field its record names -> the cached value, or MISS.
        blobs = [
            {f: self.cache.get(thread_id, f) for f in blob_fields_of(e[1])} if e else {} for e in entries
        ]
        missing = [[f for f, value in b.items() if value is MISS] for b in blobs]
        hmgets = [("HMGET", keys.blobs, *m) for m in missing if m]
        replies = iter((yield Commands(hmgets)) if hmgets else ())
        for b, m in zip(blobs, missing, strict=True):
            for field, raw in zip(m, next(replies) if m else (), strict=True):
                b[field] = self._decoded(thread_id, field, raw, remember)
        return [
            decode_tuple(self.serde, thread_id, ns, e, channel_values(b, ns)) if e else None
            for (ns, _id), e, b in zip(wanted, entries, blobs, strict=True)
        ]

    def _decoded(self, thread_id: str, field: bytes, raw: bytes | None, remember: bool) -> Any:
        if raw is None:  # not in Redis: the checkpoint has no value for this channel
            return NO_VALUE
        value = decode_blob(self.serde, raw)
        if remember:
            self.cache.put(thread_id, field, value, len(raw))
        return value

    def _op_get(self, config: RunnableConfig) -> Op:
        thread_id, ns, checkpoint_id = thread_ns_id(config)
        (found,) = yield from self._op_load(thread_id, [(ns, checkpoint_id or "")])
        return found

    def _op_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Op:
        thread_id, ns, _parent = thread_ns_id(config)
        record, blobs = encode_put(self.serde, config, checkpoint, metadata, new_versions)
        keys = ThreadKeys.of(thread_id)
        args = [self.ttl_seconds, fencing_token(config), member(ns, checkpoint["id"]), record]
        if not blobs:
            stored = yield Script("put", keys, args)
        else:
            put = Script("put", keys, [*args, *(b.field for b in blobs)])
            hset = ("HSET", keys.blobs, *(x for b in blobs for x in (b.field, b.data)))
            stored = (yield Commands([hset, put], transaction=True))[-1]
        if not stored:
            raise FencedError(thread_id)
        # Only what Redis now holds: a fenced put took its blobs out again.
        for blob in blobs:
            self.cache.put(thread_id, blob.field, blob.value, len(blob.data))
        return checkpoint_config(thread_id, ns, checkpoint["id"])

    def _op_put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Op:
        thread_id = thread_ns_id(config)[0]
        triples = encode_writes(self.serde, config, writes, task_id, task_path)
        args = [self.ttl_seconds, fencing_token(config), *triples]
        if not (yield Script("put_writes", ThreadKeys.of(thread_id), args)):
            raise FencedError(thread_id)

    def _op_threads(self) -> Op:
        """Every thread id with checkpoints (SCAN: no global registry key to grow)."""
        threads: set[str] = set()
        cursor = 0
        while True:
            ((cursor, keys),) = yield Commands([("SCAN", cursor, "MATCH", INDEX_KEY_PATTERN, "COUNT", 1000)])
            threads.update(thread_id_of_index_key(k) for k in keys)
            if int(cursor) == 0:
                return sorted(threads)

    def _op_list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Op:
        conf = config["configurable"] if config else {}
        ns = conf.get("checkpoint_ns")  # absent: every namespace, as InMemorySaver
        only_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        threads = [str(conf["thread_id"])] if config else (yield from self._op_threads())
        remaining = limit
        for thread_id in threads:
            keys = ThreadKeys.of(thread_id)
            if ns is not None:
                high, low = ns_range(ns, before_id)
                cut = ("LIMIT", 0, limit) if limit and not filter and not only_id else ()
                (raw,) = yield Commands([("ZREVRANGEBYLEX", keys.idx, high, low, *cut)])
                found = [split_member(m) for m in raw]
            else:
                # Across namespaces: newest first by checkpoint id, like the SQL savers.
                (raw,) = yield Commands([("ZRANGE", keys.idx, 0, -1)])
                found = sorted(map(split_member, raw), key=lambda c: c[1], reverse=True)
                found = [c for c in found if not before_id or c[1] < before_id]
            found = [c for c in found if not only_id or c[1] == only_id]
            for start in range(0, len(found), _PAGE):
                if remaining is not None and remaining <= 0:
                    return
                page = found[start : start + _PAGE]
                if filter:
                    (records,) = yield Commands([("HMGET", keys.cp, *(member(*c) for c in page))])
                    page = [
                        c
                        for c, rec in zip(page, records, strict=True)
                        if rec is not None and metadata_matches(decode_metadata(self.serde, rec), filter)
                    ]
                page = page if remaining is None else page[:remaining]
                if not page:
                    continue
                for found in (yield from self._op_load(thread_id, page, remember=False)):
                    if found:  # None: deleted between the index read and the load
                        yield Emit(found)
                        remaining = None if remaining is None else remaining - 1

    def _op_delete_thread(self, thread_id: str) -> Op:
        # The lease and fence counter stay: a turn in flight keeps its lease, and the counter
        # must never restart, or an old token could become valid again.
        yield Commands([("DEL", *ThreadKeys.of(thread_id).data)])
        self.cache.drop(thread_id)

    def _op_delete_for_runs(self, run_ids: Sequence[str]) -> Op:
        runs = set(run_ids)
        if not runs:
            return
        for thread_id in (yield from self._op_threads()):
            keys = ThreadKeys.of(thread_id)
            (records,) = yield Commands([("HGETALL", keys.cp)])
            doomed = [
                m for m, rec in records.items() if decode_metadata(self.serde, rec).get("run_id") in runs
            ]
            if doomed:
                yield Script("drop", keys.data, doomed)

    def _op_copy_thread(self, source_thread_id: str, target_thread_id: str) -> Op:
        src, dst = ThreadKeys.of(source_thread_id), ThreadKeys.of(target_thread_id)
        # Field names hold no thread id, so the copy is a verbatim copy of the five keys;
        # read in one MULTI so the copy is a consistent snapshot.
        idx, cp, blobs, widx, w = yield Commands(
            [("ZRANGE", src.idx, 0, -1), ("HGETALL", src.cp), ("HGETALL", src.blobs),
             ("ZRANGE", src.widx, 0, -1), ("HGETALL", src.w)],
            transaction=True,
        )  # fmt: skip
        if not idx:
            return
        commands: list[tuple[Any, ...]] = []
        for key, members in ((dst.idx, idx), (dst.widx, widx)):
            if members:
                commands.append(("ZADD", key, *(x for m in members for x in (0, m))))
        for key, mapping in ((dst.cp, cp), (dst.blobs, blobs), (dst.w, w)):
            if mapping:
                commands.append(("HSET", key, *(x for kv in mapping.items() for x in kv)))
        commands += [("EXPIRE", key, self.ttl_seconds) for key in dst.data]
        yield Commands(commands, transaction=True)

    def _op_prune(self, thread_ids: Sequence[str], strategy: str) -> Op:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        for thread_id in thread_ids:
            keys = ThreadKeys.of(thread_id)
            if strategy == "delete":
                yield Commands([("DEL", *keys.data)])
                continue
            (members,) = yield Commands([("ZRANGE", keys.idx, 0, -1)])
            latest: dict[str, bytes] = {}
            for m in members:  # ascending, so the last one of each namespace wins
                latest[split_member(m)[0]] = m
            kept = set(latest.values())
            doomed = [m for m in members if m not in kept]
            if doomed:
                yield Script("drop", keys.data, doomed)

    # --- drivers -------------------------------------------------------------------------------

    def _io_sync(self, step: Script | Commands) -> Any:
        if self._sync_client is None:
            raise RuntimeError(
                "this RedisCheckpointSaver has no sync_client: use the async methods, or "
                "construct it with sync_client= (from_url does)"
            )
        scripts = self._sync_scripts
        if isinstance(step, Script):
            return scripts[step.name](keys=step.keys, args=step.args)
        try:
            return self._pipeline(self._sync_client, step).execute()
        except NoScriptError:  # Redis restarted or flushed its scripts: load them, once
            for script in scripts.values():
                self._sync_client.script_load(script.script)
            return self._pipeline(self._sync_client, step).execute()

    async def _io_async(self, step: Script | Commands) -> Any:
        scripts = self._scripts
        if isinstance(step, Script):
            return await scripts[step.name](keys=step.keys, args=step.args)
        try:
            return await self._pipeline(self._client, step).execute()
        except NoScriptError:  # see _io_sync; the failed MULTI wrote at most unreferenced blobs
            for script in scripts.values():
                await self._client.script_load(script.script)
            return await self._pipeline(self._client, step).execute()

    def _pipeline(self, client: Any, step: Commands) -> Any:
        # Scripts go in as raw EVALSHA: redis-py's Script-in-pipeline support would send a
        # SCRIPT EXISTS round trip before every execute.
        pipe = client.pipeline(transaction=step.transaction)
        for command in step.commands:
            if isinstance(command, Script):
                sha = self._scripts[command.name].sha
                pipe.execute_command("EVALSHA", sha, len(command.keys), *command.keys, *command.args)
            else:
                pipe.execute_command(*command)
        return pipe

    def _run_sync(self, op: Op) -> Any:
        reply = None
        while True:
            try:
                step = op.send(reply)
            except StopIteration as done:
                return done.value
            reply = self._io_sync(step)

    async def _run_async(self, op: Op) -> Any:
        reply = None
        while True:
            try:
                step = op.send(reply)
            except StopIteration as done:
                return done.value
            reply = await self._io_async(step)

    def _iter_sync(self, op: Op) -> Iterator[Any]:
        reply = None
        while True:
            try:
                step = op.send(reply)
            except StopIteration:
                return
            if isinstance(step, Emit):
                reply = None
                yield step.value
            else:
                reply = self._io_sync(step)

    async def _iter_async(self, op: Op) -> AsyncIterator[Any]:
        reply = None
        while True:
            try:
                step = op.send(reply)
            except StopIteration:
                return
            if isinstance(step, Emit):
                reply = None
                yield step.value
            else:
                reply = await self._io_async(step)

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
        await self._run_async(self._op_put_writes(config, writes, task_id, task_path))

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

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id`` is listed.

        Scans every thread (SCAN; an admin operation). Blobs no remaining checkpoint refers
        to are deleted too.

        Args:
            run_ids: the runs.

        Raises:
            redis.RedisError: Redis is unreachable or refused the call.
        """
        await self._run_async(self._op_delete_for_runs(run_ids))

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

        Not ``DeltaChannel``-aware: ``keep_latest`` keeps only the latest checkpoint of each
        namespace (threadline's graphs use no delta channels).

        Args:
            thread_ids: the threads.
            strategy: ``keep_latest`` (per namespace) or ``delete`` (everything).

        Raises:
            ValueError: unknown strategy.
            redis.RedisError: Redis is unreachable or refused the call.
        """
        await self._run_async(self._op_prune(thread_ids, strategy))

    # --- public API (sync twins; need sync_client) ------------------------------------------

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

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Sync :meth:`adelete_for_runs`."""
        self._run_sync(self._op_delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Sync :meth:`acopy_thread`."""
        self._run_sync(self._op_copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Sync :meth:`aprune`."""
        self._run_sync(self._op_prune(thread_ids, strategy))
