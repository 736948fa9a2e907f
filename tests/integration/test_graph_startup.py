"""A bad LANGGRAPH_CONFIG stops the real service at start-up (``python -m threadline serve``),
exit code 2, with the graph id and the cause on stderr — before any store is opened, and
without the text of a user's exception (which may carry a secret)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servers import free_port

pytestmark = pytest.mark.integration

SECRET = "sk-live-do-not-print-me"
GRAPHS = """
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from typing import TypedDict

class State(TypedDict):
    n: int

builder = StateGraph(State)
builder.add_node("inc", lambda state: {"n": state["n"] + 1})
builder.add_edge(START, "inc")
builder.add_edge("inc", END)
own = builder.compile(checkpointer=InMemorySaver())

def failing():
    raise RuntimeError("OPENAI_API_KEY=SECRET")

import contextlib

@contextlib.asynccontextmanager
async def failing_context(runtime: "ServerRuntime"):
    raise RuntimeError("OPENAI_API_KEY=SECRET")
    yield

@contextlib.asynccontextmanager
async def no_graph(config):
    yield 42

def too_many(config, store, user):
    return builder
""".replace("SECRET", SECRET)


def serve(tmp_path: Path, graphs: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "agent.py").write_text(GRAPHS)
    (tmp_path / "broken.py").write_text("import no_such_dependency\n")
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": graphs}))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        # The tree under test (as tests/servers.py passes it), not the venv's installed one.
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}),
        "LANGGRAPH_CONFIG": str(config),
        # Stores that would not answer: start-up must stop before it tries them.
        "CHECKPOINT_BACKEND": "redis",
        "CHECKPOINT_REDIS_URL": f"redis://127.0.0.1:{free_port()}/1",
    }
    return subprocess.run(
        [sys.executable, "-m", "threadline", "serve", "--host", "127.0.0.1", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("graphs", "expected"),
    [
        ({"mine": "./agent.py:own"}, "graph 'mine' (./agent.py:own): compiled with its own checkpointer"),
        ({"chat": "./broken.py:graph"}, "graph 'chat' (./broken.py:graph): ModuleNotFoundError"),
        (
            {"ok": "./agent.py:builder", "bad": "./agent.py:failing"},
            "graph 'bad' (./agent.py:failing): RuntimeError",
        ),
        ({"cm": "./agent.py:failing_context"}, "graph 'cm' (./agent.py:failing_context): RuntimeError"),
        ({"cm": "./agent.py:no_graph"}, "graph 'cm' (./agent.py:no_graph): is a int, not a graph"),
        ({"f": "./agent.py:too_many"}, "graph 'f' (./agent.py:too_many): a graph factory takes nothing"),
    ],
    ids=[
        "own-checkpointer",
        "broken-import",
        "failing-factory",
        "failing-context-factory",
        "context-factory-without-graph",
        "factory-with-three-arguments",
    ],
)
def test_a_bad_graph_stops_start_up_naming_it(tmp_path: Path, graphs: dict[str, str], expected: str) -> None:
    done = serve(tmp_path, graphs)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "threadline: configuration error: LANGGRAPH_CONFIG: " in done.stderr
    assert expected in done.stderr
    assert SECRET not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
