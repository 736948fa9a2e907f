"""What ``/mcp`` and ``/a2a`` make of names, schemas and shapes, as langgraph-api 0.16.7 makes
them (``langgraph_api/api/mcp/_sanitizers.py``, ``a2a.py``'s ``_to_spec_format``); the routes
themselves run against real replicas in tests/integration/test_mcp.py and test_a2a.py."""

from __future__ import annotations

import pytest
from langgraph.graph import MessagesState, StateGraph

from threadline.api.langgraph.a2a_shapes import accepts, to_spec_03
from threadline.api.langgraph.mcp import normalize_name, simplify_schema

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "tool"),
    [
        ("chat", "chat"),
        ("  My   helper ", "My_helper"),
        ("ünïcode/slash:colon", "ncodeslashcolon"),
        ("a.b-c_d", "a.b-c_d"),
        ("x" * 200, "x" * 128),
    ],
)
def test_an_assistant_name_becomes_a_tool_name(name: str, tool: str) -> None:
    assert normalize_name(name) == tool


def test_a_message_list_becomes_one_string_and_langchain_definitions_go() -> None:
    graph = StateGraph(MessagesState).add_node("n", lambda s: s).set_entry_point("n").compile()
    schema = graph.get_input_jsonschema()
    assert "AIMessage" in schema["$defs"]
    simplify_schema(schema)
    assert "$defs" not in schema
    assert schema["properties"]["messages"] == {
        "type": "string",
        "title": "Messages",
        "description": "The user message to send to the agent.",
    }


def test_a_schema_without_messages_is_left_alone() -> None:
    schema = {"type": "object", "properties": {"topic": {"type": "string"}}, "$defs": {"X": {}}}
    simplify_schema(schema)
    assert schema == {"type": "object", "properties": {"topic": {"type": "string"}}, "$defs": {"X": {}}}


def test_a2a_1_0_shapes_become_0_3_shapes() -> None:
    answer = {
        "jsonrpc": "2.0",
        "result": {
            "task": {"status": {"state": "TASK_STATE_INPUT_REQUIRED"}, "history": [{"role": "ROLE_USER"}]}
        },
    }
    assert to_spec_03(answer) == {
        "jsonrpc": "2.0",
        "result": {"status": {"state": "input-required"}, "history": [{"role": "user"}]},
    }


@pytest.mark.parametrize(
    ("accept", "wanted", "ok"),
    [
        ("application/json", "application/json", True),
        ("text/event-stream;q=0.9, application/*", "application/json", True),
        ("*/*", "text/event-stream", True),
        ("text/html", "application/json", False),
        ("", "application/json", False),
    ],
)
def test_accept_header(accept: str, wanted: str, ok: bool) -> None:
    assert accepts(accept, wanted) is ok
