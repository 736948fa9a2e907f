"""The takeover of orphaned runs (ADR 0010): a run whose executor's heartbeat lapsed (its
replica died, or was paused past its lease) is claimed by one replica — its sweep, or whoever
waits for the run — and executed again there from the thread's last checkpoint. A part of
:class:`threadline.runs.executor.Executor`, which it is mixed into.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid

from threadline import metrics
from threadline.runs import wire
from threadline.runs.errors import NotFound
from threadline.runs.records import ACTIVE_RUN_STATUSES

# The executor's logger: a takeover is logged as the executor's, as before it moved here.
log = logging.getLogger("threadline.runs.executor")

# Between two orphan sweeps of a replica (jittered ±50 %): a dead executor's run is taken over
# within heartbeat TTL + this, the lease expiring at the same time (target: lease + 1 s).
SWEEP_SECONDS = 0.5
# Heartbeats a sweep looks at together (their reads share a round trip).
SWEEP_PAGE = 100


class Takeover:
    """The executor's orphan takeover: :meth:`adopt_if_orphan` and the sweep that calls it.
    Uses the executor's records, assistants, heartbeat and sweep periods, ``_start`` and
    ``_finish``."""

    async def adopt_if_orphan(self, thread_id: str, run_id: str) -> bool:
        """Take over a pending or running run whose executor is gone and execute it here from
        its last checkpoint; True if this replica took it.

        Any replica may try (the sweep, a waiter on the thread's queue, a joiner): the claim is
        atomic, so exactly one executor owns the run at a time.
        """
        if await self.records.alive(thread_id, run_id):
            return False
        executor = uuid.uuid4().hex
        attempt = await self.records.claim(thread_id, run_id, self.heartbeat_seconds, executor)
        run = await self.records.get_run(thread_id, run_id)
        if not attempt:
            if run is None or run.status not in ACTIVE_RUN_STATUSES:
                await self.records.forget_active(thread_id, run_id)
            return False
        if run is None:  # deleted meanwhile
            return False
        log.warning(
            "taking over a run whose replica stopped",
            extra={"run_id": run_id, "thread_id": thread_id, "attempt": attempt},
        )
        metrics.RUN_TAKEOVERS.inc()
        try:
            assistant = await self.assistants.for_run(run)
        except NotFound as gone:  # not served here (a mixed rollout), or its assistant deleted
            error = {"error": "GraphNotFound", "message": f"assistant {run.assistant_id!r}: {gone.message}"}
            events = [("error", wire.dumps(error))]
            await self._finish(
                run, "error", "error", wire.dumps({"__error__": error}), executor, events=events
            )
            return True
        self._start(run, assistant, executor, attempt)
        return True

    def start_sweep(self) -> None:
        """Start this replica's orphan sweep (stopped by :meth:`aclose`)."""
        if self._sweeper is None and self.records.shared:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="runs-sweep")

    async def _sweep_forever(self) -> None:
        while True:
            # Jittered, so the replicas' sweeps spread out instead of racing for the same claim.
            await asyncio.sleep(self.sweep_seconds * random.uniform(0.5, 1.5))
            try:
                await self.sweep()
            except Exception as exc:  # the store is away: the next sweep may get through
                log.warning("run sweep failed", extra={"error": type(exc).__name__})

    async def sweep(self) -> int:
        """Take over every orphaned run (one whose executor stopped); returns how many this
        replica took. Ended runs are dropped from the active index on the way."""
        taken = 0
        active = await self.records.active_runs()
        for start in range(0, len(active), SWEEP_PAGE):
            page = active[start : start + SWEEP_PAGE]
            # Looked at side by side, so a store with a batcher reads them in one round trip
            # (one after another, a sweep at concurrency 32 cost ~30 round trips twice a second).
            alive = await asyncio.gather(
                *(self.records.alive(thread_id, run_id) for thread_id, run_id in page)
            )
            for (thread_id, run_id), beating in zip(page, alive, strict=True):
                if not beating and await self.adopt_if_orphan(thread_id, run_id):
                    taken += 1
        return taken
