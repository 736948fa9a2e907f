"""The reference server, ``langgraph dev`` (langgraph-api's in-memory runtime), as a real process
on a free port: what the oracle tests hold threadline to, and what the benchmarks compare with.

It lives in a venv of its own, ``.cache/langgraph-dev`` (made once, pinned: an oracle that moves
under the tests is no oracle), since langgraph-api pins versions of langgraph that threadline
need not share.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from servers import free_port

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".cache" / "langgraph-dev"
# langgraph-api 0.16.7 is the version the compatibility table (docs/compatibility.md) speaks of.
PACKAGES = ("langgraph-cli[inmem]==0.4.40", "langgraph-api==0.16.7", "langgraph-runtime-inmem==0.36.7")
# `langgraph dev` prints e.g. "- 🚀 API: http://127.0.0.1:2024" (the URL in colour codes); it
# binds another port when the one asked for is taken, so the port is read from here.
_PORT_LINE = re.compile(r"API: (?:\x1b\[[0-9;]*m)?http://127\.0\.0\.1:(\d+)")
# threadline's settings mean something else to langgraph-api (LANGGRAPH_CONFIG is a JSON object
# of per-graph configs there): the reference starts without them.
_OURS = ("LANGGRAPH_CONFIG", "CHECKPOINT_", "SESSION_", "REDIS_", "API_KEYS", "PORT", "HOST")


def reference_venv(extra: tuple[str, ...] = ()) -> Path:
    """The reference's venv with :data:`PACKAGES` (and ``extra``) installed, made once."""
    marker, wanted = VENV / ".installed", {*PACKAGES, *extra}
    installed = set(marker.read_text().split()) if marker.exists() else set()
    if not wanted <= installed:
        print(f"installing {' '.join(sorted(wanted))} into {VENV.relative_to(ROOT)} (once)", flush=True)
        if not (VENV / "bin" / "pip").exists():
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", *sorted(wanted)], check=True)
        marker.write_text(" ".join(sorted(wanted | installed)))
    return VENV


def server_env() -> dict[str, str]:
    """This process's environment without threadline's settings, for a peer server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    env.update(LANGSMITH_TRACING="false", LANGCHAIN_TRACING_V2="false", PYTHONUNBUFFERED="1")
    return env


def graphs_config(work: Path, graphs: dict[str, str], **keys: object) -> Path:
    """A ``langgraph.json`` in ``work`` serving ``graphs`` (id → ``file.py:attr`` with the file
    by absolute path: ``langgraph dev`` reads paths relative to its working directory)."""
    path = work / "langgraph.json"
    path.write_text(json.dumps({"dependencies": ["."], "graphs": graphs, **keys}, indent=2))
    return path


@dataclass(frozen=True)
class Reference:
    url: str
    pid: int  # of its process group's leader (the benchmarks count its tree's CPU)


@contextlib.contextmanager
def langgraph_dev(
    config: Path, env: dict[str, str] | None = None, extra: tuple[str, ...] = (), timeout: float = 120.0
) -> Iterator[Reference]:
    """``langgraph dev`` serving ``config`` from its folder (where it keeps its state's
    snapshots, so give each server a folder of its own); stopped at the end."""
    work = config.parent
    log = work / "langgraph-dev.log"
    command = [
        str(reference_venv(extra) / "bin" / "langgraph"), "dev", "--config", str(config),
        "--host", "127.0.0.1", "--port", str(free_port()), "--no-browser", "--no-reload",
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command, cwd=work, env={**server_env(), **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        yield Reference(_wait_started(proc, log, timeout), proc.pid)
    finally:
        stop_process_group(proc)


def _wait_started(proc: subprocess.Popen, log: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if found := _PORT_LINE.search(log.read_text(errors="replace")):
            url = f"http://127.0.0.1:{found[1]}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/ok", timeout=1.0).status_code == 200:
                    return url
        time.sleep(0.2)
    raise RuntimeError(f"langgraph dev did not start:\n{log.read_text(errors='replace')[-2000:]}")


def stop_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, SIGKILL after 10 s."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def seeded_id(rng: random.Random) -> str:
    """A UUID from a seeded random source: an oracle's sequence names the same ids each run."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


# langgraph-api's paging headers, compared beside the body.
PAGING = ("x-pagination-total", "x-pagination-next")


def answer_of(response: httpx.Response, comparable: Callable[[Any], Any]) -> tuple[int, Any, dict[str, str]]:
    """What an oracle test compares of an answer: its status, its body made ``comparable`` (on
    success only: error texts differ on purpose) and its paging headers."""
    body = comparable(response.json()) if response.is_success and response.content else None
    return response.status_code, body, {h: response.headers[h] for h in PAGING if h in response.headers}
