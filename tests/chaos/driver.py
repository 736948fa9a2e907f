"""Continuity driver and verdict: one module for the local chaos tests, kind e2e and the CLI.

The driver holds C concurrent conversations of T turns each (asyncio + httpx). Every message
carries its own id; the reply is streamed (SSE) and, on any failure (connection refused or
reset, timeout, a stalled stream, 5xx, 409, a stream that ends without ``done``), the SAME
message id is retried with backoff against the next endpoint, round robin like a Kubernetes
Service. The client keeps its own record of the conversation (its messages and the replies it
received) and checks each reply against what the built-in model must answer given that record.

At the end every thread is read back (``GET /v1/threads/{id}``) and :func:`judge` — a pure
function over (client records, server threads) — counts what went wrong:

- ``lost``: a planned turn whose human message and reply are not both in the store;
- ``duplicated``: a message id stored twice, a reply stored twice, or a turn executed twice
  (the stored reply is not the one the client received, by id);
- ``forked``: the stored conversation branches from the client's: a human message with no
  reply before the next one, two different replies to one message, a message the client never
  sent, turns out of order, or a stored reply different from the one the client received;
- ``stale``: a reply whose turn number or history digest differs from the one computed from
  the client's record (the reply did not see the whole conversation);
- ``other``: not alternating, a wrong ``turns`` count, a turn still pending, a missing thread.

The built-in model (product brief): ``reply = f"turn {n} · history {h} · you said: {content}"``
with ``h = sha256("".join(m + "\\n" for m in earlier)).hexdigest()[:12]`` over the contents of
every message before this human message, oldest first.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import math
import random
import re
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

REPLY_RE = re.compile(r"^turn (\d+) · history ([0-9a-f]{12}) · you said: (.*)$", re.DOTALL)

# Statuses a retry cannot fix: the conversation stops (and its remaining turns are lost).
FATAL_STATUSES = frozenset({400, 401, 403, 404, 413, 422})

# Outcome of one attempt; everything but "ok" is retried with the same message id.
OK = "ok"
FAILURE_KINDS = (
    "connect",  # connection refused / unreachable: the endpoint is gone
    "reset",  # connection reset or closed mid-response (a SIGKILL mid-stream)
    "timeout",  # no response headers within the header timeout
    "stall",  # the stream went silent for longer than the stall timeout (a SIGSTOP)
    "no_done",  # the stream ended without a done event
    "stream_error",  # an `event: error` inside the stream
    "http",  # a non-200 status (409, 503, 5xx ...); the status is recorded
    "bad_body",  # a 200 whose body could not be understood
)


# --------------------------------------------------------------------------------------------
# The built-in model, as the client computes it


def history_digest(earlier: Iterable[str]) -> str:
    """The 12-hex digest of every message content before a human message, oldest first."""
    return hashlib.sha256("".join(m + "\n" for m in earlier).encode()).hexdigest()[:12]


def expected_reply(turn: int, earlier: Sequence[str], content: str) -> str:
    """What the built-in model answers to ``content`` as turn ``turn`` after ``earlier``."""
    return f"turn {turn} · history {history_digest(earlier)} · you said: {content}"


def parse_reply(reply: str) -> tuple[int, str, str] | None:
    """``(turn, digest, content)`` of a built-in reply, or None when it is not one."""
    match = REPLY_RE.match(reply)
    return (int(match[1]), match[2], match[3]) if match else None


# --------------------------------------------------------------------------------------------
# The client's record


@dataclass
class Attempt:
    """One HTTP attempt at one message."""

    endpoint: str
    started: float
    ended: float = 0.0
    outcome: str = ""
    status: int | None = None
    detail: str = ""
    tokens: int = 0
    replica: str | None = None


@dataclass
class TurnRecord:
    """One turn as the client saw it."""

    index: int  # 1-based turn number
    message_id: str
    content: str
    expected: str  # the reply the built-in model must give, from the client's record
    reply: str | None = None  # the reply received (``done``), None when never received
    reply_id: str | None = None
    reported_turn: int | None = None
    replica: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    completed_at: float | None = None

    @property
    def failures(self) -> list[Attempt]:
        return [a for a in self.attempts if a.outcome != OK]

    @property
    def recovery(self) -> float | None:
        """Seconds from the first failed attempt to the success of this message."""
        failed = self.failures
        if not failed or self.completed_at is None:
            return None
        return self.completed_at - failed[0].ended


@dataclass
class ConversationRecord:
    """One conversation: the thread and every turn the client sent."""

    thread_id: str
    turns: list[TurnRecord] = field(default_factory=list)
    aborted: str | None = None  # why the conversation stopped early, if it did

    def history(self, upto: int) -> list[str]:
        """Contents before turn ``upto`` (1-based), human and AI alike, from the record."""
        out: list[str] = []
        for turn in self.turns[: upto - 1]:
            out.append(turn.content)
            out.append(turn.reply if turn.reply is not None else turn.expected)
        return out


# --------------------------------------------------------------------------------------------
# The verdict (pure)


@dataclass
class ThreadFindings:
    thread_id: str
    lost: int = 0
    duplicated: int = 0
    forked: int = 0
    stale: int = 0
    other: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, kind: str, message: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        self.problems.append(f"{self.thread_id}: {kind}: {message}")


def judge_thread(record: ConversationRecord, server: Mapping[str, Any] | None, turns: int) -> ThreadFindings:
    """Compare one thread as stored (``GET /v1/threads/{id}`` body) with the client's record.

    Args:
        record: what the client sent and received.
        server: the GET body, or None when the thread could not be read.
        turns: the number of turns the conversation was meant to have.

    Returns:
        The counts per kind and one line per problem.
    """
    found = ThreadFindings(record.thread_id)
    if server is None:
        found.add("other", "thread could not be read back")
        found.lost += turns
        return found
    messages = list(server.get("messages") or [])

    # Ids stored more than once.
    for mid, count in Counter(m.get("id") for m in messages).items():
        if count > 1:
            for _ in range(count - 1):
                found.add("duplicated", f"message id {mid!r} stored {count} times")

    # Alternation, and what breaks it.
    if messages and messages[0].get("role") != "human":
        found.add("other", f"thread starts with a {messages[0].get('role')!r} message")
    for prev, cur in itertools.pairwise(messages):
        if prev.get("role") != cur.get("role") or prev.get("id") == cur.get("id"):
            continue  # alternates, or an id duplicate already counted
        if cur.get("role") == "ai":
            if cur.get("content") == prev.get("content"):
                found.add("duplicated", f"reply {cur.get('content')!r} stored twice in a row")
            else:
                found.add("forked", f"two different replies in a row after {prev.get('id')!r}")
        elif cur.get("role") == "human":
            found.add(
                "forked",
                f"human {cur.get('id')!r} follows human {prev.get('id')!r} with no reply",
            )
        else:
            found.add("other", f"unexpected role {cur.get('role')!r}")

    # Stored turns: each human message and its reply, the first AI message after it before
    # the next message the client sent (an intruding human message is a fork, counted above,
    # and must not also make the client's turn look lost).
    sent = {t.message_id for t in record.turns}
    stored: dict[str, tuple[int, Mapping[str, Any], Mapping[str, Any] | None]] = {}
    order = 0
    for i, msg in enumerate(messages):
        if msg.get("role") != "human":
            continue
        reply = None
        for later in messages[i + 1 :]:
            if later.get("role") == "ai":
                reply = later
                break
            if later.get("id") in sent:
                break
        stored.setdefault(msg.get("id"), (order, msg, reply))
        order += 1
    for mid in stored:
        if mid not in sent:
            found.add("forked", f"human message {mid!r} that the client never sent")

    complete = 0
    last_order = -1
    for turn in record.turns:
        entry = stored.get(turn.message_id)
        if entry is None:
            found.add("lost", f"turn {turn.index} ({turn.message_id!r}) is not stored")
            continue
        position, human, reply = entry
        if position < last_order:
            found.add("forked", f"turn {turn.index} ({turn.message_id!r}) stored out of order")
        last_order = max(last_order, position)
        if human.get("content") != turn.content:
            found.add(
                "forked",
                f"turn {turn.index}: stored human content differs from the sent one",
            )
        if reply is None:
            found.add("lost", f"turn {turn.index} ({turn.message_id!r}) has no stored reply")
            continue
        complete += 1
        content = reply.get("content")
        expected = expected_reply(turn.index, record.history(turn.index), turn.content)
        parsed = parse_reply(content) if isinstance(content, str) else None
        if content != expected:
            if parsed is not None and parsed[2] == turn.content:
                n, digest, _ = parsed
                found.add(
                    "stale",
                    f"turn {turn.index}: stored reply says turn {n} history {digest}, the "
                    f"client's record gives turn {turn.index} history "
                    f"{history_digest(record.history(turn.index))}",
                )
            else:
                found.add(
                    "forked",
                    f"turn {turn.index}: stored reply {content!r} is not {expected!r}",
                )
        elif turn.reply is not None and turn.reply != content:
            found.add(
                "forked",
                f"turn {turn.index}: the client received {turn.reply!r}, the store holds {content!r}",
            )
        if turn.reply_id is not None and reply.get("id") != turn.reply_id:
            found.add(
                "duplicated",
                f"turn {turn.index} ran twice: the client got reply id {turn.reply_id!r}, "
                f"the store holds {reply.get('id')!r}",
            )

    for missing in range(len(record.turns) + 1, turns + 1):
        found.add(
            "lost",
            f"turn {missing} was never sent ({record.aborted or 'driver stopped'})",
        )

    reported = server.get("turns")
    if reported is not None and reported != complete:
        found.add(
            "other",
            f"server reports turns={reported}, {complete} complete turns stored",
        )
    if server.get("pending"):
        found.add("other", f"a turn is still pending: {server.get('pending')!r}")
    return found


def _percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class ChaosEvent:
    """Something the chaos controller did: ``kind`` (kill, pause, term, redis, pod_delete,
    scale_down) at ``time`` (``time.monotonic()``) to ``endpoint`` (None: every endpoint)."""

    time: float
    kind: str
    endpoint: str | None = None


def recovery_cause(turn: TurnRecord, events: Sequence[ChaosEvent]) -> str:
    """What a turn's recovery followed: the event before its first failure plus every event
    on one of its endpoints (or on all) until it succeeded. One event gives its kind ("kill");
    several give the kinds joined ("kill+redis"), so a "kill" recovery is one kill's alone."""
    first = turn.failures[0]
    endpoints = {a.endpoint for a in turn.attempts}
    end = turn.completed_at if turn.completed_at is not None else first.ended
    hit = {e for e in events if e.endpoint in (None, *endpoints) and first.started <= e.time <= end}
    before = [
        e
        for e in events
        if e.endpoint in (None, first.endpoint) and e.time < first.started and first.ended - e.time <= 30.0
    ]
    if before:
        hit.add(max(before, key=lambda e: e.time))
    return "+".join(sorted(e.kind for e in hit)) or "other"


