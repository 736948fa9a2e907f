"""Test graphs made by factories, one of each kind langgraph-api accepts (ADR 0018). Each bakes
what it was called with into the graph it makes, so a run's result shows that the factory was
called for that run, with that run's config or runtime.

``cm`` is an async context manager: it appends ``<pid> enter|exit <access> <run_id>`` to the
file ``FACTORY_LOG`` names (set by the test), and its node ``<pid> node <run_id>``; the node
fails when the input asks (``fail``) and waits while the input ``hold``s until the file
``FACTORY_LOG`` + ``.gate`` exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph_sdk.runtime import ServerRuntime
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    hold: bool
    fail: bool
    made: dict[str, Any]
    by: int


def _graph(made: dict[str, Any]):
    """One node that writes ``made`` (what the factory saw) and this process's pid."""

    async def node(state: State) -> dict:
        return {"made": made, "by": os.getpid()}

    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    return builder.compile()


_calls = itertools.count(1)


def zero():
    """Takes nothing: ``made.call`` counts its calls in this process."""
    return _graph({"call": next(_calls)})


def configured(config: RunnableConfig):
    """Takes the run's config: ``made`` holds its ``greeting`` and thread."""
    configurable = config.get("configurable") or {}
    return _graph({"greeting": configurable.get("greeting"), "thread_id": configurable.get("thread_id")})


async def with_runtime(runtime: ServerRuntime):
    """Takes a ServerRuntime: ``made`` holds its access context, user and run context; it
    writes the run's context into the store it was given (the run owner's)."""
    execution = runtime.execution_runtime
    context = dict(execution.context or {}) if execution is not None else None
    if execution is not None:
        await runtime.store.aput(("factory",), "seen", {"context": context})
    user = runtime.user.identity if runtime.user is not None else None
    return _graph({"access": runtime.access_context, "user": user, "context": context})


def _log(line: str) -> None:
    path = os.environ.get("FACTORY_LOG")
    if path:
        with open(path, "a") as file:
            file.write(f"{os.getpid()} {line}\n")


async def _held(state: State, config: RunnableConfig) -> dict:
    run_id = config["metadata"].get("run_id")
    _log(f"node {run_id}")
    if state.get("fail"):
        raise ValueError("asked to fail")
    if state.get("hold"):
        gate = Path(os.environ["FACTORY_LOG"] + ".gate")
        while not gate.exists():
            await asyncio.sleep(0.05)
    return {"by": os.getpid()}


_cm_builder = StateGraph(State)
_cm_builder.add_node("node", _held)
_cm_builder.add_edge(START, "node")
_cm_builder.add_edge("node", END)
_cm_graph = _cm_builder.compile()


@contextlib.asynccontextmanager
async def cm(config: RunnableConfig, runtime: ServerRuntime):
    """An async context manager: its enter and exit are logged, with the run they are for."""
    run_id = (config.get("metadata") or {}).get("run_id", "-")
    _log(f"enter {runtime.access_context} {run_id}")
    try:
        yield _cm_graph
    finally:
        _log(f"exit {runtime.access_context} {run_id}")
