"""A conversation written by one pod is continued by a new pod with its full history.

Per backend: two turns through one ``open_checkpointer`` instance, then the instance is closed
and a FRESH one (new clients, new pool, new sqlite connection: a "new pod") runs the third
turn. The reply is a function of the whole history, so it proves the new pod saw it all.
``memory`` is shown NOT to survive: it is pod-local by design.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoint_graph import build_graph, expected_reply, settings_for
from langchain_core.messages import HumanMessage

from threadline.checkpoint import open_checkpointer
from threadline.config import CheckpointSettings

pytestmark = pytest.mark.integration

THREAD = {"configurable": {"thread_id": "conversation-1"}}


async def turn(settings_or_saver: object, content: str) -> list[str]:
    graph = build_graph(settings_or_saver)  # type: ignore[arg-type]
    result = await graph.ainvoke({"messages": [HumanMessage(content)]}, THREAD)
    return [str(m.content) for m in result["messages"]]


async def two_turns_then_new_pod(settings: CheckpointSettings) -> list[str]:
    async with open_checkpointer(settings) as first_pod:
        await turn(first_pod, "hello")
        history = await turn(first_pod, "how are you")
    assert history == [
        "hello",
        expected_reply([], "hello"),
        "how are you",
        expected_reply(["hello", expected_reply([], "hello")], "how are you"),
    ]
    async with open_checkpointer(settings) as new_pod:
        return await turn(new_pod, "still there?")


@pytest.mark.parametrize("backend", ["sqlite", "redis", "redis-stack", "postgres"])
async def test_new_pod_continues_the_conversation(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    messages = await two_turns_then_new_pod(settings_for(backend, request, tmp_path))
    earlier = messages[:4]
    assert len(messages) == 6
    assert messages[4] == "still there?"
    assert messages[5] == expected_reply(earlier, "still there?")
    assert messages[5].startswith("turn 3 · ")


async def test_memory_does_not_survive_a_new_pod(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    messages = await two_turns_then_new_pod(settings_for("memory", request, tmp_path))
    assert messages == [
        "still there?",
        expected_reply([], "still there?"),
    ]  # turn 1 again
