"""``/a2a/{assistant_id}`` (issue 23), driven by the real ``a2a-sdk`` client (0.3, the A2A
0.3 JSON-RPC methods langgraph-api answers in 0.3's shapes) against two real replicas on one
real Redis and one SQLite replica: the agent card, ``message/send`` and ``message/stream``
answered with the built-in model's reply, a conversation continued in its context on the other
replica, ``tasks/get``, an interrupt answered through its task, ``tasks/cancel``; another
principal's task not found; no credentials 401; bad JSON-RPC a JSON-RPC error, never a 5xx."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import DataPart, Message, Part, Role, TaskQueryParams, TaskState, TextPart

from threadline.runs.assistants import assistant_id_of

from client import API_KEY, OTHER_KEY, expected_reply

pytestmark = pytest.mark.integration

GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"
CHAT = assistant_id_of("chat")


@pytest.fixture
def replicas(replicas_on):
    """Two replicas on one Redis, or (``"sqlite"``) one on a SQLite file."""
    return replicas_on


def _message(*parts: Part, context_id: str | None = None, task_id: str | None = None) -> Message:
    return Message(
        role=Role.user, parts=list(parts), message_id=uuid.uuid4().hex, context_id=context_id, task_id=task_id
    )


def _text(text: str) -> Part:
    return Part(root=TextPart(text=text))


async def _client(http: httpx.AsyncClient, url: str, assistant_id: str, streaming: bool):
    card = await A2ACardResolver(http, f"{url}/a2a/{assistant_id}").get_agent_card()
    return card, ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)


async def _last_task(client, message: Message):
    events = [event async for event in client.send_message(message)]
    task, _ = events[-1]
    return task, events


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
async def test_messages_are_runs_on_the_context_thread(replicas, backend: str) -> None:
    procs = replicas(backend)
    a, b = procs[0], procs[-1]
    key = {"X-API-Key": API_KEY}
    async with httpx.AsyncClient(headers=key, timeout=60) as http:
        card, on_a = await _client(http, a.url, CHAT, streaming=False)
        assert card.name == "chat" and card.url == f"{a.url}/a2a/{CHAT}"
        assert card.capabilities.streaming and card.skills[0].name == "chat Capabilities"

        task, _ = await _last_task(on_a, _message(_text("hello")))
        assert task.status.state == TaskState.completed
        assert task.id == f"{task.context_id}:{task.id.split(':')[1]}"
        (artifact,) = task.artifacts
        assert artifact.parts[0].root.text == expected_reply(["hello"])
        assert [m.role for m in task.history] == [Role.user, Role.agent]

        # The next message in the context, streamed from the other replica: the model saw it all.
        _, on_b = await _client(http, b.url, CHAT, streaming=True)
        second, events = await _last_task(on_b, _message(_text("again"), context_id=task.context_id))
        reply = expected_reply(["hello", expected_reply(["hello"]), "again"])
        assert second.context_id == task.context_id and second.id != task.id
        assert second.status.state == TaskState.completed
        assert second.artifacts[-1].parts[0].root.text == reply
        states = [update.status.state for _, update in events if update and hasattr(update, "status")]
        assert states[0] == TaskState.working and states[-1] == TaskState.completed

        got = await on_a.get_task(TaskQueryParams(id=second.id, history_length=2))
        assert got.status.state == TaskState.completed
        assert [m.parts[0].root.text for m in got.history] == ["again", reply]

    # Another principal's task, context or run: not found.
    async with httpx.AsyncClient(headers={"X-API-Key": OTHER_KEY}, timeout=60) as http:
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task.id}}
        answer = (await http.post(f"{b.url}/a2a/{CHAT}", json=rpc)).json()
        assert answer["error"]["code"] == -32001


async def test_an_interrupt_is_answered_through_its_task_and_a_task_cancelled(replicas) -> None:
    a, b = replicas("redis", LANGGRAPH_CONFIG=str(GRAPHS), MODEL_TOKEN_DELAY_MS="200")
    refunds = assistant_id_of("refunds")
    async with httpx.AsyncClient(headers={"X-API-Key": API_KEY}, timeout=60) as http:
        _, on_a = await _client(http, a.url, refunds, streaming=False)
        ticket = Part(root=DataPart(data={"request": "refund please", "amount": 500}))
        task, _ = await _last_task(on_a, _message(ticket))
        assert task.status.state == TaskState.input_required
        assert task.artifacts[0].parts[0].root.data["value"]["amount"] == 500

        _, on_b = await _client(http, b.url, refunds, streaming=False)
        resume = Part(root=DataPart(data={"resume": "approve"}))
        done, _ = await _last_task(on_b, _message(resume, context_id=task.context_id, task_id=task.id))
        assert done.id == task.id and done.status.state == TaskState.completed
        got = await on_a.get_task(TaskQueryParams(id=task.id))
        assert got.status.state == TaskState.completed
        # A finished task takes no more messages and cannot be cancelled.
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "tasks/cancel", "params": {"id": task.id}}
        assert (await http.post(f"{a.url}/a2a/{refunds}", json=rpc)).json()["error"]["code"] == -32002
        again = {"jsonrpc": "2.0", "id": 2, "method": "message/send"}
        again["params"] = {
            "message": {**_message(resume, task_id=task.id).model_dump(mode="json"), "role": "user"}
        }
        assert (await http.post(f"{a.url}/a2a/{refunds}", json=again)).json()["error"]["code"] == -32004

        # A slow reply (the built-in model's 200 ms a token), cancelled from the other replica.
        chat = f"{a.url}/a2a/{CHAT}"
        send = {"jsonrpc": "2.0", "id": 3, "method": "message/stream"}
        send["params"] = {"message": {"role": "user", "parts": [{"kind": "text", "text": "a b c d e f g h"}],
                                      "messageId": "m1"}}  # fmt: skip
        async with http.stream("POST", chat, json=send, headers={"Accept": "text/event-stream"}) as stream:
            lines = stream.aiter_lines()
            async for line in lines:
                if line.startswith("data:"):
                    submitted = httpx.Response(200, content=line[5:]).json()["result"]
                    break
            cancel = {"jsonrpc": "2.0", "id": 4, "method": "tasks/cancel", "params": {"id": submitted["id"]}}
            cancelled = (await http.post(f"{b.url}/a2a/{CHAT}", json=cancel)).json()
            rest = [line async for line in lines if line.startswith("data:")]
        assert cancelled["result"]["status"]["state"] == "canceled"
        last = httpx.Response(200, content=rest[-1][5:]).json()["result"]
        assert last["final"] and last["status"]["state"] == "canceled"
        _, chat_client = await _client(http, a.url, CHAT, streaming=False)
        got = await chat_client.get_task(TaskQueryParams(id=submitted["id"]))
        assert got.status.state == TaskState.canceled


async def test_refusals_are_json_rpc_errors_never_5xx(replicas) -> None:
    (a,) = replicas("sqlite")
    url = f"{a.url}/a2a/{CHAT}"
    message = {"role": "user", "parts": [{"kind": "text", "text": "hi"}], "messageId": "m"}
    async with httpx.AsyncClient(timeout=30) as http:
        send = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
        assert (await http.post(url, json=send)).status_code == 401
        assert (await http.get(f"{url}/.well-known/agent-card.json")).status_code == 401

        http.headers["X-API-Key"] = API_KEY

        async def code(body: object, target: str = url) -> int:
            response = await http.post(target, json=body)
            assert response.status_code == 200, response.text
            return response.json()["error"]["code"]

        assert (await http.post(url, content=b"{oops")).json()["error"]["code"] == -32700
        assert await code([send]) == -32600
        assert await code({**send, "jsonrpc": "1.0"}) == -32600
        assert await code({**send, "method": "nope"}) == -32601
        assert await code({**send, "id": {"x": 1}}) == -32600
        assert await code({**send, "params": {}}) == -32602
        assert await code({**send, "params": []}) == -32602
        assert await code(send, f"{a.url}/a2a/not-a-uuid") == -32602
        assert await code(send, f"{a.url}/a2a/{uuid.uuid4()}") == -32602  # no such assistant
        file = {**message, "parts": [{"kind": "file", "file": {"uri": "http://x"}}]}
        assert await code({**send, "params": {"message": file}}) == -32005
        bad_context = {**message, "contextId": "a/b"}
        assert await code({**send, "params": {"message": bad_context}}) == -32602
        history = {"message": message, "configuration": {"historyLength": 11}}
        assert await code({**send, "params": history}) == -32602
        get = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x:y"}}
        assert await code(get) == -32001
        assert await code({**get, "params": {"id": 5}}) == -32602
        # message/stream needs an Accept of text/event-stream; the others application/json.
        stream = {**send, "method": "message/stream"}
        assert (await http.post(url, json=stream, headers={"Accept": "application/json"})).status_code == 400
        assert (await http.post(url, json=send, headers={"Accept": "text/html"})).status_code == 400
        # A2A 1.0 names answer in 1.0's shapes.
        v1 = await http.post(url, json={**send, "method": "SendMessage"})
        task = v1.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED" and task["history"][0]["role"] == "ROLE_USER"
        extended = await http.post(
            url, json={"jsonrpc": "2.0", "id": 9, "method": "agent/getAuthenticatedExtendedCard"}
        )
        assert extended.json()["result"]["name"] == "chat"
        card = (await http.get(f"{a.url}/.well-known/agent-card.json", params={"assistant_id": CHAT})).json()
        assert card["name"] == "chat"
        assert (await http.get(f"{a.url}/.well-known/agent-card.json")).status_code == 400
        assert (await http.get(f"{a.url}/a2a/{uuid.uuid4()}")).status_code == 400
        assert (await http.delete(url)).status_code == 405
