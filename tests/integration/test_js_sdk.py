"""The real LangGraph JS SDK (``@langchain/langgraph-sdk`` 1.15, tests/js) over every endpoint
group threadline serves, driven by node: against two replicas on one Redis (calls alternate
between them) and against the SQLite default. The checks are in tests/js/sdk_suite.mjs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from client import API_KEY, API_KEYS
from servers import ServiceProcess, redis_env

pytestmark = pytest.mark.integration

JS = Path(__file__).resolve().parents[1] / "js"
GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"
ENV = {"LANGGRAPH_CONFIG": str(GRAPHS), "TURN_LEASE_WAIT_SECONDS": "10"}


def node() -> str:
    found = shutil.which("node")
    if found is None or not (JS / "node_modules" / "@langchain" / "langgraph-sdk").is_dir():
        raise RuntimeError("node or tests/js/node_modules missing: run `make install`")
    return found


def run_suite(urls: list[str]) -> dict:
    env = {**os.environ, "THREADLINE_URLS": ",".join(urls), "THREADLINE_API_KEY": API_KEY}
    done = subprocess.run(
        [node(), "sdk_suite.mjs"], cwd=JS, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_all_pass(result: dict) -> None:
    assert not result["failed"], "\n\n".join(f"{k}:\n{v}" for k, v in result["failed"].items())
    assert len(result["passed"]) >= 20, result["passed"]


def test_js_sdk_against_two_replicas_on_redis(redis_server, tmp_path) -> None:
    env = redis_env(redis_server, **ENV)
    a = ServiceProcess(env, name="a", log_dir=tmp_path).start()
    b = ServiceProcess(env, name="b", log_dir=tmp_path).start()
    try:
        assert_all_pass(run_suite([a.url, b.url]))
    finally:
        a.kill()
        b.kill()


def test_js_sdk_against_the_sqlite_default(tmp_path) -> None:
    env = {**ENV, "API_KEYS": API_KEYS, "CHECKPOINT_SQLITE_PATH": str(tmp_path / "checkpoints.sqlite")}
    replica = ServiceProcess(env, name="sqlite", log_dir=tmp_path).start()
    try:
        assert_all_pass(run_suite([replica.url]))
    finally:
        replica.kill()
