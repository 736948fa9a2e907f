"""Fixtures for service tests: real replicas (``python -m threadline serve``) on real sockets."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from servers import ServiceProcess


@pytest.fixture
def start_replica(tmp_path) -> Iterator[Callable[..., ServiceProcess]]:
    """Start replicas for this test; all are killed at its end."""
    started: list[ServiceProcess] = []

    def start(env: dict[str, str], name: str = "replica", wait_ready: bool = True) -> ServiceProcess:
        replica = ServiceProcess(env, name=name, log_dir=tmp_path).start(wait_ready=wait_ready)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.kill()
