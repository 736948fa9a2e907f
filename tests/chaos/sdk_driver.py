"""The chaos driver's LangGraph-API mode: concurrent threads driven by ``langgraph-sdk``, each a
sequence of runs of the ``steps`` test graph (``tests/integration/graphs/steps.py``: every step
appends ``<tag><n>`` to ``done``), mixing

* ``background`` runs (``runs.create`` + ``runs.join``),
* ``stream`` runs (``runs.stream``; cut by a kill, rejoined on another replica with
  ``Last-Event-ID``),
* ``ask`` runs that stop at an ``interrupt()`` and are resumed a little later, on any replica,
  with their own answer (``Command(resume=...)``),
* ``double`` texts: a second run while the first is in flight, with a random
  ``multitask_strategy`` (enqueue, reject, interrupt, rollback),
* ``cancel``: a long run cancelled from another replica (action interrupt or rollback).

Every request goes to the next endpoint (round robin, like a Service) and is retried on another
one when the connection breaks or the answer is a 5xx. Every run is ``stream_resumable``: a
cut stream rejoins from its last event id, and the takeover and cancel timings replay each run's
events after it ended, which a server keeps only for resumable runs (as langgraph-api). A create
whose answer was lost is looked up by its tag (run metadata) before it is sent again, so a run is
never created twice.

Verdict (:meth:`SdkDriver.verdict`), per thread, from what the stores hold at the end: ``done``
is exactly the concatenation of every run's entries in acceptance order, each run's entries
being all its steps (success), none (rolled back, rejected) or a prefix (interrupted) as its
strategy demands; each run ended exactly once with the status it must have; no run left
pending or running; every interrupt answered once with its own answer.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from langgraph_sdk import get_client
from langgraph_sdk.errors import APIConnectionError, ConflictError

from chaos.driver import Attempt, ChaosEvent, Endpoints, InFlight

GRAPH = "steps"
KINDS = ("background", "background", "stream", "stream", "ask", "double", "cancel")
STRATEGIES = ("enqueue", "reject", "interrupt", "rollback")
# The chaos events that may stop a run's executor (local processes, kind pods).
CHAOS_KINDS = ("kill", "pause", "term", "redis", "pod_delete", "scale_down")
# A cancel not answered within this went to a paused replica: sent again to another.
CANCEL_TIMEOUT = 2.0


@dataclass
class SdkConfig:
    threads: int
    runs: int  # plans per thread (a double text adds a second run)
    api_key: str
    seed: int | None = None
    steps: tuple[int, int] = (2, 4)
    delay: float = 0.08  # per step: a run takes ~0.2-0.4 s, so kills land mid-run
    think: tuple[float, float] = (0.05, 0.3)
    # Above a takeover (lease + sweep) and a pause, so a request to a paused replica is
    # answered after SIGCONT instead of being sent twice.
    request_timeout: float = 60.0


@dataclass
class Planned:
    """One run as the client accepted (or tried) it."""

    thread_id: str
    tag: str
    kind: str
    steps: int
    may: tuple[str, ...]  # what its entries may be: "full", "prefix", "none"
    statuses: tuple[str, ...]  # the run statuses its strategy allows
    strategy: str = "enqueue"
    ask: str | None = None  # an interrupt's question; its resume is a Planned of its own
    answer: str | None = None
    run_id: str | None = None
    endpoint: str | None = None
    rejected: bool = False
    created: float = 0.0  # wall clock
    ended: float = 0.0
    cancelled_at: float | None = None  # wall clock of the cancel request
    cancel_answered: float | None = None  # ... and of its answer


@dataclass
class SdkVerdict:
    runs: int
    rejected: int
    lost: int
    duplicated: int
    stuck: int
    wrong_status: int
    interrupts: int
    unanswered: int
    takeover_seconds: list[float]
    cancel_seconds: list[float]  # cancels of runs no chaos event touched
    cancel_chaos_seconds: list[float]  # cancels of runs whose replica was killed, paused ...
    problems: list[str]
    elapsed: float

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.stuck or self.wrong_status or self.unanswered)

    def percentile(self, values: list[float], q: float) -> float | None:
        if not values:
            return None
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]

    def summary(self, label: str, counts: dict[str, int]) -> str:
        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.2f}s"

        t, c, cc = self.takeover_seconds, self.cancel_seconds, self.cancel_chaos_seconds
        return (
            f"{label}: {'PASS' if self.ok else 'FAIL'} runs={self.runs} (rejected {self.rejected}) "
            f"kills={counts.get('kills', 0)} pauses={counts.get('pauses', 0)} "
            f"terms={counts.get('terms', 0)} redis_restarts={counts.get('redis_restarts', 0)} "
            f"lost={self.lost} duplicated={self.duplicated} stuck={self.stuck} "
            f"wrong_status={self.wrong_status} interrupts={self.interrupts} unanswered={self.unanswered} "
            f"takeover p50={fmt(self.percentile(t, 50))} p99={fmt(self.percentile(t, 99))} (n={len(t)}) "
            f"cancel p50={fmt(self.percentile(c, 50))} p99={fmt(self.percentile(c, 99))} (n={len(c)}; "
            f"under chaos p99={fmt(self.percentile(cc, 99))} n={len(cc)}) "
            f"elapsed={self.elapsed:.0f}s"
        )


_RETRYABLE = (httpx.TransportError, httpx.TimeoutException, APIConnectionError)


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, _RETRYABLE):
        return True
    # The SDK raises plain httpx errors too (its join reconnects on its own first).
    return isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code >= 500


def _entry_ms(event_id: str | None) -> float | None:
    """Wall-clock seconds of a Redis stream entry id (``<ms>-<seq>``)."""
    head = (event_id or "").split("-", 1)[0]
    return int(head) / 1000 if head.isdigit() else None


class SdkDriver:
    """Drives :class:`SdkConfig` traffic at ``endpoints``; :attr:`inflight` names the replicas
    executing a run right now (the chaos controller's targets)."""

    def __init__(self, endpoints: Endpoints, config: SdkConfig, log: Callable[[str], None] = print) -> None:
        self.endpoints = endpoints
        self.config = config
        self.log = log
        self.rng = random.Random(config.seed)
        self.inflight: dict[int, InFlight] = {}
        self.completed = 0
        self.started: float | None = None
        self.finished: float | None = None
        self.plans: dict[str, list[Planned]] = {}
        self.errors: list[str] = []
        self._clients: dict[str, Any] = {}
        # (seconds, thread, run) of every measured cancel: the slowest are printed, to look
        # them up in the replicas' logs.
        self.cancel_samples: list[tuple[float, str, str]] = []
        # (thread, run) of cancels answered only after their run had ended (see the verdict)
        self.late_cancels: list[tuple[str, str]] = []
        self._keys = iter(range(10**9))
        self._keep_going: Callable[[], bool] = lambda: False

    @property
    def planned(self) -> int:
        return self.config.threads * self.config.runs

    def client(self, url: str) -> Any:
        if url not in self._clients:
            self._clients[url] = get_client(
                url=url, api_key=self.config.api_key, timeout=httpx.Timeout(self.config.request_timeout)
            )
        return self._clients[url]

    async def call(self, fn: Callable[[Any], Awaitable[Any]], what: str, tries: int = 200) -> Any:
        """``fn(client)`` on the next endpoint, retried on another while it breaks or 5xxs."""
        delay = 0.05
        for _ in range(tries):
            url = self.endpoints.next()
            try:
                return await fn(self.client(url))
            except Exception as exc:
                if not _retryable(exc):
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        raise RuntimeError(f"{what}: no endpoint answered in {tries} tries")

    # -- runs --

    def _track(self, plan: Planned, url: str) -> int:
        key = next(self._keys)
        self.inflight[key] = InFlight(url, plan.tag, time.monotonic(), Attempt(url, time.monotonic()), True)
        return key

    def _untrack(self, key: int, ok: bool) -> None:
        if (flight := self.inflight.pop(key, None)) is not None:
            flight.attempt.outcome = "ok" if ok else "failed"
            flight.attempt.ended = time.monotonic()

    async def _find(self, plan: Planned) -> dict | None:
        runs = await self.call(lambda c: c.runs.list(plan.thread_id, limit=1000), "list runs")
        mine = [r for r in runs if (r.get("metadata") or {}).get("tag") == plan.tag]
        return mine[0] if mine else None

    async def create(self, plan: Planned, **kwargs: Any) -> dict | None:
        """Create the run once (None: rejected with 409)."""
        delay = 0.05
        while True:
            url = self.endpoints.next()
            plan.created = time.time()
            try:
                run = await self.client(url).runs.create(
                    plan.thread_id, GRAPH, metadata={"tag": plan.tag}, stream_resumable=True, **kwargs
                )
            except ConflictError:
                plan.rejected = True
                return None
            except Exception as exc:
                if not _retryable(exc):
                    raise
                run = await self._find(plan)
                if run is None:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
            plan.run_id, plan.endpoint = run["run_id"], url
            return run

    async def cancel(self, plan: Planned, action: str) -> None:
        """Cancel (idempotent) with a short timeout, retried on another replica: a paused one
        must not hold the request. The cancel time counts from the attempt that got through."""
        delay = 0.05
        while True:
            url = self.endpoints.next()
            plan.cancelled_at = time.time()
            request = self.client(url).runs.cancel(plan.thread_id, plan.run_id, action=action)
            try:
                await asyncio.wait_for(request, CANCEL_TIMEOUT)
                plan.cancel_answered = time.time()
                return
            except TimeoutError:
                pass
            except Exception as exc:
                if not _retryable(exc):
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def join(self, plan: Planned) -> dict:
        key = self._track(plan, plan.endpoint or "")
        try:
            result = await self.call(lambda c: c.runs.join(plan.thread_id, plan.run_id), "join")
        finally:
            plan.ended = time.time()
            self._untrack(key, True)
        return result

    async def stream(self, plan: Planned, body: dict) -> dict | None:
        """Stream the run; cut, rejoin it on another replica from the last event id seen."""
        last_id: str | None = None
        values: dict | None = None
        delay = 0.05
        while True:
            url = self.endpoints.next()
            client = self.client(url)
            key = self._track(plan, plan.endpoint or url)
            try:
                if plan.run_id is None:
                    plan.created = time.time()
                    parts = client.runs.stream(
                        plan.thread_id, GRAPH, input=body, metadata={"tag": plan.tag}, stream_mode="values",
                        stream_resumable=True,
                    )  # fmt: skip
                else:
                    parts = client.runs.join_stream(plan.thread_id, plan.run_id, last_event_id=last_id)
                async for part in parts:
                    if part.event == "metadata" and plan.run_id is None:
                        plan.run_id, plan.endpoint = part.data["run_id"], url
                    if part.id:
                        last_id = part.id
                    if part.event == "values":
                        values = part.data
                plan.ended = time.time()
                self._untrack(key, True)
                return values
            except Exception as exc:
                self._untrack(key, False)
                if not _retryable(exc):
                    raise
                if plan.run_id is None and (found := await self._find(plan)) is not None:
                    plan.run_id, plan.endpoint = found["run_id"], url
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    # -- one thread --

    def _steps(self) -> int:
        return self.rng.randint(*self.config.steps)

    async def _thread(self, index: int) -> None:
        thread = await self.call(lambda c: c.threads.create(metadata={"chaos": index}), "create thread")
        tid = thread["thread_id"]
        plans = self.plans.setdefault(tid, [])
        delay = self.config.delay
        for i in itertools.count():
            if i >= self.config.runs and not self._keep_going():
                break
            kind = self.rng.choice(KINDS)
            tag = f"r{i}."
            if kind in ("background", "stream"):
                plan = Planned(tid, tag, kind, self._steps(), ("full",), ("success",))
                plans.append(plan)
                body = {"steps": plan.steps, "delay": delay, "tag": tag}
                if kind == "stream":
                    await self.stream(plan, body)
                else:
                    await self.create(plan, input=body)
                    await self.join(plan)
            elif kind == "ask":
                # Ends at the interrupt: success with an __interrupt__ result (or interrupted).
                plan = Planned(tid, tag, kind, 1, ("full",), ("success", "interrupted"), ask=f"q{index}.{i}")
                plans.append(plan)
                await self.create(plan, input={"steps": 1, "delay": delay, "tag": tag, "ask": plan.ask})
                result = await self.join(plan)
                asked = (result.get("__interrupt__") or [{}])[0].get("value") or {}
                if asked.get("question") != plan.ask:
                    self.errors.append(f"{tid} {tag}: interrupt {asked!r}, expected question {plan.ask!r}")
                await asyncio.sleep(self.rng.uniform(*self.config.think))  # answered a little later
                resume = Planned(tid, f"{tag}resume", "resume", 0, ("none",), ("success",))
                resume.answer = f"a{index}.{i}"
                plans.append(resume)
                await self.create(resume, command={"resume": resume.answer})
                await self.join(resume)
            elif kind == "double":
                first = Planned(tid, tag, "first", self._steps() + 3, ("full",), ("success",))
                strategy = self.rng.choice(STRATEGIES)
                second = Planned(tid, f"r{i}b.", "second", self._steps(), ("full",), ("success",), strategy)
                if strategy == "interrupt":  # stopped before, during or after its steps
                    first.may, first.statuses = ("full", "prefix", "none"), ("success", "interrupted")
                elif strategy == "rollback":
                    first.may, first.statuses = ("full", "none"), ("success", "interrupted")
                elif strategy == "reject":
                    second.may = ("full", "none")
                plans += [first, second]
                await self.create(first, input={"steps": first.steps, "delay": delay, "tag": first.tag})
                await self.create(
                    second,
                    input={"steps": second.steps, "delay": delay, "tag": second.tag},
                    multitask_strategy=strategy,
                )
                await self.join(first)
                if not second.rejected:
                    await self.join(second)
            else:  # cancel
                action = self.rng.choice(("interrupt", "rollback"))
                # Interrupt keeps what was checkpointed (all of it when the cancel came after the
                # last step, before the end); rollback keeps nothing.
                plan = Planned(
                    tid, tag, "cancel", 30,
                    ("full", "prefix", "none") if action == "interrupt" else ("none",),
                    ("interrupted",), strategy=action,
                )  # fmt: skip
                plans.append(plan)
                await self.create(plan, input={"steps": plan.steps, "delay": delay, "tag": tag})
                await asyncio.sleep(self.rng.uniform(0.1, 0.5))
                await self.cancel(plan, action)
                await self.join(plan)
            self.completed += 1
            await asyncio.sleep(self.rng.uniform(*self.config.think))

    async def run(self, keep_going: Callable[[], bool] = lambda: False) -> None:
        """Drive every thread through its ``config.runs`` plans, and on past them for as long as
        ``keep_going()`` says (a chaos plan still under way: faster runs must not end the traffic
        before the chaos does)."""
        self._keep_going = keep_going
        self.started = time.monotonic()
        try:
            results = await asyncio.gather(
                *(self._thread(i) for i in range(self.config.threads)), return_exceptions=True
            )
        finally:
            self.finished = time.monotonic()
        for result in results:
            if isinstance(result, BaseException):
                self.errors.append(f"thread driver failed: {type(result).__name__}: {result}")

    # -- verdict --

    async def verdict(self, events: list[ChaosEvent]) -> SdkVerdict:
        """Read every thread back (on any replica) and judge it; ``events`` (the chaos
        controller's, monotonic clock) give the takeover times."""
        offset = time.time() - time.monotonic()
        lost = duplicated = stuck = wrong = unanswered = interrupts = runs = rejected = 0
        problems: list[str] = list(self.errors)
        cancels: list[float] = []
        cancels_chaos: list[float] = []
        takeovers: list[float] = []
        hits = [(e.time + offset, e.kind) for e in events if e.kind in CHAOS_KINDS]
        for tid, plans in self.plans.items():
            state = await self.call(lambda c, t=tid: c.threads.get_state(t), "state")
            values = state["values"] or {}
            done: list[str] = list(values.get("done") or [])
            answers: list[str] = list(values.get("answers") or [])
            records = await self.call(lambda c, t=tid: c.runs.list(t, limit=1000), "runs")
            by_tag: dict[str, list[dict]] = {}
            for record in records:
                by_tag.setdefault((record.get("metadata") or {}).get("tag", ""), []).append(record)
            for record in records:
                if record["status"] in ("pending", "running"):
                    stuck += 1
                    problems.append(f"{tid}: run {record['run_id']} still {record['status']}")
            # A cancelled run reads "interrupted" from its cancel on (as langgraph-api), before
            # it has stopped: one that never stopped keeps its thread busy.
            thread = await self.call(lambda c, t=tid: c.threads.get(t), "thread")
            if thread["status"] == "busy":
                stuck += 1
                problems.append(f"{tid}: thread still busy")
            expected: list[str] = []
            for plan in plans:
                if plan.rejected:
                    rejected += 1
                    if by_tag.get(plan.tag):
                        duplicated += 1
                        problems.append(f"{tid} {plan.tag}: rejected but stored")
                    continue
                runs += 1
                found = by_tag.get(plan.tag, [])
                if len(found) != 1:
                    if found:
                        duplicated += len(found) - 1
                    else:
                        lost += 1
                    problems.append(f"{tid} {plan.tag}: {len(found)} runs stored")
                    continue
                record = found[0]
                statuses, may = plan.statuses, plan.may
                if _ended_before_its_cancel(plan, record):
                    # Its cancel reached Redis only after the run's end (sent again after a
                    # timeout on a paused replica, while another replica finished the run): it
                    # was refused, as it must be, and the run stands as it ended.
                    statuses, may = (*statuses, "success"), (*may, "full")
                    self.late_cancels.append((tid, plan.run_id or ""))
                if record["status"] not in statuses:
                    wrong += 1
                    problems.append(
                        f"{tid} {plan.tag}: status {record['status']}, allowed {statuses}"
                        f" (updated {record['updated_at']}, cancel sent {plan.cancelled_at},"
                        f" answered {plan.cancel_answered})"
                    )
                mine = [d for d in done if d.startswith(plan.tag)]
                full = [f"{plan.tag}{n}" for n in range(1, plan.steps + 1)]
                shape = (
                    "full"
                    if mine == full
                    else "none"
                    if not mine
                    else "prefix"
                    if mine == full[: len(mine)]
                    else "bad"
                )
                if plan.steps == 0:
                    shape = "none" if not mine else "bad"
                if shape not in may:
                    if len(set(mine)) < len(mine):
                        duplicated += 1
                    else:
                        lost += 1
                    problems.append(f"{tid} {plan.tag}: entries {mine}, expected {may} of {full}")
                expected += mine
                if plan.answer is not None:
                    interrupts += 1
                    question = plan.tag.removesuffix("resume")
                    want = [a for a in answers if a.endswith(f"={plan.answer}")]
                    asked = next(p.ask for p in plans if p.tag == question)
                    if want != [f"{asked}={plan.answer}"]:
                        unanswered += 1
                        problems.append(
                            f"{tid} {plan.tag}: answers {answers}, expected {asked}={plan.answer}"
                        )
                hit = any(plan.created <= t <= plan.ended and k != "redis" for t, k in hits)
                if plan.run_id and (plan.cancelled_at or hit):
                    touched = any(plan.created <= t <= plan.ended for t, _ in hits)
                    await self._timings(plan, hits, takeovers, cancels_chaos if touched else cancels)
            if done != expected:
                extra = len(done) - len(set(done))
                duplicated += max(0, extra)
                problems.append(f"{tid}: done {done} is not the runs' entries in order {expected}")
        return SdkVerdict(
            runs, rejected, lost, duplicated, stuck, wrong, interrupts, unanswered, takeovers, cancels,
            cancels_chaos, problems, (self.finished or time.monotonic()) - (self.started or time.monotonic()),
        )  # fmt: skip

    async def _timings(
        self, plan: Planned, hits: list[tuple[float, str]], takeovers: list[float], cancels: list[float]
    ) -> None:
        """Takeover time (a chaos event on the run's replica → the next executor's metadata
        event) and cancel time (request → the run's cancellation event), from the event ids
        (Redis stream ids are wall-clock milliseconds of the one Redis)."""
        parts = await self.call(
            lambda c: _collect(c.runs.join_stream(plan.thread_id, plan.run_id, last_event_id="-1")), "events"
        )
        if plan.cancelled_at is not None:
            # A cancelled run streams no event of its stop (as langgraph-api): its recorded end
            # (the replica's clock, this machine's) is when it stopped and was settled.
            record = await self.call(lambda c: c.runs.get(plan.thread_id, plan.run_id), "run")
            if record["status"] == "interrupted":
                ended = datetime.fromisoformat(record["updated_at"]).timestamp()
                cancels.append(max(0.0, ended - plan.cancelled_at))
                self.cancel_samples.append((cancels[-1], plan.thread_id, plan.run_id or ""))
        taken = [
            (_entry_ms(p.id), p.data.get("attempt", 1))
            for p in parts
            if p.event == "metadata" and isinstance(p.data, dict)
        ]
        for at, attempt in taken:
            if attempt < 2 or at is None:
                continue
            before = [(t, k) for t, k in hits if plan.created <= t <= at]
            # After a Redis restart the executor itself runs again (no takeover): not counted.
            if before and max(before)[1] != "redis":
                takeovers.append(at - max(before)[0])


def _ended_before_its_cancel(plan: Planned, record: dict) -> bool:
    """Whether the run's recorded end (its replica's clock, this machine's) came before the
    answer to its cancel: only then may the cancel have been refused."""
    if plan.kind != "cancel" or plan.cancel_answered is None or record["status"] != "success":
        return False
    ended = datetime.fromisoformat(record["updated_at"]).timestamp()
    return ended <= plan.cancel_answered


async def _collect(parts: Any) -> list[Any]:
    return [p async for p in parts]


__all__ = ["SdkConfig", "SdkDriver", "SdkVerdict"]