def _recovery_by(turns: Sequence[TurnRecord], events: Sequence[ChaosEvent]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    if not events:
        return out
    for turn in turns:
        recovery = turn.recovery
        if recovery is not None:
            out.setdefault(recovery_cause(turn, events), []).append(recovery)
    return out


CHAOS_KEYS = (
    "kills",
    "pauses",
    "terms",
    "redis_restarts",
    "redis_failovers",
    "pod_deletes",
    "scale_downs",
)


@dataclass
class Verdict:
    """Everything the run proved or disproved, and the figures of the summary line."""

    planned: int
    turns: int  # turns the client completed (received ``done`` for)
    lost: int
    duplicated: int
    forked: int
    stale: int
    other: int
    problems: list[str]
    chaos: dict[str, int]
    replicas_mean: float
    replicas_max: int
    recovery: list[float]
    attempts: int
    failures: Counter[str]
    statuses: Counter[int]
    client_mismatches: int  # replies received that differ from the expected one
    elapsed: float | None = None
    recovery_by: dict[str, list[float]] = field(default_factory=dict)
    # Durations of turns that succeeded at the first attempt: what a turn costs under this
    # load, the yardstick for recoveries (a recovery is a lease expiry plus one such turn).
    turn_seconds: list[float] = field(default_factory=list)

    @property
    def turn_p99(self) -> float | None:
        return _percentile(self.turn_seconds, 99)

    def recovery_percentile(self, cause: str, q: float) -> float | None:
        """Recovery percentile of the turns whose first failure followed a ``cause`` event."""
        return _percentile(self.recovery_by.get(cause, []), q)

    @property
    def ok(self) -> bool:
        return (
            self.turns == self.planned
            and not (self.lost or self.duplicated or self.forked or self.stale or self.other)
            and not self.client_mismatches
        )

    @property
    def recovery_p50(self) -> float | None:
        return _percentile(self.recovery, 50)

    @property
    def recovery_p99(self) -> float | None:
        return _percentile(self.recovery, 99)

    @property
    def server_errors(self) -> int:
        """Responses with a 5xx other than 503 (a 500 is a defect whatever the chaos)."""
        return sum(n for status, n in self.statuses.items() if status >= 500 and status != 503)

    def summary(self, label: str = "continuity") -> str:
        """One line of figures."""

        def secs(v: float | None) -> str:
            return "-" if v is None else f"{v:.2f}s"

        chaos = " ".join(f"{k}={self.chaos.get(k, 0)}" for k in CHAOS_KEYS if k in self.chaos)
        fails = ",".join(f"{k}:{n}" for k, n in sorted(self.failures.items())) or "none"
        statuses = ",".join(f"{k}:{n}" for k, n in sorted(self.statuses.items())) or "none"
        elapsed = f" elapsed={self.elapsed:.1f}s" if self.elapsed is not None else ""
        by = "".join(
            f" {cause}-recovery p50={secs(_percentile(v, 50))} p99={secs(_percentile(v, 99))} (n={len(v)})"
            for cause, v in sorted(self.recovery_by.items())
        )
        return (
            f"{label}: {'PASS' if self.ok else 'FAIL'} turns={self.turns}/{self.planned} {chaos} "
            f"lost={self.lost} duplicated={self.duplicated} forked={self.forked} "
            f"stale={self.stale} other={self.other} mismatched={self.client_mismatches} "
            f"replicas/thread=mean {self.replicas_mean:.2f} max {self.replicas_max} "
            f"recovery p50={secs(self.recovery_p50)} p99={secs(self.recovery_p99)} "
            f"max={secs(max(self.recovery) if self.recovery else None)} (n={len(self.recovery)}){by} "
            f"turn p50={secs(_percentile(self.turn_seconds, 50))} p99={secs(self.turn_p99)} "
            f"attempts={self.attempts} failures={fails} statuses={statuses}{elapsed}"
        )


def judge(
    records: Sequence[ConversationRecord],
    server_threads: Mapping[str, Mapping[str, Any] | None],
    turns: int,
    chaos: Mapping[str, int] | None = None,
    elapsed: float | None = None,
    events: Sequence[ChaosEvent] = (),
) -> Verdict:
    """The verdict over every conversation: a pure function of the client record and the store.

    Args:
        records: the client's conversations.
        server_threads: ``thread_id -> GET body`` (None for a thread that could not be read).
        turns: turns each conversation was meant to have at least (one driven on past them
            meant every turn it sent).
        chaos: what was done to the system (kills, pauses, ...), reported in the summary.
        elapsed: wall-clock seconds of the run, reported in the summary.
        events: what the chaos controller did and when; recovery times are split by the
            event(s) each recovery followed (:func:`recovery_cause`).
    """
    findings = [judge_thread(r, server_threads.get(r.thread_id), turns) for r in records]
    replicas = [len({t.replica for t in r.turns if t.replica}) for r in records]
    all_turns = [t for r in records for t in r.turns]
    attempts = [a for t in all_turns for a in t.attempts]
    return Verdict(
        planned=sum(max(turns, len(r.turns)) for r in records),
        turns=sum(1 for t in all_turns if t.reply is not None),
        lost=sum(f.lost for f in findings),
        duplicated=sum(f.duplicated for f in findings),
        forked=sum(f.forked for f in findings),
        stale=sum(f.stale for f in findings),
        other=sum(f.other for f in findings),
        problems=[p for f in findings for p in f.problems],
        chaos=dict(chaos or {}),
        replicas_mean=statistics.fmean(replicas) if replicas else 0.0,
        replicas_max=max(replicas, default=0),
        recovery=[r for t in all_turns if (r := t.recovery) is not None],
        recovery_by=_recovery_by(all_turns, events),
        turn_seconds=[
            t.attempts[0].ended - t.attempts[0].started
            for t in all_turns
            if len(t.attempts) == 1 and t.attempts[0].outcome == OK
        ],
        attempts=len(attempts),
        failures=Counter(a.outcome for a in attempts if a.outcome != OK),
        statuses=Counter(a.status for a in attempts if a.status is not None),
        client_mismatches=sum(1 for t in all_turns if t.reply is not None and t.reply != t.expected),
        elapsed=elapsed,
    )


# --------------------------------------------------------------------------------------------
# The driver


class Endpoints:
    """Base URLs served round robin, like a Service; the chaos controller swaps them."""

    def __init__(self, urls: Iterable[str]) -> None:
        self.urls = list(urls)
        self._next = 0

    def next(self) -> str:
        if not self.urls:
            raise RuntimeError("no endpoints")
        url = self.urls[self._next % len(self.urls)]
        self._next += 1
        return url

    def replace(self, old: str, new: str) -> None:
        self.urls = [new if u == old else u for u in self.urls]

    def remove(self, url: str) -> None:
        self.urls = [u for u in self.urls if u != url]

    def add(self, url: str) -> None:
        self.urls.append(url)


@dataclass
class DriverConfig:
    """Shape of the traffic and the client's patience.

    ``header_timeout`` must exceed the server's lease wait (``TURN_LEASE_WAIT_SECONDS``): the
    server holds the response until it has the thread's lease. ``stall_timeout`` bounds the
    silence inside a stream (tokens every ``MODEL_TOKEN_DELAY_MS``, keepalives otherwise).
    """

    conversations: int = 4
    turns: int = 5
    api_key: str = ""
    connect_timeout: float = 1.0
    header_timeout: float = 6.0
    stall_timeout: float = 2.5
    # Give a message up (and abort its conversation) after this long.
    turn_deadline: float = 60.0
    backoff_base: float = 0.05
    backoff_max: float = 1.0
    think: tuple[float, float] = (0.0, 0.0)  # seconds between turns, uniform
    words: tuple[int, int] = (2, 6)  # words per message
    seed: int | None = None


@dataclass
class InFlight:
    endpoint: str
    message_id: str
    since: float
    attempt: Attempt
    streaming: bool = False  # at least one token received


_WORDS = [
    *(
        "amber",
        "basalt",
        "cobalt",
        "dune",
        "ember",
        "fjord",
        "granite",
        "harbor",
        "indigo",
    ),
    *("juniper", "kelp", "lagoon", "meadow", "nectar", "obsidian", "prairie", "quartz"),
    *(
        "river",
        "sierra",
        "tundra",
        "umber",
        "valley",
        "willow",
        "xenon",
        "yarrow",
        "zephyr",
    ),
]


class Driver:
    """Runs C conversations of T turns and keeps the client's record.

    Attributes:
        records: one :class:`ConversationRecord` per conversation, filled while running.
        inflight: attempts under way (the chaos controller picks mid-stream targets here).
        completed: turns completed so far.
    """

    def __init__(
        self,
        endpoints: Endpoints,
        config: DriverConfig,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.config = config
        self.records: list[ConversationRecord] = []
        self.inflight: dict[int, InFlight] = {}
        self.completed = 0
        self.started: float | None = None
        self.finished: float | None = None
        self._log = log or (lambda _m: None)
        self._rng = random.Random(config.seed)
        self._ids = 0
        self._run_tag = uuid.uuid4().hex[:8]
        self._keep_going: Callable[[], bool] = lambda: False

    @property
    def planned(self) -> int:
        return self.config.conversations * self.config.turns

    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.config.api_key}

    def _timeout(self) -> httpx.Timeout:
        c = self.config
        return httpx.Timeout(
            connect=c.connect_timeout,
            read=c.header_timeout,
            write=c.connect_timeout,
            pool=c.header_timeout,
        )

    async def _backoff(self, failures: int, retry_after: str | None = None) -> None:
        c = self.config
        delay = min(c.backoff_max, c.backoff_base * 2 ** max(0, failures - 1))
        if retry_after is not None:
            try:
                delay = max(delay, min(float(retry_after), c.backoff_max))
            except ValueError:
                pass
        await asyncio.sleep(delay * (0.5 + self._rng.random()))

    async def create_thread(self, client: httpx.AsyncClient) -> str:
        """POST /v1/threads, retried over the endpoints until the turn deadline."""
        deadline = time.monotonic() + self.config.turn_deadline
        failures = 0
        while True:
            url = self.endpoints.next()
            try:
                resp = await client.post(f"{url}/v1/threads", headers=self.headers(), timeout=self._timeout())
                if resp.status_code == 201:
                    return resp.json()["thread_id"]
                detail = f"HTTP {resp.status_code}: {resp.text[:200]}"
                retry_after = resp.headers.get("Retry-After")
                if resp.status_code in FATAL_STATUSES:
                    raise RuntimeError(f"POST /v1/threads on {url}: {detail}")
            except httpx.HTTPError as exc:
                detail, retry_after = f"{type(exc).__name__}: {exc}", None
            failures += 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not create a thread within the deadline: {detail}")
            await self._backoff(failures, retry_after)

    def _next_message(self, conv: int, turn: int) -> tuple[str, str]:
        self._ids += 1
        mid = f"m-{self._run_tag}-{conv}-{turn}-{self._ids}"
        count = self._rng.randint(*self.config.words)
        content = f"c{conv} t{turn} " + " ".join(self._rng.choice(_WORDS) for _ in range(count))
        return mid, content

    async def _attempt(
        self, client: httpx.AsyncClient, thread_id: str, turn: TurnRecord
    ) -> tuple[Attempt, dict | None, str | None]:
        """One try: POST the message, stream the reply; returns (attempt, done body, Retry-After)."""
        url = self.endpoints.next()
        attempt = Attempt(endpoint=url, started=time.monotonic())
        key = id(attempt)
        self.inflight[key] = InFlight(url, turn.message_id, attempt.started, attempt)
        body: dict | None = None
        retry_after: str | None = None
        try:
            async with client.stream(
                "POST",
                f"{url}/v1/threads/{thread_id}/messages",
                json={"content": turn.content, "id": turn.message_id},
                headers={**self.headers(), "Accept": "text/event-stream"},
                timeout=self._timeout(),
            ) as resp:
                attempt.status = resp.status_code
                attempt.replica = resp.headers.get("X-Replica")
                if resp.status_code != 200:
                    retry_after = resp.headers.get("Retry-After")
                    text = (await resp.aread()).decode(errors="replace")
                    attempt.outcome, attempt.detail = (
                        "http",
                        f"{resp.status_code} {text[:300]}",
                    )
                elif not resp.headers.get("content-type", "").startswith("text/event-stream"):
                    body = json.loads(await resp.aread())
                    attempt.outcome = OK
                else:
                    body = await self._read_stream(resp, attempt, key)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            attempt.outcome, attempt.detail = "connect", f"{type(exc).__name__}: {exc}"
        except (httpx.ReadTimeout, httpx.PoolTimeout, httpx.WriteTimeout) as exc:
            attempt.outcome, attempt.detail = "timeout", f"{type(exc).__name__}: {exc}"
        except TimeoutError:
            attempt.outcome, attempt.detail = (
                "stall",
                f"stream silent for {self.config.stall_timeout}s",
            )
        except (httpx.HTTPError, ConnectionError) as exc:
            attempt.outcome, attempt.detail = "reset", f"{type(exc).__name__}: {exc}"
        except (ValueError, KeyError) as exc:
            attempt.outcome, attempt.detail = "bad_body", f"{type(exc).__name__}: {exc}"
        finally:
            attempt.ended = time.monotonic()
            self.inflight.pop(key, None)
        if attempt.outcome == OK and body is not None:
            try:
                body["reply"]["content"]
            except (KeyError, TypeError):
                attempt.outcome, attempt.detail, body = (
                    "bad_body",
                    f"done without a reply: {body!r}"[:300],
                    None,
                )
        if not attempt.outcome:
            attempt.outcome = "no_done"
        turn.attempts.append(attempt)
        return attempt, body, retry_after

    async def _read_stream(self, resp: httpx.Response, attempt: Attempt, key: int) -> dict | None:
        event, data = "message", []
        lines = resp.aiter_lines()
        while True:
            async with asyncio.timeout(self.config.stall_timeout):
                try:
                    line = await anext(lines)
                except StopAsyncIteration:
                    attempt.outcome, attempt.detail = (
                        "no_done",
                        f"stream ended after {attempt.tokens} tokens",
                    )
                    return None
            if line.startswith(":"):
                continue  # keepalive comment
            if line:
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "event":
                    event = value
                elif name == "data":
                    data.append(value)
                continue
            if not data and event == "message":
                continue
            payload = "\n".join(data)
            if event == "token":
                attempt.tokens += 1
                flight = self.inflight.get(key)
                if flight is not None:
                    flight.streaming = True
            elif event == "done":
                attempt.outcome = OK
                return json.loads(payload)
            elif event == "error":
                attempt.outcome, attempt.detail = "stream_error", payload[:300]
                return None
            event, data = "message", []

    async def _turn(self, client: httpx.AsyncClient, rec: ConversationRecord, turn: TurnRecord) -> bool:
        deadline = time.monotonic() + self.config.turn_deadline
        failures = 0
        refused = 0  # consecutive connection refusals
        while True:
            attempt, body, retry_after = await self._attempt(client, rec.thread_id, turn)
            if attempt.outcome == OK and body is not None:
                turn.reply = body["reply"]["content"]
                turn.reply_id = body["reply"].get("id")
                turn.reported_turn = body.get("turn")
                turn.replica = body.get("replica") or attempt.replica
                turn.completed_at = time.monotonic()
                self.completed += 1
                if turn.reply != turn.expected:
                    self._log(
                        f"MISMATCH {rec.thread_id} turn {turn.index}: got {turn.reply!r}, "
                        f"expected {turn.expected!r}"
                    )
                return True
            failures += 1
            if attempt.status in FATAL_STATUSES:
                rec.aborted = f"turn {turn.index}: {attempt.detail}"
                return False
            if time.monotonic() > deadline:
                rec.aborted = (
                    f"turn {turn.index} gave up after {failures} attempts in "
                    f"{self.config.turn_deadline}s; last: {attempt.outcome} {attempt.detail}"
                )
                self._log(f"ABORT {rec.thread_id}: {rec.aborted}")
                return False
            # A refused connection means that endpoint is gone: try the next one at once, and
            # back off only once every endpoint refused in a row.
            refused = refused + 1 if attempt.outcome == "connect" else 0
            if 0 < refused < max(1, len(self.endpoints.urls)):
                await asyncio.sleep(0.01)
                continue
            await self._backoff(failures - refused + 1 if refused else failures, retry_after)

    async def _conversation(self, client: httpx.AsyncClient, conv: int) -> None:
        rec = ConversationRecord(thread_id=await self.create_thread(client))
        self.records.append(rec)
        for index in itertools.count(1):
            if index > self.config.turns and not self._keep_going():
                break
            mid, content = self._next_message(conv, index)
            expected = expected_reply(index, rec.history(index), content)
            turn = TurnRecord(index=index, message_id=mid, content=content, expected=expected)
            rec.turns.append(turn)
            if not await self._turn(client, rec, turn):
                return
            lo, hi = self.config.think
            if hi > 0:
                await asyncio.sleep(self._rng.uniform(lo, hi))

    async def run(self, keep_going: Callable[[], bool] = lambda: False) -> list[ConversationRecord]:
        """Run every conversation through its ``config.turns`` turns (or to its abort), and on
        past them for as long as ``keep_going()`` says (a chaos plan still under way: faster
        turns must not end the traffic before the chaos does); returns the records."""
        self._keep_going = keep_going
        self.started = time.monotonic()
        limits = httpx.Limits(
            max_connections=4 * self.config.conversations + 8,
            max_keepalive_connections=2 * self.config.conversations,
        )
        async with httpx.AsyncClient(limits=limits) as client:
            await asyncio.gather(*(self._conversation(client, c) for c in range(self.config.conversations)))
        self.finished = time.monotonic()
        return self.records

    async def read_back(
        self, urls: Sequence[str] | None = None, attempts: int = 20
    ) -> dict[str, dict | None]:
        """GET every thread (retrying over the endpoints); None where it could not be read."""
        out: dict[str, dict | None] = {}
        async with httpx.AsyncClient() as client:
            for rec in self.records:
                out[rec.thread_id] = None
                for i in range(attempts):
                    url = urls[i % len(urls)] if urls else self.endpoints.next()
                    try:
                        resp = await client.get(
                            f"{url}/v1/threads/{rec.thread_id}",
                            headers=self.headers(),
                            timeout=self._timeout(),
                        )
                        if resp.status_code == 200:
                            out[rec.thread_id] = resp.json()
                            break
                    except httpx.HTTPError:
                        pass
                    await asyncio.sleep(min(1.0, 0.05 * 2**i))
        return out

    def verdict(
        self,
        server_threads: Mapping[str, Mapping[str, Any] | None],
        chaos: Mapping[str, int] | None = None,
        events: Sequence[ChaosEvent] = (),
    ) -> Verdict:
        elapsed = None
        if self.started is not None and self.finished is not None:
            elapsed = self.finished - self.started
        return judge(self.records, server_threads, self.config.turns, chaos, elapsed, events)


def simulate(contents: Sequence[str], thread_id: str = "t-sim") -> tuple[ConversationRecord, dict]:
    """A correct client record and the matching stored thread for ``contents`` (for unit tests)."""
    rec = ConversationRecord(thread_id=thread_id)
    messages: list[dict[str, str]] = []
    for i, content in enumerate(contents, 1):
        expected = expected_reply(i, rec.history(i), content)
        turn = TurnRecord(
            index=i,
            message_id=f"m{i}",
            content=content,
            expected=expected,
            reply=expected,
            reply_id=f"r{i}",
            replica=f"replica-{i % 3}",
        )
        rec.turns.append(turn)
        messages += [
            {"id": f"m{i}", "role": "human", "content": content},
            {"id": f"r{i}", "role": "ai", "content": expected},
        ]
    return rec, {
        "thread_id": thread_id,
        "messages": messages,
        "turns": len(contents),
        "pending": None,
    }
