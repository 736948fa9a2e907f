"""The README's curl and SDK sessions work as written against `make run`'s server (scripts/run-dev.sh)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from servers import free_port, wait_for_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def run_against_make_run(tmp_path: Path, heading: str, fence: str, command: list[str]) -> str:
    """Start `make run`'s server (scripts/run-dev.sh) on a free port, run the README's first
    ``fence`` block under ``heading`` against it with ``command``, and return its output."""
    readme = (ROOT / "README.md").read_text()
    session = re.search(rf"{heading}.*?```{fence}\n(.*?)```", readme, re.S).group(1)
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "PY": sys.executable,
        "CHECKPOINT_SQLITE_PATH": str(tmp_path / "checkpoints.sqlite"),
    }
    server = subprocess.Popen(
        ["scripts/run-dev.sh"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for_port(port, timeout=60)
        done = subprocess.run(
            [*command, session.replace("localhost:8080", f"localhost:{port}")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_readme_curl_session_against_make_run(tmp_path):
    out = run_against_make_run(tmp_path, "## Talk to it", "bash", ["bash", "-euo", "pipefail", "-c"])
    assert out.count('"turn":1,"reply":{"id":"msg-1.reply"') == 2  # the retry got the stored reply
    assert "event: done" in out and "you said: and now stream it" in out
    assert out.rstrip().endswith("204")


def test_readme_sdk_session_against_make_run(tmp_path):
    out = run_against_make_run(tmp_path, "## Talk to it with langgraph-sdk", "python", [sys.executable, "-c"])
    lines = out.splitlines()
    assert lines[0] == "['chat']"
    assert lines[1].startswith("turn 1 · history") and lines[1].endswith("you said: hello")
    assert lines[2].startswith("turn 2 · history") and lines[2].endswith("you said: stream it")
    assert lines[3].startswith("turn 3 · history") and lines[3].endswith("you said: bye")
    assert lines[4] == "idle 6"
