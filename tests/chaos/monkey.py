"""The local chaos controller: kills, pauses and terminates replicas mid-stream, restarts Redis.

It runs next to the :class:`~chaos.driver.Driver` in the same event loop and picks its targets
from the driver's in-flight attempts, so every SIGKILL, SIGSTOP and SIGTERM lands on a replica
that is streaming a reply at that moment. What it did is counted (:attr:`Monkey.counts`) and
logged as :class:`~chaos.driver.ChaosEvent` for the verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from chaos.cluster import LocalCluster, ProcessReplica
from chaos.driver import Attempt, ChaosEvent, Driver


@dataclass
class Drain:
    """What a SIGTERM'd replica did with the streams it was serving."""

    replica: str
    in_flight: list[Attempt]
    exit_code: int | None = None
    seconds: float | None = None

    @property
    def finished(self) -> int:
        return sum(1 for a in self.in_flight if a.outcome == "ok")


@dataclass
class Monkey:
    """Chaos for a :class:`LocalCluster` under a running :class:`Driver`.

    Args:
        pause_seconds: how long a SIGSTOP lasts; longer than the client's stall timeout plus
            the lease, so the paused turn is taken over and finished elsewhere before the
            paused replica wakes up and tries to write (which fencing must refuse).
        gap: seconds between two actions (±20 %). Longer than one recovery (lease + a re-run,
            ~1.5 s) so that a recovery time measures one failure, not two in a row.
        start_fraction: share of the planned turns completed before the first action.
        unready_after: seconds after a SIGKILL, SIGSTOP or SIGTERM until the replica leaves
            the endpoints (a Service's endpoints lag the pod: readiness probe failing, kubelet
            reporting); a paused one comes back on SIGCONT, a replacement when it is ready.
    """

    cluster: LocalCluster
    driver: Driver
    pause_seconds: float
    drain_timeout: float
    gap: float = 1.0
    start_fraction: float = 0.05
    unready_after: float = 1.0
    seed: int | None = None
    log: Callable[[str], None] = print
    counts: dict[str, int] = field(
        default_factory=lambda: {
            "kills": 0,
            "pauses": 0,
            "terms": 0,
            "redis_restarts": 0,
        }
    )
    events: list[ChaosEvent] = field(default_factory=list)
    drains: list[Drain] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    streams_cut: int = 0  # streaming attempts cut by a SIGKILL
    replacement_seconds: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._busy: set[str] = set()  # urls paused or terminating
        self._tasks: list[asyncio.Task] = []

    # ---------------------------------------------------------------------------------------
    def _usable(self) -> list[ProcessReplica]:
        return [r for r in self.cluster.live() if r.url not in self._busy]

    def _streaming(self, url: str) -> list[Attempt]:
        return [f.attempt for f in self.driver.inflight.values() if f.endpoint == url and f.streaming]

    def _done(self) -> bool:
        return self.driver.finished is not None

    async def _target(self, min_usable: int, timeout: float = 60.0) -> ProcessReplica | None:
        """A usable replica streaming a reply right now, once ``min_usable`` are usable."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._done():
            usable = self._usable()
            if len(usable) >= min_usable:
                streaming = [r for r in usable if self._streaming(r.url)]
                if streaming:
                    return self._rng.choice(streaming)
            await asyncio.sleep(0.01)
        if not self._done():
            self.errors.append(f"no mid-stream target with {min_usable} usable replicas in {timeout}s")
        return None

    def _event(self, kind: str, url: str | None) -> None:
        self.events.append(ChaosEvent(time.monotonic(), kind, url))

    async def _replace(self, old: ProcessReplica) -> None:
        try:
            new = await self.cluster.replace(old)
            self.replacement_seconds.append(getattr(new, "startup_seconds", 0.0))
        except Exception as exc:
            self.errors.append(f"replacement for {old.name} failed: {type(exc).__name__}: {exc}")

    # ---------------------------------------------------------------------------------------
    async def kill(self) -> bool:
        # Keep at least one replica serving: kill only while two are usable.
        target = await self._target(min_usable=2)
        if target is None:
            return False
        cut = len(self._streaming(target.url))
        self._event("kill", target.url)  # before the signal: the driver sees the reset at once
        await asyncio.to_thread(target.kill)
        self.counts["kills"] += 1
        self.streams_cut += cut
        self.log(f"chaos: SIGKILL {target.name} cutting {cut} stream(s)")
        self._tasks.append(asyncio.create_task(self._unready_later(target.url)))
        self._tasks.append(asyncio.create_task(self._replace(target)))
        return True

    async def _unready_later(self, url: str) -> None:
        """Drop ``url`` from the endpoints after the readiness lag (if still there)."""
        await asyncio.sleep(self.unready_after)
        if url in self.cluster.endpoints.urls and len(self.cluster.endpoints.urls) > 1:
            self.cluster.endpoints.remove(url)

    async def pause(self) -> bool:
        target = await self._target(min_usable=2)
        if target is None:
            return False
        url = target.url
        self._busy.add(url)
        self._event("pause", url)
        target.signal(signal.SIGSTOP)
        self.log(f"chaos: SIGSTOP {target.name} for {self.pause_seconds:.1f}s")
        try:
            await asyncio.sleep(self.unready_after)
            self.cluster.endpoints.remove(url)
            await asyncio.sleep(self.pause_seconds - self.unready_after)
        finally:
            target.signal(signal.SIGCONT)
            self._busy.discard(url)
        self.counts["pauses"] += 1
        await asyncio.to_thread(target.wait_ready, 30.0)
        if url in self.cluster.replicas and url not in self.cluster.endpoints.urls:
            self.cluster.endpoints.add(url)
        return True

    async def term(self) -> bool:
        target = await self._target(min_usable=2)
        if target is None:
            return False
        url = target.url
        drain = Drain(target.name, self._streaming(url))
        self._busy.add(url)
        started = time.monotonic()
        self._event("term", url)
        target.signal(signal.SIGTERM)
        self.counts["terms"] += 1
        self.log(f"chaos: SIGTERM {target.name} with {len(drain.in_flight)} stream(s) in flight")

        async def finish() -> None:
            drain.exit_code = await asyncio.to_thread(target.wait, self.drain_timeout)
            drain.seconds = time.monotonic() - started
            self.drains.append(drain)
            self._busy.discard(url)
            if drain.exit_code is None:
                self.errors.append(f"{target.name} still running {self.drain_timeout}s after SIGTERM")
                await asyncio.to_thread(target.kill)
            await self._replace(target)

        self._tasks.append(asyncio.create_task(self._unready_later(url)))
        self._tasks.append(asyncio.create_task(finish()))
        return True

    async def restart_redis(self) -> bool:
        hard = self.counts["redis_restarts"] % 2 == 0  # first a crash (SIGKILL), then a stop
        self._event("redis", None)
        started = time.monotonic()
        redis = self.cluster.redis
        await asyncio.to_thread(redis.kill if hard else redis.stop)
        await asyncio.to_thread(redis.start)
        self.counts["redis_restarts"] += 1
        self.log(
            f"chaos: Redis {'SIGKILL' if hard else 'SIGTERM'} + restart in {time.monotonic() - started:.2f}s"
        )
        return True

    # ---------------------------------------------------------------------------------------
    async def run(self, plan: list[str]) -> None:
        """Carry out ``plan`` (action names) one after the other while the driver runs."""
        actions = {
            "kill": self.kill,
            "pause": self.pause,
            "term": self.term,
            "redis": self.restart_redis,
        }
        threshold = self.start_fraction * self.driver.planned
        while self.driver.completed < threshold and not self._done():
            await asyncio.sleep(0.05)
        for name in plan:
            if self._done():
                self.errors.append(f"traffic ended before the chaos plan did (at {name!r})")
                break
            await actions[name]()
            await asyncio.sleep(self.gap * self._rng.uniform(0.8, 1.2))
        await self.settle()

    async def settle(self) -> None:
        """Wait for replacements and drains under way."""
        if self._tasks:
            await asyncio.gather(*self._tasks)
            self._tasks.clear()

    async def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def make_plan(kills: int, pauses: int, terms: int, redis_restarts: int, seed: int | None) -> list[str]:
    """The actions in a random order, Redis restarts kept apart from the ends."""
    rng = random.Random(seed)
    plan = ["kill"] * kills + ["pause"] * pauses + ["term"] * terms
    rng.shuffle(plan)
    for i in range(redis_restarts):
        plan.insert(round((i + 1) * len(plan) / (redis_restarts + 1)), "redis")
    return plan
