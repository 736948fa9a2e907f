"""Continuity under chaos, locally: 3 replicas over one Redis, killed, paused and drained
mid-stream while conversations go on; Redis crashes and restarts (AOF, fsync always).

In ``make test``: >= 200 turns, >= 5 SIGKILLs, a SIGSTOP past the lease, a SIGTERM, a Redis
restart. ``CHAOS_SOAK=1`` (``make chaos``): >= 2000 turns, >= 30 SIGKILLs, >= 5 SIGSTOPs,
2 Redis restarts. ``CHAOS_FROM_IMAGE=1`` runs the replicas from the built image (Docker).

Settings and why:

* ``TURN_LEASE_SECONDS=1``: after a SIGKILL the next replica waits for the dead holder's lease
  to expire, so recovery is at most the lease plus one re-run of the turn (~0.3 s of tokens
  at 20 ms) plus the client's backoff; 1 s keeps p99 under 2 s. Renewal runs every third of
  the lease (333 ms), leaving two missed renewals of slack for a busy event loop.
* ``TURN_LEASE_WAIT_SECONDS=4``: longer than a lease, so a replica waiting behind a dead holder
  gets the lease instead of answering 409; the client's header timeout (6 s) exceeds it.
* ``MODEL_TOKEN_DELAY_MS=20``: replies take ~0.3-0.4 s, so kills land mid-stream.
* ``SSE_KEEPALIVE_SECONDS=0.5``: a healthy stream is never silent for the client's 2.5 s
  stall timeout, so a silent one is a paused replica.
* ``DRAIN_SECONDS=5``: longer than any in-flight turn.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chaos.cluster import LocalCluster, image_unavailable, running_cluster
from chaos.driver import Driver, DriverConfig, Verdict, recovery_cause
from chaos.monkey import Monkey, make_plan

pytestmark = pytest.mark.chaos

SOAK = os.environ.get("CHAOS_SOAK") == "1"
LEASE_SECONDS = 1.0
STALL_TIMEOUT = 2.5
DRAIN_SECONDS = 5.0
# Recovery after a SIGKILL is the dead holder's lease running out (<= LEASE_SECONDS) plus one
# turn on another replica. Asserted relative to what a turn costs in the same run (p99 of the
# turns that succeeded at once) plus 1 s for the client's retry, so a busy machine does not
# fail it but a lease misconfigured to its 10 s default does. The product target is p99 <= 2 s
# (docs/reliability.md, "Chaos tests", has the measured figures); CHAOS_KILL_RECOVERY_P99_MAX asserts an
# absolute bound too, for a quiet machine.
KILL_RECOVERY_SLACK = 1.0
KILL_RECOVERY_P99_MAX = float(os.environ.get("CHAOS_KILL_RECOVERY_P99_MAX", "inf"))

REPLICA_ENV = {
    "MODEL_TOKEN_DELAY_MS": "20",
    "TURN_LEASE_SECONDS": str(LEASE_SECONDS),
    "TURN_LEASE_WAIT_SECONDS": "4",
    "SSE_KEEPALIVE_SECONDS": "0.5",
    "DRAIN_SECONDS": str(DRAIN_SECONDS),
}


@dataclass(frozen=True)
class Scale:
    conversations: int
    turns: int
    kills: int
    pauses: int
    terms: int
    redis_restarts: int
    timeout: float


QUICK = Scale(conversations=8, turns=40, kills=6, pauses=1, terms=1, redis_restarts=1, timeout=240)
SOAKING = Scale(conversations=14, turns=160, kills=32, pauses=5, terms=2, redis_restarts=2, timeout=1800)
SCALE = SOAKING if SOAK else QUICK
MINIMUM = (
    {"turns": 2000, "kills": 30, "pauses": 5, "terms": 1, "redis_restarts": 2}
    if SOAK
    else {"turns": 200, "kills": 5, "pauses": 1, "terms": 1, "redis_restarts": 1}
)


def append(path: Path, text: str) -> None:
    with path.open("a") as out:
        out.write(text + "\n")


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    if os.environ.get("CHAOS_FROM_IMAGE") == "1" and (reason := image_unavailable()):
        pytest.skip(reason)
    with running_cluster(3, REPLICA_ENV) as cluster:
        yield cluster


def fenced_writes(cluster: LocalCluster) -> int:
    """Turns that replicas refused to finish because their lease was gone (log evidence)."""
    pattern = re.compile(r'"lease lost"|"outcome": "fenced"')
    replicas = [*cluster.retired, *cluster.replicas.values()]
    return sum(len(pattern.findall(r.logs())) for r in replicas)


def report(verdict: Verdict, driver: Driver, monkey: Monkey, cluster: LocalCluster, label: str) -> str:
    drains = ", ".join(
        f"{d.replica}: {d.finished}/{len(d.in_flight)} streams finished, exit {d.exit_code} "
        f"after {d.seconds:.1f}s"
        for d in monkey.drains
    )
    startup = monkey.replacement_seconds
    extra = (
        f"{label}: streams cut by SIGKILL={monkey.streams_cut} drains=[{drains}] "
        f"fenced/lease-lost log lines={fenced_writes(cluster)} replacement start "
        f"mean={sum(startup) / max(1, len(startup)):.1f}s logs={cluster.log_dir}"
    )
    return "\n".join([verdict.summary(label), extra, *slowest(driver, monkey)])


def slowest(driver: Driver, monkey: Monkey, n: int = 5) -> list[str]:
    """The slowest recoveries, attempt by attempt (where the time went)."""
    turns = [t for r in driver.records for t in r.turns if t.recovery is not None]
    turns.sort(key=lambda t: t.recovery or 0.0, reverse=True)
    out = []
    for t in turns[:n]:
        steps = " ".join(
            f"{a.outcome}{'' if a.status in (None, 200) else a.status}@{a.endpoint[-5:]}"
            f"+{a.ended - a.started:.2f}s"
            for a in t.attempts
        )
        cause = recovery_cause(t, monkey.events)
        out.append(f"  slow recovery {t.recovery:.2f}s after {cause}: {steps}")
    return out


@pytest.mark.timeout(SCALE.timeout)
async def test_conversations_survive_chaos(cluster: LocalCluster) -> None:
    config = DriverConfig(
        conversations=SCALE.conversations,
        turns=SCALE.turns,
        api_key=cluster.api_key,
        header_timeout=6.0,
        stall_timeout=STALL_TIMEOUT,
        think=(0.2, 0.8) if SOAK else (0.1, 0.4),
        turn_deadline=60.0,
    )
    driver = Driver(cluster.endpoints, config, log=print)
    monkey = Monkey(
        cluster,
        driver,
        pause_seconds=STALL_TIMEOUT + 2 * LEASE_SECONDS + 1.0,
        drain_timeout=DRAIN_SECONDS + 15,
        gap=2.5,
    )
    plan = make_plan(SCALE.kills, SCALE.pauses, SCALE.terms, SCALE.redis_restarts, seed=None)
    chaos = asyncio.create_task(monkey.run(plan))
    try:
        await driver.run(keep_going=lambda: not chaos.done())
        await asyncio.wait_for(chaos, timeout=120)
    finally:
        if not chaos.done():
            chaos.cancel()
        await monkey.cancel()

    threads = await driver.read_back(cluster.endpoints.urls)
    verdict = driver.verdict(threads, monkey.counts, monkey.events)
    label = "chaos-soak" if SOAK else "chaos"
    text = report(verdict, driver, monkey, cluster, label)
    print("\n" + text)
    if summary_file := os.environ.get("CHAOS_SUMMARY_FILE"):
        await asyncio.to_thread(append, Path(summary_file), text)

    failure = "\n".join([text, *verdict.problems[:40], *monkey.errors, cluster.logs()])
    assert verdict.ok, failure
    assert not monkey.errors, failure
    assert verdict.server_errors == 0, failure  # never a 500, whatever the chaos
    # The chaos really happened, mid-stream.
    assert verdict.turns >= MINIMUM["turns"], failure
    for key in ("kills", "pauses", "terms", "redis_restarts"):
        assert monkey.counts[key] >= MINIMUM[key], f"{key}: {monkey.counts[key]}\n{failure}"
    assert monkey.streams_cut >= monkey.counts["kills"], failure
    # Graceful drain: every stream in flight at SIGTERM finished, then the replica exited on
    # its own (0, or uvicorn re-raising the SIGTERM it handled: -15), not by our SIGKILL.
    for drain in monkey.drains:
        assert drain.in_flight and drain.finished == len(drain.in_flight), failure
        assert drain.exit_code in (0, -signal.SIGTERM), failure
    # Recovery after a SIGKILL is the lease plus one turn.
    p99, turn_p99 = verdict.recovery_percentile("kill", 99), verdict.turn_p99
    assert p99 is not None and turn_p99 is not None, failure
    assert p99 <= LEASE_SECONDS + turn_p99 + KILL_RECOVERY_SLACK, failure
    assert p99 <= KILL_RECOVERY_P99_MAX, failure
