"""Script calls made in one event-loop iteration go to Redis in one pipeline.

Under load many runs write at once: at concurrency 32 in ``make bench-api`` a replica made ~11
script calls per run, each its own round trip, and redis-py spends ~50 us of Python per command
around the write and the read. Calls that come in while the loop runs one iteration are sent
together on the next (one write, one connection, their replies in order), which took ~0.9 ms
of CPU off each run there. A call alone in its iteration (a quiet replica) is sent by itself.

Each call keeps its own outcome: its reply, or its error (a refused script, a ``NOSCRIPT``
that is retried once the script is loaded, or the connection's error for every call of a
pipeline that failed). The commands are the saver's scripts, each atomic and safe to repeat,
so redis-py's one retry of a pipeline on a dropped connection is as safe as for one call. A
caller cancelled after its call was queued does not stop it (as with a command already sent).

Plain commands that are safe to repeat (a record's ``HGETALL``) go the same way
(:meth:`ScriptPipelining.command`). One instance per client is shared by whatever uses that
client (:func:`shared`: the LangGraph API's record store, the turn lease, the quotas), so the
calls of concurrent runs of every kind share round trips (issue 24).

Not for Redis Cluster, whose pipelines split by slot and node: there every call goes alone.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from threadline import redis_client

# A queued call: its script (None for a plain command), the command as sent, its reply.
_Call = tuple[AsyncScript | None, tuple[Any, ...], "asyncio.Future[Any]"]


class ScriptPipelining:
    """Sends the calls of :meth:`call`, :meth:`run` and :meth:`command` made within one loop
    iteration in one pipeline.

    Args:
        client: one Redis (not a Cluster).
        scripts: the scripts :meth:`call` runs by name.
    """

    def __init__(self, client: aioredis.Redis, scripts: dict[str, AsyncScript] | None = None) -> None:
        self._client = client
        self._scripts = scripts or {}
        self._queued: list[_Call] | None = None
        self._sending: set[asyncio.Task[None]] = set()

    async def call(self, name: str, keys: list[Any], args: list[Any]) -> Any:
        """Run script ``name`` with the next batch; returns its reply.

        Raises:
            redis.RedisError: the script's error, or the connection's.
        """
        return await self.run(self._scripts[name], keys, args)

    async def run(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
        """Run ``script`` (registered on this client) with the next batch; as :meth:`call`."""
        return await self._queue(script, ("EVALSHA", script.sha, len(keys), *keys, *args))

    async def command(self, *args: Any) -> Any:
        """Send a command (one that is safe to repeat) with the next batch; its reply as
        ``execute_command`` answers it."""
        return await self._queue(None, args)

    def _queue(self, script: AsyncScript | None, command: tuple[Any, ...]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        reply = loop.create_future()
        if self._queued is None:
            self._queued = []
            loop.call_soon(self._send_queued)
        self._queued.append((script, command, reply))
        return reply

    def _send_queued(self) -> None:
        batch, self._queued = self._queued or [], None
        # A task of its own: the batch goes even if the caller that started it is cancelled.
        task = asyncio.get_running_loop().create_task(self._send(batch), name="redis-script-batch")
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[_Call]) -> None:
        try:
            if len(batch) == 1:
                script, command, reply = batch[0]
                if script is None:
                    result = await self._client.execute_command(*command)
                else:
                    result = await script(keys=command[3 : 3 + command[2]], args=command[3 + command[2] :])
                _settle(reply, result)
                return
            replies = await self._pipeline(batch)
            unknown = [i for i, result in enumerate(replies) if isinstance(result, NoScriptError)]
            if unknown:  # Redis restarted or flushed its scripts: load them, send those again
                for script in {batch[i][0] for i in unknown}:
                    assert script is not None
                    await self._client.script_load(script.script)
                for i, result in zip(unknown, await self._pipeline([batch[i] for i in unknown]), strict=True):
                    replies[i] = result
            for (*_, reply), result in zip(batch, replies, strict=True):
                _settle(reply, result)
        except Exception as exc:
            for *_, reply in batch:
                _settle(reply, exc)
        except BaseException:  # cancelled (the process is stopping): so are its callers
            for *_, reply in batch:
                reply.cancel()
            raise

    async def _pipeline(self, batch: list[_Call]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for _, command, _ in batch:
            pipe.execute_command(*command)
        return await pipe.execute(raise_on_error=False)

    async def aclose(self) -> None:
        """Wait for the batches on their way."""
        if self._sending:
            await asyncio.wait(self._sending)


_SHARED: weakref.WeakKeyDictionary[Any, ScriptPipelining] = weakref.WeakKeyDictionary()


def shared(client: Any) -> ScriptPipelining | None:
    """The one batcher of ``client`` (None on a Cluster: every call goes alone there)."""
    if redis_client.is_cluster(client):
        return None
    if (found := _SHARED.get(client)) is None:
        found = _SHARED[client] = ScriptPipelining(client)
    return found


def _settle(reply: asyncio.Future[Any], result: Any) -> None:
    if reply.done():  # its caller was cancelled
        return
    if isinstance(result, Exception):
        reply.set_exception(result)
    else:
        reply.set_result(result)
