"""Runs layers ("replicas") in the test process, built as the service builds one on Redis:
records, lease, threads and runs on one client, serving one graph."""

from __future__ import annotations

from typing import Any

from threadline.config import QuotaSettings
from threadline.lease import RedisTurnLease
from threadline.runs.assistants import Assistants
from threadline.runs.records_redis import RedisRecordStore
from threadline.runs.runs import Runs
from threadline.runs.threads import Threads


def runs_layer(client: Any, assistant_id: str, graph: Any, reads_ahead: bool = False) -> Runs:
    """A replica's runs layer serving ``graph`` as ``assistant_id``; ``reads_ahead``: ``client``
    is the graph's saver's own (RedisRecordStore's argument)."""
    records = RedisRecordStore(client, ttl_seconds=60, reads_ahead=reads_ahead)
    lease = RedisTurnLease(client, lease_seconds=10, wait_seconds=5, counter_ttl_seconds=60)
    assistants = Assistants({assistant_id: graph})
    threads = Threads(records, assistants, lease, graph.checkpointer)
    return Runs(threads, assistants, records, lease, QuotaSettings(), heartbeat_seconds=10)
