"""Redis goes away for a few seconds under traffic.

While it is away every request is answered quickly with 503 and ``Retry-After`` (never a 500,
never a hang past the client's timeout) and every replica's ``/readyz`` is 503; within 2 s of
Redis returning turns succeed again, and no turn of the conversations under way is lost.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from chaos.cluster import LocalCluster, running_cluster
from chaos.driver import Driver, DriverConfig
from servers import until

pytestmark = pytest.mark.chaos

OUTAGE_SECONDS = 3.0
CLIENT_TIMEOUT = 5.0  # the probes' own timeout: an answer must come before it
BACK_WITHIN = 2.0  # turns succeed again within this long after Redis is back
PROBE_INTERVAL = 0.1


@dataclass
class Probe:
    sent: float
    kind: str  # "turn" or "readyz"
    url: str
    status: int | None = None  # None: no answer (timeout, connection error)
    elapsed: float = 0.0
    retry_after: str | None = None
    error: str = ""


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with running_cluster(
        2,
        {
            "MODEL_TOKEN_DELAY_MS": "20",
            "TURN_LEASE_SECONDS": "1",
            "TURN_LEASE_WAIT_SECONDS": "4",
            "SSE_KEEPALIVE_SECONDS": "0.5",
        },
    ) as cluster:
        yield cluster


async def probe(client: httpx.AsyncClient, kind: str, url: str, **kwargs) -> Probe:
    p = Probe(sent=time.monotonic(), kind=kind, url=url)
    try:
        if kind == "readyz":
            resp = await client.get(f"{url}/readyz", timeout=CLIENT_TIMEOUT)
        else:
            resp = await client.post(url, timeout=CLIENT_TIMEOUT, **kwargs)
        p.status, p.retry_after = resp.status_code, resp.headers.get("Retry-After")
    except httpx.HTTPError as exc:
        p.error = f"{type(exc).__name__}: {exc}"
    p.elapsed = time.monotonic() - p.sent
    return p


@pytest.mark.timeout(180)
async def test_redis_outage_answers_503_and_recovers(cluster: LocalCluster) -> None:
    headers = {"X-API-Key": cluster.api_key}
    config = DriverConfig(
        conversations=4,
        turns=25,
        api_key=cluster.api_key,
        header_timeout=6.0,
        stall_timeout=2.5,
        think=(0.05, 0.2),
        turn_deadline=60.0,
    )
    driver = Driver(cluster.endpoints, config)
    traffic = asyncio.create_task(driver.run())
    probes: list[Probe] = []
    async with httpx.AsyncClient(headers=headers) as client:
        base = cluster.endpoints.urls[0]
        thread = (await client.post(f"{base}/v1/threads", timeout=CLIENT_TIMEOUT)).json()["thread_id"]
        await until(lambda: driver.completed >= 20 or traffic.done(), "traffic to get going", 60)
        assert driver.completed >= 20, "traffic did not get going"

        async def turn_probe(i: int) -> Probe:
            url = cluster.endpoints.urls[i % len(cluster.endpoints.urls)]
            body = {"content": f"probe {i}", "id": f"probe-{uuid.uuid4().hex}"}
            return await probe(client, "turn", f"{url}/v1/threads/{thread}/messages", json=body)

        stopped = time.monotonic()
        await asyncio.to_thread(cluster.redis.stop)
        i = 0
        while time.monotonic() - stopped < OUTAGE_SECONDS:
            batch = [turn_probe(i)] + [probe(client, "readyz", u) for u in cluster.endpoints.urls]
            probes += await asyncio.gather(*batch)
            i += 1
            await asyncio.sleep(PROBE_INTERVAL)
        back_started = time.monotonic()
        await asyncio.to_thread(cluster.redis.start)
        back = time.monotonic()

        # Until a turn succeeds (and every replica is ready again), bounded.
        first_ok: float | None = None
        ready_at: dict[str, float] = {}
        while time.monotonic() - back < 30 and (
            first_ok is None or len(ready_at) < len(cluster.endpoints.urls)
        ):
            batch = [turn_probe(i)] + [probe(client, "readyz", u) for u in cluster.endpoints.urls]
            results = await asyncio.gather(*batch)
            probes += results
            for p in results:
                if p.status == 200 and p.kind == "turn" and first_ok is None:
                    first_ok = p.sent + p.elapsed
                if p.status == 200 and p.kind == "readyz":
                    ready_at.setdefault(p.url, p.sent + p.elapsed)
            i += 1
            await asyncio.sleep(PROBE_INTERVAL)

    await asyncio.wait_for(traffic, timeout=120)
    threads = await driver.read_back(cluster.endpoints.urls)
    verdict = driver.verdict(threads, {"redis_restarts": 1})

    during = [p for p in probes if p.sent >= stopped + 0.2 and p.sent + p.elapsed <= back_started]
    turns_during = [p for p in during if p.kind == "turn"]
    ready_during = [p for p in during if p.kind == "readyz"]
    first_503 = min(
        (p.sent + p.elapsed for p in probes if p.status == 503 and p.sent >= stopped),
        default=None,
    )
    slowest = max((p.elapsed for p in during), default=0.0)

    def after(t: float | None, ref: float) -> str:
        return "never" if t is None else f"{t - ref:.2f}s"

    line = (
        f"redis-outage: down {back - stopped:.1f}s (restart took {back - back_started:.2f}s); "
        f"first 503 {after(first_503, stopped)} after the stop; during the outage "
        f"{len(turns_during)} turn probes -> statuses {sorted({p.status for p in turns_during}, key=str)}, "
        f"{len(ready_during)} readyz probes -> {sorted({p.status for p in ready_during}, key=str)}, "
        f"slowest answer {slowest:.2f}s; first turn ok {after(first_ok, back)} after Redis was back; "
        f"all replicas ready {after(max(ready_at.values(), default=None), back)} after; "
        f"driver statuses {dict(sorted(verdict.statuses.items()))}"
    )
    print("\n" + line + "\n" + verdict.summary("redis-outage"))
    failure = "\n".join([line, verdict.summary("redis-outage"), *verdict.problems[:20], cluster.logs()])

    assert turns_during and ready_during, failure
    for p in turns_during:
        # A quick 503 with Retry-After: never a 500, never a hang, never a dropped connection.
        assert p.status == 503 and p.retry_after, f"{p}\n{failure}"
        assert p.elapsed < CLIENT_TIMEOUT, f"{p}\n{failure}"
    for url in cluster.endpoints.urls:
        statuses = {p.status for p in ready_during if p.url == url}
        assert statuses == {503}, f"/readyz of {url} during the outage: {statuses}\n{failure}"
    assert first_ok is not None and first_ok - back <= BACK_WITHIN, failure
    assert len(ready_at) == len(cluster.endpoints.urls), failure
    assert verdict.ok, failure
    assert verdict.server_errors == 0, failure
