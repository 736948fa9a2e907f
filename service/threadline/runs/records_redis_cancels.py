"""The cancel requests that runs of this process wait for, looked for together: one poller per
Redis record store (:class:`threadline.runs.records_redis.RedisRecordStore`).

Polled, not BLPOPed: a run ends by cancelling its wait, and cancelling a blocking command makes
redis-py drop its connection (a reconnect per run). One poller per process looks for every
waiting run's request (and, for a run that asks, for a client streaming it) in one round trip
every CANCEL_POLL_SECONDS: with a command per run, runs that outlived one interval (all of them
at concurrency 32 in make bench-api, where a run takes ~200 ms) cost a round trip each per
interval. A cancel, or a client, is seen within CANCEL_POLL_SECONDS.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import redis.asyncio as aioredis

from threadline.redis_keys import run_cancel_key, run_watch_key
from threadline.runs import records_redis_codec as codec

# Between two looks for a cancel request of a running run (and for a client streaming it).
CANCEL_POLL_SECONDS = 0.2


class CancelPoller:
    """Waits for runs' cancel requests (``tl:{T}:run:R:cancel``), polling them in one pipeline.

    Args:
        client: the checkpoint Redis (the store's client).
    """

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._waits: dict[tuple[str, str], _CancelWait] = {}
        self._task: asyncio.Task[None] | None = None

    async def wait(self, thread_id: str, run_id: str, on_watched: Callable[[], None] | None = None) -> str:
        """The action of the run's first cancel request, once one is found.

        Args:
            on_watched: called once when a client streams the run.
        """
        loop = asyncio.get_running_loop()
        key = (thread_id, run_id)
        wait = self._waits.get(key)
        if wait is None or wait.found.get_loop() is not loop:
            wait = self._waits[key] = _CancelWait(loop.create_future())
        wait.waiters += 1
        if on_watched is not None:
            wait.on_watched.append(on_watched)
        task = self._task
        if task is None or task.done() or task.get_loop() is not loop:
            self._task = loop.create_task(self._poll(), name="run-cancel-poller")
        try:
            # Shielded: one waiter going away must not cancel the others' future.
            return await asyncio.shield(wait.found)
        finally:
            wait.waiters -= 1
            if on_watched is not None and on_watched in wait.on_watched:
                wait.on_watched.remove(on_watched)
            if not wait.waiters and self._waits.get(key) is wait:
                del self._waits[key]

    async def _poll(self) -> None:
        """Until no run waits: every CANCEL_POLL_SECONDS, the first cancel request of every
        waiting run, and whether a client streams the runs that want to know, in one pipeline.
        A store that fails is waited out (the runs go on)."""
        while self._waits:
            await asyncio.sleep(CANCEL_POLL_SECONDS)
            waits = [
                (key, wait, bool(wait.on_watched))
                for key, wait in self._waits.items()
                if not wait.found.done()
            ]
            if not waits:
                continue
            try:
                async with self._client.pipeline(transaction=False) as pipe:
                    for (thread_id, run_id), _, asks in waits:
                        pipe.lindex(run_cancel_key(thread_id, run_id), 0)
                        if asks:
                            pipe.exists(run_watch_key(thread_id, run_id))
                    replies = iter(await pipe.execute())
            except Exception:  # Redis away (restarting): the next poll may get through
                continue
            for _, wait, asks in waits:
                action = next(replies)
                if asks and next(replies):
                    watched, wait.on_watched = wait.on_watched, []
                    for tell in watched:
                        tell()
                if action is not None and not wait.found.done():
                    wait.found.set_result(codec.cancel_action(action))


@dataclass
class _CancelWait:
    """Runs waiting for one run's cancel request: the action once found, and how many wait."""

    found: asyncio.Future[str]
    waiters: int = 0
    # Told once when a client streams the run (then dropped): see CancelPoller.wait.
    on_watched: list[Callable[[], None]] = field(default_factory=list)
