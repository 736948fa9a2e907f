"""The drivers of the ``redis`` saver: they perform the I/O steps an operation yields
(:mod:`~threadline.checkpoint.redis.steps`), synchronously or not.

An operation (:mod:`~threadline.checkpoint.redis.reads`, :mod:`~threadline.checkpoint.redis.writes`,
:mod:`~threadline.checkpoint.redis.upkeep`) is written once, as a generator; ``_run_sync`` and
``_run_async`` drive it to its result, ``_iter_sync`` and ``_iter_async`` to the items it emits.
A script call is an EVALSHA of the registered script (on one Redis, concurrent async calls share
round trips: :mod:`~threadline.checkpoint.redis.pipelining`); commands go in one pipeline, a
MULTI on one connection on a Cluster (every command of a step is on one thread's keys, so in one
slot); a SCAN runs on every master of a Cluster. Scripts Redis lost (a restart, SCRIPT FLUSH) are
loaded again, once, and the step repeated.

A mixin of :class:`~threadline.checkpoint.redis.saver.RedisCheckpointSaver`, which sets up the
clients and registers the scripts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.commands.core import Script as RedisScript
from redis.exceptions import NoScriptError

from threadline import redis_client
from threadline.checkpoint.redis.pipelining import ScriptPipelining
from threadline.checkpoint.redis.steps import Commands, Emit, Op, Scan, Script


class _Drivers:
    """The drivers of :class:`~threadline.checkpoint.redis.saver.RedisCheckpointSaver`."""

    # Of the saver (its constructor):
    _client: aioredis.Redis
    _sync_client: redis.Redis | None
    _scripts: dict[str, AsyncScript]
    _sync_scripts: dict[str, RedisScript]
    _pipelining: ScriptPipelining | None

    def _io_sync(self, step: Script | Commands | Scan) -> Any:
        if self._sync_client is None:
            raise RuntimeError(
                "this RedisCheckpointSaver has no sync_client: use the async methods, or "
                "construct it with sync_client= (from_url does)"
            )
        if isinstance(step, Scan):  # a Cluster client scans every master
            return list(self._sync_client.scan_iter(match=step.pattern, count=1000))
        scripts = self._sync_scripts
        if isinstance(step, Script):
            return scripts[step.name](keys=step.keys, args=step.args)
        try:
            return self._pipeline(self._sync_client, step).execute()
        except NoScriptError:  # Redis restarted or flushed its scripts: load them, once
            for script in scripts.values():
                self._sync_client.script_load(script.script)
            return self._pipeline(self._sync_client, step).execute()

    async def _io_async(self, step: Script | Commands | Scan) -> Any:
        if isinstance(step, Scan):  # a Cluster client scans every master
            return [k async for k in self._client.scan_iter(match=step.pattern, count=1000)]
        scripts = self._scripts
        if isinstance(step, Script):
            if self._pipelining is not None:
                return await self._pipelining.run(scripts[step.name], step.keys, step.args)
            return await scripts[step.name](keys=step.keys, args=step.args)
        try:
            return await self._execute_async(step)
        except NoScriptError:  # see _io_sync; the failed MULTI wrote at most unreferenced blobs
            for script in scripts.values():
                await self._client.script_load(script.script)
            return await self._execute_async(step)

    async def _execute_async(self, step: Commands) -> Any:
        if step.transaction and redis_client.is_cluster(self._client):
            # MULTI on a Cluster: see redis_client.on_one_connection (every command of a step
            # is on one thread's keys, so in one slot).
            first = step.commands[0]
            key = first.keys[0] if isinstance(first, Script) else first[1]
            raw = [self._raw(c) if isinstance(c, Script) else c for c in step.commands]
            return await redis_client.on_one_connection(self._client, key, *raw, transaction=True)
        return await self._pipeline(self._client, step).execute()

    def _raw(self, command: Script) -> tuple[Any, ...]:
        sha = self._scripts[command.name].sha
        return ("EVALSHA", sha, len(command.keys), *command.keys, *command.args)

    def _pipeline(self, client: Any, step: Commands) -> Any:
        # Scripts go in as raw EVALSHA: redis-py's Script-in-pipeline support would send a
        # SCRIPT EXISTS round trip before every execute.
        pipe = client.pipeline(transaction=step.transaction)
        for command in step.commands:
            pipe.execute_command(*(self._raw(command) if isinstance(command, Script) else command))
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
