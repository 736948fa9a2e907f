"""A client that sends its next message as soon as it has the previous reply, to another
replica (round robin), must find the thread's lease free: the turn is over.

Found while checking scripts/chaos.py on a quiet pair of replicas: now and then the next
message waited out the whole lease (409 after TURN_LEASE_WAIT_SECONDS, then success once the
lease expired). The driver closes the stream as soon as ``done`` arrives, like a browser that
has what it needs; if the server releases the lease only after ``done`` is sent, the
disconnect can cancel the stream before the release runs.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chaos.cluster import LocalCluster, running_cluster
from chaos.driver import Driver, DriverConfig

pytestmark = pytest.mark.integration

LEASE_SECONDS = 3.0
LEASE_WAIT_SECONDS = 1.0


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with running_cluster(
        2,
        {
            "MODEL_TOKEN_DELAY_MS": "2",
            "TURN_LEASE_SECONDS": str(LEASE_SECONDS),
            "TURN_LEASE_WAIT_SECONDS": str(LEASE_WAIT_SECONDS),
        },
        appendfsync="everysec",
    ) as cluster:
        yield cluster


@pytest.mark.timeout(180)
async def test_next_message_finds_the_lease_free(cluster: LocalCluster) -> None:
    config = DriverConfig(conversations=2, turns=40, api_key=cluster.api_key, header_timeout=5.0)
    driver = Driver(cluster.endpoints, config)
    await driver.run()
    verdict = driver.verdict(await driver.read_back())
    busy = [
        (r.thread_id[:8], t.index, [(a.outcome, a.status, round(a.ended - a.started, 2)) for a in t.attempts])
        for r in driver.records
        for t in r.turns
        if len(t.attempts) > 1
    ]
    print("\n" + verdict.summary("lease-release"))
    assert verdict.ok, verdict.problems
    assert verdict.statuses.get(409, 0) == 0, busy
