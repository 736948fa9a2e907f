"""The example graph (examples/refunds) loaded from its langgraph.json through the registry,
run to its interrupt on a real checkpointer, and resumed with ``Command(resume=…)`` by a
second saver on the same store, as another replica would."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from checkpoint_graph import settings_for
from langgraph.types import Command

from threadline.agent.builtin import BuiltinChatModel
from threadline.agent.registry import CHAT, bind_graphs, import_graphs
from threadline.checkpoint import open_checkpointer

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refunds" / "langgraph.json"


async def stream(graph, payload, thread: dict) -> tuple[list[dict], list[dict]]:
    """Run ``payload``; return (custom events, state updates) as they streamed."""
    custom, updates = [], []
    async for mode, chunk in graph.astream(payload, thread, stream_mode=["custom", "updates"]):
        (custom if mode == "custom" else updates).append(chunk)
    return custom, updates


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
async def test_the_example_runs_to_its_interrupt_and_resumes_on_another_saver(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    settings = settings_for(backend, request, tmp_path)
    thread = {"configurable": {"thread_id": uuid.uuid4().hex}}

    async with open_checkpointer(settings) as saver:
        graphs = bind_graphs(import_graphs(EXAMPLE), BuiltinChatModel(), saver)
        assert set(graphs) == {CHAT, "refunds"}
        custom, updates = await stream(graphs["refunds"], {"request": "Refund please", "amount": 250}, thread)
        assert custom == [
            {"node": "triage", "category": "refund"},
            {"node": "review", "waiting_for": "a human"},
        ]
        assert [list(u) for u in updates] == [["triage"], ["__interrupt__"]]
        state = await graphs["refunds"].aget_state(thread)
        assert state.next == ("review",)
        assert [i.value for i in state.interrupts] == [
            {"question": "approve a refund of 250?", "amount": 250}
        ]

    # Another saver on the same store (a new connection, as on another replica) resumes it.
    async with open_checkpointer(settings) as saver:
        graph = bind_graphs(import_graphs(EXAMPLE), BuiltinChatModel(), saver)["refunds"]
        custom, _ = await stream(graph, Command(resume="approve"), thread)
        assert custom[-1] == {"node": "respond", "decision": "approved"}
        state = await graph.aget_state(thread)
        assert state.next == ()
        assert state.values["answer"] == "your refund of 250 is approved"
        assert state.values["trail"] == ["triage", "review", "respond"]


async def test_a_small_refund_and_a_question_need_no_human(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with open_checkpointer(settings_for("sqlite", request, tmp_path)) as saver:
        graph = bind_graphs(import_graphs(EXAMPLE), BuiltinChatModel(), saver)["refunds"]
        small = await graph.ainvoke(
            {"request": "refund", "amount": 20}, {"configurable": {"thread_id": "small"}}
        )
        assert small["decision"] == "approved" and "__interrupt__" not in small
        question = await graph.ainvoke(
            {"request": "where is my parcel?"}, {"configurable": {"thread_id": "q"}}
        )
        assert question["decision"] == "not needed" and question["trail"] == ["triage", "respond"]
