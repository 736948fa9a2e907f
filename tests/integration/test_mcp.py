"""``/mcp`` (issue 23), driven by the real ``mcp`` client (``streamable_http_client`` and
``ClientSession``) against two real replicas on one real Redis and one SQLite replica: the
caller's assistants listed as tools (another principal's not), a tool call answered with the
built-in model's reply, run on the other replica; no credentials 401; bad JSON-RPC a 4xx or a
JSON-RPC error, never a 5xx."""

from __future__ import annotations

from pathlib import Path

import httpx
import httpx2
import pytest
from langgraph_sdk import get_client
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from threadline.runs.assistants import assistant_id_of

from client import API_KEY, OTHER_KEY, expected_reply
from servers import redis_env

pytestmark = pytest.mark.integration

PROBE_CONFIG = Path(__file__).parent / "auth_probe" / "langgraph.json"
JSON_AND_SSE = {"Accept": "application/json, text/event-stream"}


@pytest.fixture
def replicas(replicas_on):
    """Two replicas on one Redis, or (``"sqlite"``) one on a SQLite file; the built-in chat graph."""
    return replicas_on


async def _tools_and_call(url: str, call_url: str, name: str, arguments: dict):
    """The tools an MCP client lists at ``url``, and a call of ``name`` through ``call_url``."""
    async with httpx2.AsyncClient(headers={"X-API-Key": API_KEY}, timeout=60) as http:
        async with streamable_http_client(f"{url}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                tools = (await session.list_tools()).tools
        async with streamable_http_client(f"{call_url}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool(name, arguments)
    return init, tools, result


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
async def test_assistants_are_tools_and_a_call_runs_one(replicas, backend: str) -> None:
    procs = replicas(backend)
    a, b = procs[0], procs[-1]
    alice = get_client(url=a.url, api_key=API_KEY)
    bob = get_client(url=b.url, api_key=OTHER_KEY)
    await alice.assistants.create("chat", name="My helper", description="answers alice")
    await bob.assistants.create("chat", name="Bobs bot")

    init, tools, result = await _tools_and_call(a.url, b.url, "My_helper", {"messages": "hello"})

    assert init.server_info.name == "LangGraph"
    by_name = {t.name: t for t in tools}
    assert set(by_name) == {"chat", "My_helper"}  # bob's assistant is not alice's tool
    helper = by_name["My_helper"]
    assert helper.title == "My helper" and helper.description == "answers alice"
    # The graph's input schema, its message list made one string for a model to fill in.
    assert helper.input_schema["type"] == "object"
    assert helper.input_schema["properties"]["messages"]["type"] == "string"
    assert "$defs" not in helper.input_schema or "AIMessage" not in helper.input_schema["$defs"]
    assert by_name["chat"].description == "Tool based on the chat assistant"

    assert not result.is_error
    (content,) = result.content
    # The run's values, as langgraph-api answers them (Python's repr of them).
    assert expected_reply(["hello"]) in content.text
    assert content.text.startswith("{'messages': [")


async def test_refusals_are_4xx_or_json_rpc_errors(replicas) -> None:
    (a,) = replicas("sqlite")
    key = {"X-API-Key": API_KEY}
    async with httpx.AsyncClient(base_url=a.url, timeout=30) as http:
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        assert (await http.post("/mcp", json=request, headers=JSON_AND_SSE)).status_code == 401
        assert (await http.get("/mcp")).status_code == 401

        headers = {**key, **JSON_AND_SSE}
        assert (await http.get("/mcp", headers=key)).status_code == 405
        assert (await http.delete("/mcp", headers=key)).status_code == 404
        bad = await http.post("/mcp", content=b"{not json", headers=headers)
        assert bad.status_code == 400 and bad.json()["detail"] == "Invalid JSON"
        no_accept = await http.post("/mcp", json=request, headers={**key, "Accept": "text/html"})
        assert no_accept.status_code == 400
        for body in ([request], {"id": 1, "method": "ping"}, {"jsonrpc": "2.0"}, "x"):
            assert (await http.post("/mcp", json=body, headers=headers)).status_code == 400
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post("/mcp", json=note, headers=headers)).status_code == 202

        async def rpc(method: str, params: object = None) -> dict:
            body = {"jsonrpc": "2.0", "id": "x", "method": method, "params": params}
            response = await http.post("/mcp", json=body, headers=headers)
            assert response.status_code == 200, response.text
            return response.json()

        assert (await rpc("nope"))["error"]["code"] == -32601
        assert (await rpc("ping"))["result"] == {}
        assert (await rpc("tools/call", {"name": "nope"}))["error"]["message"] == "Unknown tool: nope"
        assert (await rpc("tools/call", {"arguments": {}}))["error"]["code"] == -32602
        # A run that fails is the tool's error (its error's name, as langgraph-api answers).
        failed = await rpc("tools/call", {"name": "chat", "arguments": {"messages": 5}})
        assert failed["result"] == {
            "isError": True,
            "content": [{"type": "text", "text": "NotImplementedError"}],
        }
        # A run refused before it starts (context not an object) is a JSON-RPC error.
        wrong = await rpc("tools/call", {"name": "chat", "arguments": {}, "context": "x"})
        assert wrong["error"]["code"] == -32602
        paged = await rpc("tools/list", {"cursor": "not a number"})
        assert [t["name"] for t in paged["result"]["tools"]] == ["chat"]
        assert (await rpc("tools/list", {"cursor": "100"}))["result"] == {"tools": []}
        old = await rpc("initialize", {"protocolVersion": "2024-11-05"})
        assert old["result"]["protocolVersion"] == "2024-11-05"
        unknown = await rpc("initialize", {"protocolVersion": "1999-01-01"})
        assert unknown["result"]["protocolVersion"] == "2025-11-25"


async def test_custom_auth_handlers_filter_tools_and_agents(fresh_redis, start_replica, tmp_path) -> None:
    """The probe module's ``assistants`` handler hides the built-ins from a ``filtered`` caller
    and shows the assistants it stamped (tests/integration/auth_probe), on ``/mcp`` and on
    ``/a2a`` alike."""
    env = redis_env(
        fresh_redis, API_KEYS="", LANGGRAPH_CONFIG=str(PROBE_CONFIG), PROBE_CALLS_DIR=str(tmp_path)
    )
    replica = start_replica(env, "probe")
    plain = {"Authorization": "Bearer user-mia", **JSON_AND_SSE}
    filtered = {**plain, "X-Probe-Filtered": "1"}
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx.AsyncClient(base_url=replica.url, timeout=30) as http:

        async def names(headers: dict) -> set[str]:
            answer = (await http.post("/mcp", json=listing, headers=headers)).json()
            return {t["name"] for t in answer["result"]["tools"]}

        assert "greeter" in await names(plain)
        assert await names(filtered) == set()
        made = await http.post("/assistants", json={"graph_id": "greeter", "name": "Mine"}, headers=plain)
        assert made.status_code == 200, made.text
        assert await names(filtered) == {"Mine"}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "greeter"}}
        answer = (await http.post("/mcp", json=call, headers=filtered)).json()
        assert answer["error"]["message"] == "Unknown tool: greeter"
        nobody = {"Authorization": "Bearer nobody"}
        assert (await http.post("/mcp", json=listing, headers=nobody)).status_code == 401

        greeter = f"/a2a/{assistant_id_of('greeter')}"
        message = {"role": "user", "parts": [{"kind": "data", "data": {}}], "messageId": "m"}
        send = {"jsonrpc": "2.0", "id": 3, "method": "message/send", "params": {"message": message}}
        answer = (await http.post(greeter, json=send, headers=filtered)).json()
        assert answer["error"] == {"code": -32602, "message": f"Assistant '{greeter[5:]}' not found"}
        card = await http.get(f"{greeter}/.well-known/agent-card.json", headers=plain)
        assert card.status_code == 200 and card.json()["name"] == "greeter"
        assert (await http.get(f"{greeter}/.well-known/agent-card.json", headers=filtered)).status_code == 400
