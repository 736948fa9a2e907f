"""CORS over real servers: a preflight of every route the OpenAPI document lists (streams
included) succeeds for an allowed origin, answers carry the headers a browser needs to read
them (errors too), another origin is refused, and without a setting no origin is allowed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from client import API_KEY, API_KEYS
from servers import free_port, wait_for_ready

pytestmark = pytest.mark.integration

SDK_HEADERS = "x-api-key,authorization,content-type,last-event-id,x-auth-scheme"


def preflight(url: str, path: str, method: str, origin: str) -> httpx.Response:
    return httpx.options(
        url + path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": SDK_HEADERS,
        },
    )


def every_operation(url: str) -> list[tuple[str, str]]:
    spec = httpx.get(f"{url}/openapi.json").json()
    found = []
    for path, item in spec["paths"].items():
        concrete = re.sub(r"\{[^}]+\}", str(uuid.uuid4()), path)
        found += [(concrete, method.upper()) for method in item if method != "parameters"]
    return found


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {"API_KEYS": API_KEYS, "CHECKPOINT_SQLITE_PATH": str(tmp_path / "c.sqlite")}


def test_every_route_preflights_for_an_allowed_origin(start_replica, env) -> None:
    replica = start_replica({**env, "CORS_ALLOW_ORIGINS": "http://localhost:*,https://ui.example.com"})
    operations = every_operation(replica.url)
    assert len(operations) > 40
    assert any(p.endswith("/runs/stream") for p, _ in operations)
    for path, method in operations:
        for origin in ("http://localhost:3000", "https://ui.example.com"):
            answer = preflight(replica.url, path, method, origin)
            assert answer.status_code == 200, (path, method, answer.text)
            assert answer.headers["access-control-allow-origin"] == origin
            allowed = answer.headers["access-control-allow-headers"].lower()
            assert all(h in allowed for h in SDK_HEADERS.split(",")), allowed
            assert method in answer.headers["access-control-allow-methods"]
    refused = preflight(replica.url, "/threads/search", "POST", "https://evil.example.com")
    assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
    assert preflight(replica.url, "/info", "GET", "http://localhost.evil.com:3000").status_code == 400


def test_answers_and_errors_carry_the_headers_a_browser_reads(start_replica, env) -> None:
    replica = start_replica({**env, "CORS_ALLOW_ORIGINS": "http://127.0.0.1:*"})
    origin = "http://127.0.0.1:5173"
    with httpx.Client(base_url=replica.url, headers={"Origin": origin}) as http:
        created = http.post("/threads", json={}, headers={"x-api-key": API_KEY})
        assert created.status_code == 200
        run = http.post(
            f"/threads/{created.json()['thread_id']}/runs",
            json={"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "hi"}]}},
            headers={"x-api-key": API_KEY},
        )
        assert run.headers["access-control-allow-origin"] == origin
        exposed = run.headers["access-control-expose-headers"].lower()
        assert {"content-location", "location", "x-replica"} <= set(exposed.split(", ")), exposed
        assert run.headers["content-location"].startswith("/threads/")
        # A 401 answered before the route (by the auth-before-body layer) is readable too.
        denied = http.post("/threads", json={})
        assert denied.status_code == 401 and denied.headers["access-control-allow-origin"] == origin
        assert "detail" in denied.json()


def test_http_cors_of_the_langgraph_json(start_replica, env, tmp_path) -> None:
    config = tmp_path / "langgraph.json"
    graph = tmp_path / "agent.py"
    graph.write_text(
        "from langgraph.graph import StateGraph, START\nfrom typing import TypedDict\n"
        "class S(TypedDict):\n    n: int\n"
        "b = StateGraph(S)\nb.add_node('inc', lambda s: {'n': s['n'] + 1})\nb.add_edge(START, 'inc')\n"
        "graph = b.compile()\n"
    )
    cors = {"allow_origins": ["https://ui.example.com"], "max_age": 77, "expose_headers": ["x-trace"]}
    config.write_text(json.dumps({"graphs": {"inc": "./agent.py:graph"}, "http": {"cors": cors}}))
    replica = start_replica({**env, "LANGGRAPH_CONFIG": str(config)})
    answer = preflight(replica.url, "/threads/search", "POST", "https://ui.example.com")
    assert answer.status_code == 200 and answer.headers["access-control-max-age"] == "77"
    got = httpx.get(f"{replica.url}/info", headers={"Origin": "https://ui.example.com"})
    assert "x-trace" in got.headers["access-control-expose-headers"]
    assert preflight(replica.url, "/info", "GET", "http://localhost:3000").status_code == 400


def test_without_a_setting_no_origin_is_allowed(start_replica, env) -> None:
    replica = start_replica(env)
    answer = preflight(replica.url, "/info", "GET", "http://localhost:3000")
    assert "access-control-allow-origin" not in answer.headers
    got = httpx.get(f"{replica.url}/info", headers={"Origin": "http://localhost:3000"})
    assert got.status_code == 200 and "access-control-allow-origin" not in got.headers


def test_make_run_allows_localhost_on_any_port(tmp_path) -> None:
    """`make run` (scripts/run-dev.sh) serves a browser dev server on this machine out of the box."""
    root = Path(__file__).resolve().parents[2]
    port = free_port()
    env = {**os.environ, "PORT": str(port), "PY": sys.executable}
    env.update(CHECKPOINT_SQLITE_PATH=str(tmp_path / "c.sqlite"))
    env.pop("CORS_ALLOW_ORIGINS", None)
    server = subprocess.Popen(
        ["scripts/run-dev.sh"], cwd=root, env=env, stdout=subprocess.DEVNULL, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_ready(url, timeout=60)
        for origin in ("http://localhost:3000", "http://127.0.0.1:5173"):
            answer = preflight(url, "/threads/search", "POST", origin)
            assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == origin
        assert preflight(url, "/threads/search", "POST", "https://example.com").status_code == 400
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
