"""Runs that survive anything, through the LangGraph API: 3 replicas over one Redis driven by
``langgraph-sdk`` (:mod:`chaos.sdk_driver`: background, streamed, interrupted-then-resumed,
double-texted and cancelled runs of the ``steps`` graph), while replicas are SIGKILLed,
SIGSTOPped past the lease and SIGTERMed mid-run and Redis restarts (AOF, fsync always).

In ``make test``: a short run (>= 60 runs, >= 3 SIGKILLs, a SIGSTOP, a SIGTERM, a Redis
restart). ``CHAOS_SOAK=1`` (``make chaos``): >= 2000 runs, >= 30 SIGKILLs, >= 5 SIGSTOPs, 2
Redis restarts. Prints runs, kills, pauses, restarts, lost / duplicated / stuck runs, takeover
time after a kill and time from cancel to the run stopped (p50, p99).

Settings as for the ``/v1`` chaos test (``test_local_chaos.py``): a 1 s lease, so a dead
replica's runs are taken over about 1 s (+ a 0.5 s sweep) after it died.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.cluster import LocalCluster, image_unavailable, running_cluster
from chaos.monkey import Monkey, make_plan
from chaos.sdk_driver import SdkConfig, SdkDriver

pytestmark = pytest.mark.chaos

SOAK = os.environ.get("CHAOS_SOAK") == "1"
LEASE_SECONDS = 1.0
DRAIN_SECONDS = 5.0
GRAPHS = Path(__file__).resolve().parents[1] / "integration" / "graphs" / "langgraph.json"
REPLICA_ENV = {
    "LANGGRAPH_CONFIG": str(GRAPHS),
    "TURN_LEASE_SECONDS": str(LEASE_SECONDS),
    "TURN_LEASE_WAIT_SECONDS": "4",
    "SSE_KEEPALIVE_SECONDS": "0.5",
    "DRAIN_SECONDS": str(DRAIN_SECONDS),
}
# (threads, plans per thread, kills, pauses, terms, redis restarts, timeout s). A plan is one
# run, two for a double text, two for an interrupt and its resume: ~1.3 runs per plan.
QUICK = (6, 12, 3, 1, 1, 1, 300)
SOAKING = (14, 200, 32, 5, 2, 2, 2400)
THREADS, PLANS, KILLS, PAUSES, TERMS, RESTARTS, TIMEOUT = SOAKING if SOAK else QUICK
MINIMUM = {"runs": 2000, "kills": 30, "pauses": 5} if SOAK else {"runs": 60, "kills": 3, "pauses": 1}
# The targets: takeover p99 <= lease + 1 s, cancel p99 <= 1 s (a run on a healthy
# replica; one on a killed or paused replica is stopped by its takeover). Asserted with slack
# for a loaded shared machine (tests never fail on wall-clock time alone); the report prints
# them.
TAKEOVER_P99_MAX = float(os.environ.get("CHAOS_TAKEOVER_P99_MAX", str(LEASE_SECONDS + 6)))
CANCEL_P99_MAX = float(os.environ.get("CHAOS_CANCEL_P99_MAX", "6"))


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    if os.environ.get("CHAOS_FROM_IMAGE") == "1" and (reason := image_unavailable()):
        pytest.skip(reason)
    with running_cluster(3, REPLICA_ENV) as cluster:
        yield cluster


@pytest.mark.timeout(TIMEOUT)
async def test_runs_survive_chaos_through_the_sdk(cluster: LocalCluster) -> None:
    config = SdkConfig(threads=THREADS, runs=PLANS, api_key=cluster.api_key)
    driver = SdkDriver(cluster.endpoints, config, log=print)
    monkey = Monkey(
        cluster,
        driver,  # type: ignore[arg-type]  (the same inflight / completed / finished surface)
        pause_seconds=2 * LEASE_SECONDS + 2.5,
        drain_timeout=DRAIN_SECONDS + 15,
        gap=2.5,
    )
    chaos = asyncio.create_task(monkey.run(make_plan(KILLS, PAUSES, TERMS, RESTARTS, seed=None)))
    try:
        await driver.run(keep_going=lambda: not chaos.done())
        await asyncio.wait_for(chaos, timeout=120)
    finally:
        if not chaos.done():
            chaos.cancel()
        await monkey.cancel()
    verdict = await driver.verdict(monkey.events)
    label = "langgraph-chaos-soak" if SOAK else "langgraph-chaos"
    slowest = sorted(driver.cancel_samples, reverse=True)[:3]
    text = "\n".join(
        [verdict.summary(label, monkey.counts)]
        + [f"  slow cancel {s:.2f}s thread {t} run {r}" for s, t, r in slowest]
        + [f"  cancel answered after its run ended: thread {t} run {r}" for t, r in driver.late_cancels]
    )
    print("\n" + text)
    if summary_file := os.environ.get("CHAOS_SUMMARY_FILE"):
        with Path(summary_file).open("a") as out:
            out.write(text + "\n")
    failure = "\n".join([text, *verdict.problems[:40], *monkey.errors, cluster.logs()])
    assert verdict.ok, failure
    assert not driver.errors and not monkey.errors, failure
    assert verdict.runs >= MINIMUM["runs"], failure
    for key in ("kills", "pauses"):
        assert monkey.counts[key] >= MINIMUM[key], failure
    assert monkey.counts["redis_restarts"] >= 1 and monkey.counts["terms"] >= 1, failure
    assert verdict.interrupts > 0 and (verdict.cancel_seconds or verdict.cancel_chaos_seconds), failure
    takeover = verdict.percentile(verdict.takeover_seconds, 99)
    assert takeover is not None and takeover <= TAKEOVER_P99_MAX, failure
    cancel = verdict.percentile(verdict.cancel_seconds, 99)
    assert cancel is None or cancel <= CANCEL_P99_MAX, failure
