"""What a replica exposes on its API port (issue 10 point 6): with METRICS_PORT set, /metrics
lives on its own port only; with DOCS_ENABLED=false there is no /docs, /redoc or /openapi.json."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from client import API_KEY, Client
from servers import free_port, redis_env

pytestmark = pytest.mark.integration


def test_metrics_on_their_own_port_and_docs_off(redis_server, start_replica):
    metrics_port = free_port()
    replica = start_replica(
        redis_env(redis_server, METRICS_PORT=str(metrics_port), DOCS_ENABLED="false"), name="exposure"
    )
    Client(replica.url, API_KEY).new_thread()
    for path in ("/metrics", "/docs", "/redoc", "/openapi.json"):
        assert httpx.get(f"{replica.url}{path}").status_code == 404, path
    scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics")
    assert scraped.status_code == 200
    assert 'threadline_http_requests_total{method="POST",route="/v1/threads",status="201"}' in scraped.text


def test_metrics_and_docs_stay_on_the_api_port_by_default(redis_server, start_replica):
    replica = start_replica(redis_env(redis_server), name="exposure-default")
    assert "threadline_" in httpx.get(f"{replica.url}/metrics").text
    assert httpx.get(f"{replica.url}/openapi.json").status_code == 200


def test_the_keyless_helm_test_smoke(redis_server, start_replica):
    """What the chart's default helm test runs (no key in the service for it, adr/0006)."""
    replica = start_replica(redis_env(redis_server), name="keyless-smoke")
    run = subprocess.run(
        [sys.executable, "-m", "threadline", "smoke", "--url", replica.url, "--no-key"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "requests without credentials refused" in run.stdout
    # And it fails against something that is not the service.
    bad = subprocess.run(
        [sys.executable, "-m", "threadline", "smoke", "--url", f"http://127.0.0.1:{free_port()}", "--no-key"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1
