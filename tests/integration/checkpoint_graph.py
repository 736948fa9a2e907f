"""A small LangGraph graph for checkpoint tests, and the settings of each backend under test.

Not a test module (no ``test_`` prefix); imported by the checkpoint tests next to it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from threadline import config
from threadline.config import CheckpointSettings

from servers import RedisServer

# `redis` is threadline's own saver, in db 1 as in production; `redis-stack` must use db 0.
BACKENDS = ("memory", "sqlite", "redis", "redis-stack", "postgres")


def expected_reply(history: list[str], content: str) -> str:
    """The reply the graph gives to ``content`` after ``history`` (the built-in model's rule)."""
    digest = hashlib.sha256("".join(m + "\n" for m in history).encode()).hexdigest()[:12]
    turn = len(history) // 2 + 1
    return f"turn {turn} · history {digest} · you said: {content}"


def _reply(state: MessagesState) -> dict[str, list[BaseMessage]]:
    *earlier, last = state["messages"]
    return {"messages": [AIMessage(expected_reply([str(m.content) for m in earlier], str(last.content)))]}


def build_graph(checkpointer: BaseCheckpointSaver) -> CompiledStateGraph:
    """``START → reply → END`` over ``MessagesState``; the reply depends on the whole history."""
    graph = StateGraph(MessagesState)
    graph.add_node("reply", _reply)
    graph.add_edge(START, "reply")
    graph.add_edge("reply", END)
    return graph.compile(checkpointer=checkpointer)


def settings_for(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointSettings:
    """Settings for ``backend`` on a fresh store, starting only the server it needs.

    sqlite: a new file under ``tmp_path``; redis: a Redis of this test's own (db 1, as in
    production); redis-stack: the session's Redis 8 with modules, db 0 flushed; postgres: a
    new database.
    """
    overrides: dict[str, object] = {"backend": backend}
    if backend == "sqlite":
        overrides["sqlite_path"] = tmp_path / "state" / "checkpoints.sqlite"
    elif backend == "redis":
        overrides["redis_url"] = request.getfixturevalue("fresh_redis").url(1)
    elif backend == "redis-stack":
        server = request.getfixturevalue("redis_stack_server")
        flush(server, 0)
        overrides["redis_url"] = server.url(0)
    elif backend == "postgres":
        overrides["postgres_url"] = request.getfixturevalue("postgres_url")
    return config.load(CheckpointSettings, **overrides)


def flush(server: RedisServer, db: int) -> None:
    """Empty one db of ``server`` (a fresh store for the next saver)."""
    import redis

    with redis.Redis.from_url(server.url(db)) as client:
        client.flushdb()
