"""Script calls go to Redis in batches: one write, one connection, their replies in order.

Under load many runs write at once: at concurrency 32 in ``make bench-api`` a replica made ~11
script calls per run, each its own round trip, and redis-py spends ~50 us of Python per command
around the write and the read. A batcher sends the calls made while the event loop runs one
iteration together on the next, which took ~0.9 ms of CPU off each run there. It keeps one
batch on its way at a time, on a connection of its own: what is called meanwhile waits for it
and goes as the next batch (so a busier replica sends larger batches, not more of them), and
no batch takes a connection from the pool (issue 24). A call alone (a quiet replica) is sent
by itself.

Each call keeps its own outcome: its reply, or its error (a refused script, a ``NOSCRIPT``
that is retried once the script is loaded, or the connection's error for every call of a
batch that failed). The commands are the saver's scripts, each atomic and safe to repeat, so
the one retry of a batch on a dropped connection (the client's retry policy, as redis-py
repeats a pipeline) is as safe as for one call. A caller cancelled after its call was queued
does not stop it (as with a command already sent).

Plain commands that are safe to repeat (a record's ``HGETALL``) go the same way
(:meth:`ScriptPipelining.command`). One instance per client is shared by whatever uses that
client (:func:`shared`: the checkpoint saver, the LangGraph API's record store, the turn
lease, the quotas), so the calls of concurrent runs of every kind share round trips (issue 24).

Not for Redis Cluster, whose pipelines split by slot and node: there every call goes alone.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from typing import Any

import hiredis
import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.connection import Connection
from redis.commands.core import AsyncScript
from redis.exceptions import DataError, NoScriptError, ResponseError

from threadline import redis_client

# A command as sent: its name (for its reply's parsing) and its RESP bytes.
_Packed = tuple[str, bytes]
# A queued call: its script (None for a plain command), its command, its reply.
_Call = tuple[AsyncScript | None, _Packed, "asyncio.Future[Any]"]


class ScriptPipelining:
    """Sends the calls of :meth:`run` and :meth:`command` in batches, one batch at a time on
    a connection of its own.

    Args:
        client: one Redis (not a Cluster).
    """

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._queued: list[_Call] = []
        self._sender: asyncio.Task[None] | None = None
        self._connection: Connection | None = None

    async def run(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
        """Run ``script`` (registered on this client) with the next batch; returns its reply.

        Raises:
            redis.RedisError: the script's error, or the connection's.
        """
        return await self._queue(script, ("EVALSHA", script.sha, len(keys), *keys, *args))

    async def command(self, *args: Any) -> Any:
        """Send a command (one that is safe to repeat) with the next batch; its reply as
        ``execute_command`` answers it."""
        return await self._queue(None, args)

    def _queue(self, script: AsyncScript | None, command: tuple[Any, ...]) -> asyncio.Future[Any]:
        """Raises DataError: an argument Redis cannot be sent (this call only)."""
        packed = _pack(command)
        loop = asyncio.get_running_loop()
        reply = loop.create_future()
        self._queued.append((script, packed, reply))
        if self._sender is None:
            # A task of its own: the batch goes even if the caller that started it is
            # cancelled. It starts on the loop's next iteration, so this one's calls join it.
            self._sender = loop.create_task(self._send_queued(), name="redis-script-batch")
        return reply

    async def _send_queued(self) -> None:
        """Batches until none is waiting: what is queued while one is on its way goes next."""
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                await self._send(batch)
        except BaseException:  # cancelled (the process is stopping): so are the callers waiting
            for *_, reply in self._queued:
                reply.cancel()
            self._queued = []
            raise
        finally:
            self._sender = None

    async def _send(self, batch: list[_Call]) -> None:
        try:
            replies = await self._round_trip([command for _, command, _ in batch])
            unknown = [i for i, result in enumerate(replies) if isinstance(result, NoScriptError)]
            if unknown:
                # Redis restarted or flushed its scripts: load them and send those calls again,
                # in one round trip (the loads' replies are their SHA1s).
                lost = {batch[i][0] for i in unknown}
                loads = [_pack(("SCRIPT", "LOAD", script.script)) for script in lost if script is not None]
                again = await self._round_trip([*loads, *(batch[i][1] for i in unknown)])
                for i, result in zip(unknown, again[len(loads) :], strict=True):
                    replies[i] = result
            for (*_, reply), result in zip(batch, replies, strict=True):
                _settle(reply, result)
        except Exception as exc:
            for *_, reply in batch:
                _settle(reply, exc)
        except BaseException:
            for *_, reply in batch:
                reply.cancel()
            raise

    async def _round_trip(self, commands: list[_Packed]) -> list[Any]:
        """The replies of ``commands`` (a command's error as its reply), from one write and its
        reads on this batcher's connection; all of them again once if the connection fails (as
        redis-py repeats a pipeline: its retry policy). Not redis-py's Pipeline, which costs
        ~50 µs more per round trip in its bookkeeping (measured: 113 against 64 µs for 8 GETs)."""
        if self._connection is None:
            self._connection = await self._client.connection_pool.get_connection()
        connection = self._connection
        packed = b"".join([command for _, command in commands])

        async def attempt() -> list[Any]:
            try:
                await connection.send_packed_command(packed)
                # One deadline for the batch's replies, the connection's socket timeout, rather
                # than redis-py's one per reply (~3 µs each, measured).
                try:
                    async with asyncio.timeout(connection.socket_timeout):
                        return [await self._reply(connection, name) for name, _ in commands]
                except TimeoutError:
                    raise redis.exceptions.TimeoutError("Timeout reading from Redis") from None
            except BaseException:
                # Replies may be left unread on it (a timeout, a cancel): never reused as it is.
                await connection.disconnect()
                raise

        async def failed(_error: Exception) -> None:
            await connection.disconnect()

        return await connection.retry.call_with_retry(attempt, failed)

    async def _reply(self, connection: Connection, name: str) -> Any:
        """The next reply as the client's ``parse_response`` makes it (its response callback,
        ``HGETALL``'s dict say), read without a deadline of its own; an error as the reply."""
        try:
            reply = await connection.read_response(timeout=math.inf)
        except ResponseError as error:
            return error
        parse = self._client.response_callbacks.get(name)
        return reply if parse is None else parse(reply)

    async def aclose(self) -> None:
        """Wait for the batches on their way, then give the connection back."""
        if self._sender is not None:
            await asyncio.wait([self._sender])
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await self._client.connection_pool.release(connection)


_SHARED: weakref.WeakKeyDictionary[Any, ScriptPipelining] = weakref.WeakKeyDictionary()


def shared(client: Any) -> ScriptPipelining | None:
    """The one batcher of ``client`` (None on a Cluster: every call goes alone there)."""
    if redis_client.is_cluster(client):
        return None
    if (found := _SHARED.get(client)) is None:
        found = _SHARED[client] = ScriptPipelining(client)
    return found


def _pack(command: tuple[Any, ...]) -> _Packed:
    """``command`` in RESP, packed by hiredis directly: redis-py's ``pack_commands`` checks and
    converts each argument in Python first, ~6 µs more a script call of ~25 arguments (24.7
    against 7.0 µs for three, measured); a run makes ~10.

    Raises:
        DataError: an argument hiredis cannot send (as redis-py raises it).
    """
    try:
        return command[0], hiredis.pack_command(command)
    except TypeError as exc:
        raise DataError(str(exc)) from None


def _settle(reply: asyncio.Future[Any], result: Any) -> None:
    if reply.done():  # its caller was cancelled
        return
    if isinstance(result, Exception):
        reply.set_exception(result)
    else:
        reply.set_result(result)
