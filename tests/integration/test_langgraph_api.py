"""The LangGraph API driven by the real ``langgraph-sdk`` (async and sync) and ``RemoteGraph``
against two real replicas on one real Redis, serving the built-in ``chat`` graph and the example
graph ``refunds`` (examples/refunds: custom state, custom stream events, an interrupt)."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from langgraph.pregel.remote import RemoteGraph
from langgraph.types import Command
from langgraph_sdk import get_client, get_sync_client
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError

from threadline.runs.assistants import assistant_id_of

from client import API_KEY, OTHER_KEY, Client, connect, expected_reply, metric, read_response, status_of
from servers import ServiceProcess, redis_env, until

pytestmark = pytest.mark.integration

# The example graph plus a test graph with a subgraph and a run context (graphs/nested.py).
GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"
# 9 tokens of the built-in model at 60 ms: a chat run streams for ~0.5 s, long enough to join,
# resume and cancel it from the other replica while it runs.
ENV = {"LANGGRAPH_CONFIG": str(GRAPHS), "MODEL_TOKEN_DELAY_MS": "60", "TURN_LEASE_WAIT_SECONDS": "10"}
HI = {"messages": [{"role": "user", "content": "hi"}]}
# The built-in model streams token by token (with the delay) only when someone listens to
# messages; otherwise it answers at once.
SLOW = ["values", "messages-tuple"]
REFUND = {"request": "refund please", "amount": 250}


@dataclass
class Pair:
    a: ServiceProcess
    b: ServiceProcess

    def client(self, replica: str = "a", key: str = API_KEY):
        return get_client(url=getattr(self, replica).url, api_key=key)


@pytest.fixture(scope="module")
def pair(redis_server, tmp_path_factory) -> Iterator[Pair]:
    logs = tmp_path_factory.mktemp("replicas")
    env = redis_env(redis_server, **ENV)
    a = ServiceProcess(env, name="a", log_dir=logs).start()
    b = ServiceProcess(env, name="b", log_dir=logs).start()
    yield Pair(a, b)
    a.kill()
    b.kill()


async def _status(client, tid: str, run_id: str, status: str) -> bool:
    return (await client.runs.get(tid, run_id))["status"] == status


async def test_assistants_are_the_graphs_by_graph_id_and_uuid(pair: Pair) -> None:
    client = pair.client()
    found = await client.assistants.search()
    assert {a["graph_id"] for a in found} == {"chat", "refunds", "nested", "steps", "tools"}
    by_uuid = await client.assistants.get(assistant_id_of("refunds"))
    by_graph_id = await pair.client("b").assistants.get("refunds")
    assert by_uuid == by_graph_id and by_uuid["assistant_id"] == assistant_id_of("refunds")
    assert await client.assistants.search(graph_id="chat", limit=5) == [await client.assistants.get("chat")]
    graph = await client.assistants.get_graph("refunds")
    assert {n["id"] for n in graph["nodes"]} >= {"triage", "review", "respond"}
    schemas = await client.assistants.get_schemas("refunds")
    assert set(schemas["input_schema"]["properties"]) >= {"request", "amount"}
    assert "trail" in schemas["state_schema"]["properties"]
    with pytest.raises(UnprocessableEntityError):  # neither a UUID nor a graph id, as langgraph-api
        await client.assistants.get("nope")
    with pytest.raises(NotFoundError):
        await client.assistants.get(str(uuid.uuid4()))


async def test_threads_create_get_update_search_count_delete(pair: Pair) -> None:
    a, b = pair.client("a"), pair.client("b")
    tag = uuid.uuid4().hex
    thread = await a.threads.create(metadata={"tag": tag, "kind": "x"})
    assert thread["status"] == "idle" and thread["metadata"] == {"tag": tag, "kind": "x"}
    assert await b.threads.get(thread["thread_id"]) == thread
    with pytest.raises(ConflictError):
        await b.threads.create(thread_id=thread["thread_id"])
    same = await b.threads.create(thread_id=thread["thread_id"], if_exists="do_nothing")
    assert same["thread_id"] == thread["thread_id"]
    mine = await a.threads.create(thread_id=str(uuid.uuid4()), metadata={"tag": tag, "kind": "y"})

    patched = await b.threads.update(thread["thread_id"], metadata={"kind": "z"})
    assert patched["metadata"] == {"tag": tag, "kind": "z"}
    # Last changed first, as langgraph-api lists them: the patch moved `thread` ahead.
    found = await a.threads.search(metadata={"tag": tag})
    assert [t["thread_id"] for t in found] == [thread["thread_id"], mine["thread_id"]]
    found = await a.threads.search(metadata={"tag": tag}, sort_by="created_at")
    assert [t["thread_id"] for t in found] == [mine["thread_id"], thread["thread_id"]]
    assert [t["thread_id"] for t in await a.threads.search(metadata={"tag": tag, "kind": "z"})] == [
        thread["thread_id"]
    ]
    assert await a.threads.count(metadata={"tag": tag}) == 2
    assert await a.threads.search(metadata={"tag": tag}, status="busy") == []

    await b.threads.delete(thread["thread_id"])
    with pytest.raises(NotFoundError):
        await a.threads.get(thread["thread_id"])
    assert [t["thread_id"] for t in await a.threads.search(metadata={"tag": tag})] == [mine["thread_id"]]


async def test_wait_and_stream_on_one_replica(pair: Pair) -> None:
    client = pair.client()
    thread = await client.threads.create()
    tid = thread["thread_id"]
    created = []
    result = await client.runs.wait(tid, "chat", input=HI, on_run_created=created.append)
    assert [m["type"] for m in result["messages"]] == ["human", "ai"]
    assert result["messages"][1]["content"] == expected_reply(["hi"])
    assert created and created[0]["thread_id"] == tid

    parts = [
        p
        async for p in client.runs.stream(
            tid,
            "chat",
            input={"messages": [{"role": "user", "content": "again"}]},
            stream_mode=["values", "updates", "messages-tuple", "debug"],
        )
    ]
    events = [p.event for p in parts]
    assert events[0] == "metadata" and parts[0].data["run_id"]
    assert {"values", "updates", "messages", "debug"} <= set(events)
    tokens = "".join(
        p.data[0]["content"] for p in parts if p.event == "messages" and p.data[0]["type"] == "AIMessageChunk"
    )
    assert tokens == expected_reply(["hi", expected_reply(["hi"]), "again"])
    last_values = [p.data for p in parts if p.event == "values"][-1]
    assert len(last_values["messages"]) == 4
    ids = [p.id for p in parts]
    assert all(ids) and ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))

    runs = await client.runs.list(tid)
    assert [r["status"] for r in runs] == ["success", "success"]
    assert (await client.threads.get(tid))["status"] == "idle"


async def test_content_location_names_the_run(pair: Pair) -> None:
    async with httpx.AsyncClient(base_url=pair.a.url, headers={"x-api-key": API_KEY}) as http:
        thread = (await http.post("/threads", json={})).json()
        response = await http.post(
            f"/threads/{thread['thread_id']}/runs/wait", json={"assistant_id": "chat", "input": HI}
        )
        assert response.status_code == 200
        run_path = response.headers["content-location"]
        assert run_path.startswith(f"/threads/{thread['thread_id']}/runs/")
        assert response.headers["location"] == f"{run_path}/join"
        run = (await http.get(run_path)).json()
        assert run["status"] == "success" and run_path.endswith(run["run_id"])


async def test_custom_events_stream_and_an_interrupt_is_resumed_with_command(pair: Pair) -> None:
    a, b = pair.client("a"), pair.client("b")
    thread = await a.threads.create()
    tid = thread["thread_id"]
    parts = [p async for p in a.runs.stream(tid, "refunds", input=REFUND, stream_mode=["custom", "updates"])]
    custom = [p.data for p in parts if p.event == "custom"]
    assert custom == [{"node": "triage", "category": "refund"}, {"node": "review", "waiting_for": "a human"}]
    interrupt = next(p.data for p in parts if p.event == "updates" and "__interrupt__" in p.data)
    assert interrupt["__interrupt__"][0]["value"] == {"question": "approve a refund of 250?", "amount": 250}

    # Interrupted: the thread says so, search finds it, its state holds the interrupt.
    assert (await b.threads.get(tid))["status"] == "interrupted"
    assert tid in [t["thread_id"] for t in await b.threads.search(status="interrupted", limit=1000)]
    state = await b.threads.get_state(tid)
    assert state["next"] == ["review"] and state["interrupts"][0]["value"]["amount"] == 250

    # Resumed from the other replica.
    result = await b.runs.wait(tid, "refunds", command={"resume": "approve"})
    assert result["answer"] == "your refund of 250 is approved"
    assert result["trail"] == ["triage", "review", "respond"]
    assert (await a.threads.get(tid))["status"] == "idle"


async def test_wait_returns_the_interrupt(pair: Pair) -> None:
    client = pair.client()
    thread = await client.threads.create()
    result = await client.runs.wait(thread["thread_id"], "refunds", input=REFUND)
    assert result["__interrupt__"][0]["value"]["amount"] == 250
    assert result["trail"] == ["triage"]


async def test_background_run_is_joined_and_streamed_from_the_other_replica(pair: Pair) -> None:
    a, b = pair.client("a"), pair.client("b")
    thread = await a.threads.create()
    tid = thread["thread_id"]
    run = await a.runs.create(tid, "chat", input=HI, stream_mode=["values", "messages-tuple"])
    assert run["status"] in ("pending", "running")
    parts = [p async for p in b.runs.join_stream(tid, run["run_id"])]
    assert parts[0].event == "metadata"
    assert sum(p.event == "messages" for p in parts) >= 9
    result = await b.runs.join(tid, run["run_id"])
    assert result["messages"][-1]["content"] == expected_reply(["hi"])
    assert (await b.runs.get(tid, run["run_id"]))["status"] == "success"


async def test_last_event_id_resumes_on_the_other_replica(pair: Pair) -> None:
    a, b = pair.client("a"), pair.client("b")
    thread = await a.threads.create()
    tid = thread["thread_id"]
    run = await a.runs.create(tid, "chat", input=HI, stream_mode=["messages-tuple", "values"])
    head = []
    stream = a.runs.join_stream(tid, run["run_id"])
    async for part in stream:
        head.append(part)
        if len(head) == 3:
            break
    await stream.aclose()  # the client goes away mid-run
    rest = [p async for p in b.runs.join_stream(tid, run["run_id"], last_event_id=head[-1].id)]
    whole = [p async for p in b.runs.join_stream(tid, run["run_id"])]
    assert [p.id for p in head + rest] == [p.id for p in whole]
    # "-1" (what the JS SDK sends to replay a run) means from the start.
    replay = [p async for p in a.runs.join_stream(tid, run["run_id"], last_event_id="-1")]
    assert [p.id for p in replay] == [p.id for p in whole]
    assert [p.data for p in head + rest] == [p.data for p in whole]
    assert whole[-1].event == "values"


async def test_thread_join_stream_follows_the_threads_runs_across_replicas(pair: Pair) -> None:
    a, b = pair.client("a"), pair.client("b")
    tid = (await a.threads.create())["thread_id"]
    parts: list = []
    ended = asyncio.Event()

    async def follow(client, last_event_id=None, until=2) -> None:
        async for part in await client.threads.join_stream(tid, last_event_id=last_event_id):
            parts.append(part)
            if sum(p.event == "values" and "answer" in p.data for p in parts) >= until:
                ended.set()
                return

    # Opened while the thread is idle (on replica b); two runs started later on replica a.
    streams = metric(pair.b.url, "threadline_active_streams")
    follower = asyncio.create_task(follow(b))
    await until(lambda: metric(pair.b.url, "threadline_active_streams") > streams, "b to stream the thread")
    for _ in range(2):
        await a.runs.wait(tid, "refunds", input={"request": "where is my parcel?"})
    await asyncio.wait_for(ended.wait(), 30)
    await follower
    runs = {p.id.split("/")[0] for p in parts}
    assert len(runs) == 2 and [p.event for p in parts].count("metadata") == 2
    # Resumed after the first event of the second run: the rest of that run, on replica a.
    second = [p for p in parts if p.id.startswith(parts[-1].id.split("/")[0])]
    resumed: list = []
    async for part in await a.threads.join_stream(tid, last_event_id=second[0].id):
        resumed.append(part)
        if len(resumed) == len(second) - 1:
            break
    assert [p.id for p in resumed] == [p.id for p in second[1:]]
    with pytest.raises(NotFoundError):
        async for _ in await pair.client("a", OTHER_KEY).threads.join_stream(tid):
            pass
    with pytest.raises(UnprocessableEntityError):
        async for _ in await a.threads.join_stream(tid, last_event_id="nonsense"):
            pass


async def test_cancel_from_the_other_replica_stops_the_run(pair: Pair) -> None:
    a, b = pair.client("a"), pair.client("b")
    thread = await a.threads.create()
    tid = thread["thread_id"]
    run = await a.runs.create(tid, "chat", input=HI, stream_mode=SLOW)
    await until(lambda: _status(b, tid, run["run_id"], "running"), "the run to start")
    await b.runs.cancel(tid, run["run_id"])
    result = await b.runs.join(tid, run["run_id"])
    # As langgraph-api: the thread's values, not an error; the thread interrupted mid-run.
    state = await b.threads.get_state(tid)
    assert "__error__" not in result and result == state["values"]
    assert (await a.runs.get(tid, run["run_id"]))["status"] == "interrupted"
    assert (await a.threads.get(tid))["status"] == ("interrupted" if state["next"] else "idle")
    # The thread takes the next run.
    after = await b.runs.wait(tid, "chat", input={"messages": [{"role": "user", "content": "still there?"}]})
    assert after["messages"][-1]["content"].startswith("turn ")


async def test_reject_refuses_a_busy_thread_and_enqueue_runs_in_order(pair: Pair) -> None:
    a, b = pair.client("a"), pair.client("b")
    thread = await a.threads.create()
    tid = thread["thread_id"]
    first = await a.runs.create(
        tid, "chat", input={"messages": [{"role": "user", "content": "one"}]}, stream_mode=SLOW
    )
    with pytest.raises(ConflictError):
        await b.runs.create(tid, "chat", input=HI, multitask_strategy="reject")
    second = await b.runs.create(
        tid, "chat", input={"messages": [{"role": "user", "content": "two"}]}, multitask_strategy="enqueue"
    )
    assert (await a.threads.get(tid))["status"] == "busy"
    assert tid in [t["thread_id"] for t in await a.threads.search(status="busy", limit=1000)]
    await a.runs.join(tid, first["run_id"])
    final = await a.runs.join(tid, second["run_id"])
    contents = [m["content"] for m in final["messages"]]
    assert contents == ["one", expected_reply(["one"]), "two", expected_reply(["one", contents[1], "two"])]
    assert [r["status"] for r in await b.runs.list(tid)] == ["success", "success"]


async def test_stateless_runs(pair: Pair) -> None:
    client = pair.client("b")
    result = await client.runs.wait(None, "refunds", input={"request": "where is my parcel?"})
    assert result["decision"] == "not needed"
    parts = [p async for p in client.runs.stream(None, "chat", input=HI, stream_mode="values")]
    assert parts[-1].data["messages"][-1]["content"] == expected_reply(["hi"])


async def test_state_update_as_node_history_by_checkpoint_and_copy(pair: Pair) -> None:
    a, b = pair.client("a"), pair.client("b")
    thread = await a.threads.create()
    tid = thread["thread_id"]
    await a.runs.wait(tid, "refunds", input=REFUND)
    # Answer the interrupt by hand: write review's output as if review had run.
    written = await b.threads.update_state(tid, {"decision": "denied", "trail": ["review"]}, as_node="review")
    state = await a.threads.get_state(tid)
    assert (
        state["next"] == ["respond"]
        and state["checkpoint"]["checkpoint_id"] == written["checkpoint"]["checkpoint_id"]
    )
    result = await a.runs.wait(tid, "refunds", input=None)
    assert result["answer"] == "your refund of 250 is denied"

    history = await b.threads.get_history(tid, limit=20)
    assert history[0]["values"]["answer"] == result["answer"]
    older = history[-1]
    at = await a.threads.get_state(tid, checkpoint_id=older["checkpoint"]["checkpoint_id"])
    assert at["values"] == older["values"]
    copy = await b.threads.copy(tid)
    assert copy["thread_id"] != tid and copy["values"] == (await a.threads.get(tid))["values"]
    assert len(await a.threads.get_history(copy["thread_id"], limit=20)) == len(history)


async def test_remote_graph_invokes_interrupts_and_resumes(pair: Pair) -> None:
    remote = RemoteGraph("refunds", url=pair.a.url, api_key=API_KEY)
    config = {"configurable": {"thread_id": str(uuid.uuid4())}}
    first = await remote.ainvoke(REFUND, config)
    assert first["trail"] == ["triage"]
    state = await RemoteGraph("refunds", url=pair.b.url, api_key=API_KEY).aget_state(config)
    assert state.next == ("review",) and state.interrupts[0].value["amount"] == 250
    resumed = await RemoteGraph("refunds", url=pair.b.url, api_key=API_KEY).ainvoke(
        Command(resume="deny"), config
    )
    assert resumed["decision"] == "denied"
    chunks = [c async for c in remote.astream({"request": "refund", "amount": 5}, stream_mode="custom")]
    assert chunks[-1] == {"node": "respond", "decision": "approved"}


def test_sync_client_and_sync_remote_graph(pair: Pair) -> None:
    client = get_sync_client(url=pair.b.url, api_key=API_KEY)
    thread = client.threads.create(metadata={"sync": True})
    result = client.runs.wait(thread["thread_id"], "chat", input=HI)
    assert result["messages"][-1]["content"] == expected_reply(["hi"])
    parts = list(
        client.runs.stream(thread["thread_id"], "refunds", input={"request": "q"}, stream_mode="custom")
    )
    assert [p.data["node"] for p in parts if p.event == "custom"] == ["triage", "respond"]
    remote = RemoteGraph("chat", url=pair.a.url, api_key=API_KEY)
    out = remote.invoke(HI, {"configurable": {"thread_id": thread["thread_id"]}})
    assert len(out["messages"]) == 4


async def test_another_principals_threads_and_runs_are_not_found(pair: Pair) -> None:
    alice, bob = pair.client("a"), pair.client("b", key=OTHER_KEY)
    tag = uuid.uuid4().hex
    thread = await alice.threads.create(metadata={"tag": tag})
    tid = thread["thread_id"]
    run = await alice.runs.create(tid, "chat", input=HI)
    for call in (
        bob.threads.get(tid),
        bob.threads.get_state(tid),
        bob.threads.update(tid, metadata={"x": 1}),
        bob.threads.delete(tid),
        bob.threads.copy(tid),
        bob.runs.get(tid, run["run_id"]),
        bob.runs.list(tid),
        bob.runs.cancel(tid, run["run_id"]),
        bob.runs.wait(tid, "chat", input=HI),
        bob.runs.join(tid, run["run_id"]),
    ):
        # runs.wait and runs.join raise httpx's error, the other calls the SDK's.
        with pytest.raises((NotFoundError, httpx.HTTPStatusError)) as caught:
            await call
        assert getattr(caught.value, "status_code", None) == 404 or caught.value.response.status_code == 404
    with pytest.raises(httpx.HTTPStatusError) as caught:
        [p async for p in bob.runs.join_stream(tid, run["run_id"])]
    assert caught.value.response.status_code == 404
    assert await bob.threads.search(metadata={"tag": tag}) == []
    assert await bob.threads.count(metadata={"tag": tag}) == 0
    assert (await alice.runs.join(tid, run["run_id"]))["messages"][-1]["content"] == expected_reply(["hi"])
    assert [r["status"] for r in await alice.runs.list(tid)] == ["success"]


async def test_v1_thread_is_visible_and_continued_through_the_api(pair: Pair) -> None:
    v1 = Client(pair.a.url)
    tid = v1.new_thread()
    assert v1.say(tid, "first").status_code == 200
    api = pair.client("b")
    thread = await api.threads.get(tid)
    assert thread["status"] == "idle" and thread["metadata"]["graph_id"] == "chat"
    assert [m["content"] for m in thread["values"]["messages"]] == ["first", expected_reply(["first"])]
    assert tid in [
        t["thread_id"] for t in await api.threads.search(metadata={"graph_id": "chat"}, limit=1000)
    ]
    result = await api.runs.wait(tid, "chat", input={"messages": [{"role": "user", "content": "second"}]})
    contents = [m["content"] for m in result["messages"]]
    assert contents[-1] == expected_reply(contents[:-1])
    # and /v1 keeps working on it: the owner is still in the state.
    assert v1.say(tid, "third").status_code == 200
    assert len(v1.thread(tid)["messages"]) == 6


async def test_auth_is_required(pair: Pair) -> None:
    async with httpx.AsyncClient(base_url=pair.a.url) as http:
        assert (await http.get("/ok")).json() == {"ok": True}
        assert (await http.get("/info")).status_code == 200
        assert (await http.post("/threads/search", json={})).status_code == 401
        assert (
            await http.post("/threads/search", json={}, headers={"x-api-key": "wrong"})
        ).status_code == 401
        assert (await http.post("/runs/crons/search", json={})).status_code == 401


async def test_bad_input_is_a_clear_4xx_and_changes_nothing(pair: Pair) -> None:
    api = pair.client()
    tag = uuid.uuid4().hex
    thread = await api.threads.create(metadata={"tag": tag})
    tid = thread["thread_id"]
    await api.runs.wait(tid, "refunds", input={"request": "q"})
    before = (await api.threads.get_state(tid), await api.runs.list(tid), await api.threads.count())
    run_body = {"assistant_id": "refunds", "input": {"request": "q"}}
    cases = [
        ("POST", f"/threads/{tid}/runs/wait", {**run_body, "assistant_id": "nope"}, 422, "assistant"),
        (
            "POST",
            f"/threads/{tid}/runs/wait",
            {**run_body, "assistant_id": str(uuid.uuid4())},
            404,
            "assistant",
        ),
        ("POST", f"/threads/{uuid.uuid4()}/runs/wait", run_body, 404, "thread"),
        ("POST", f"/threads/{uuid.uuid4()}/runs/stream", run_body, 404, "thread"),
        (
            "POST",
            f"/threads/{tid}/runs/stream",
            {**run_body, "stream_mode": ["values", "bogus"]},
            422,
            "stream_mode",
        ),
        ("POST", f"/threads/{tid}/runs", {**run_body, "input": {"amount": "x", "colour": 1}}, 422, "colour"),
        ("POST", f"/threads/{tid}/runs", {**run_body, "input": [1, 2]}, 422, "input"),
        (
            "POST",
            f"/threads/{tid}/runs",
            {"assistant_id": "refunds", "command": {"resume": "ok"}},
            409,
            "interrupt",
        ),
        (
            "POST",
            f"/threads/{tid}/runs",
            {**run_body, "input": {"request": "q"}, "command": {"resume": 1}},
            422,
            "both",
        ),
        (
            "POST",
            f"/threads/{tid}/runs",
            {**run_body, "multitask_strategy": "bogus"},
            422,
            "multitask_strategy",
        ),
        ("POST", f"/threads/{tid}/runs", {**run_body, "checkpoint_id": str(uuid.uuid4())}, 404, "checkpoint"),
        (
            "POST",
            f"/threads/{tid}/runs",
            {**run_body, "webhook": "http://169.254.169.254/latest/"},
            422,
            "webhook",
        ),
        ("POST", f"/threads/{tid}/runs", {**run_body, "metadata": "not an object"}, 422, "metadata"),
        ("POST", f"/threads/{tid}/runs", {"input": {"request": "q"}}, 422, "assistant_id"),
        ("POST", "/runs/wait", {**run_body, "input": {"colour": 1}}, 422, "colour"),
        ("POST", "/threads", {"metadata": {"tag": tag}, "supersteps": [{"updates": []}]}, 422, "supersteps"),
        ("POST", "/threads", {"thread_id": "has spaces", "metadata": {"tag": tag}}, 422, "thread_id"),
        ("POST", "/threads/search", {"status": "sleeping"}, 422, "status"),
        ("POST", f"/threads/{tid}/state", {"values": {"answer": "x"}, "as_node": "nope"}, 400, "as_node"),
        ("POST", f"/threads/{tid}/state", {"values": ["not", "a", "dict"]}, 422, "values"),
        ("GET", f"/threads/{tid}/state/{uuid.uuid4()}", None, 404, "checkpoint"),
        ("GET", "/threads/not%20an%20id", None, 422, "thread"),
    ]
    async with httpx.AsyncClient(base_url=pair.b.url, headers={"x-api-key": API_KEY}, timeout=30) as http:
        for method, path, body, status, reason in cases:
            response = await http.request(method, path, json=body)
            assert response.status_code == status, (path, body and str(body)[:80], response.text)
            assert reason in response.json()["error"]["message"], (path, response.text)
        # Oversized: answered 413 from its Content-Length before the body is read (then the
        # connection closes, so the body is not sent at all: httpx would race the close).
        sock = connect(pair.b.port)
        sock.sendall(
            f"POST /threads/{tid}/runs HTTP/1.1\r\nHost: t\r\nx-api-key: {API_KEY}\r\n"
            "content-type: application/json\r\nContent-Length: 2000000\r\n\r\n".encode()
        )
        assert status_of(read_response(sock)) == 413
        sock.close()
        malformed = await http.post(
            f"/threads/{tid}/runs", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert malformed.status_code == 422
        run = (await api.runs.list(tid))[0]
        response = await http.get(
            f"/threads/{tid}/runs/{run['run_id']}/stream", headers={"Last-Event-ID": "garbage"}
        )
        assert response.status_code == 422
    with pytest.raises(UnprocessableEntityError):
        await api.runs.create(tid, "refunds", input={"request": "q"}, stream_mode="nope")  # type: ignore[arg-type]
    after = (await api.threads.get_state(tid), await api.runs.list(tid), await api.threads.count())
    assert after == before


async def test_subgraphs_context_breakpoints_and_a_fork_from_a_checkpoint(pair: Pair) -> None:
    client = pair.client()
    thread = await client.threads.create()
    tid = thread["thread_id"]
    parts = [
        p
        async for p in client.runs.stream(
            tid,
            "nested",
            input={"topic": "owls"},
            context={"style": "fancy"},
            stream_mode=["updates", "custom"],
            stream_subgraphs=True,
            interrupt_before=["finish"],
        )
    ]
    names = [p.event for p in parts]
    assert "updates" in names and any(n.startswith("updates|inner:") for n in names), names
    assert any(n.startswith("custom|inner:") for n in names)
    # Stopped before `finish`: the thread waits at a breakpoint.
    assert (await client.threads.get(tid))["status"] == "interrupted"
    state = await client.threads.get_state(tid)
    assert state["next"] == ["finish"] and state["values"]["draft"] == "fancy owls"
    done = await client.runs.wait(tid, "nested", input=None)
    assert done["notes"] == ["prepared owls", "fancy owls", "done"]

    # Without stream_subgraphs, only the parent's parts.
    flat = [
        p.event async for p in client.runs.stream(None, "nested", input={"topic": "x"}, stream_mode="updates")
    ]
    assert flat and not any("|" in e for e in flat)

    # A run from an earlier checkpoint forks the thread from there.
    history = await client.threads.get_history(tid, limit=20)
    after_prepare = next(h for h in history if h["next"] == ["inner"])
    forked = await client.runs.wait(
        tid, "nested", input=None, checkpoint_id=after_prepare["checkpoint"]["checkpoint_id"]
    )
    assert forked["notes"] == ["prepared owls", "plain owls", "done"]

    # A run's config.configurable is its context, as on langgraph-api; both at once is a 400.
    styled = await client.runs.wait(
        None, "nested", input={"topic": "x"}, config={"configurable": {"style": "bold"}}
    )
    assert styled["notes"] == ["prepared x", "bold x", "done"]
    with pytest.raises(httpx.HTTPStatusError, match="400"):  # runs.wait raises httpx's own
        await client.runs.wait(
            None,
            "nested",
            input={"topic": "x"},
            config={"configurable": {"style": "a"}},
            context={"style": "b"},
        )


async def test_deleting_a_run_deletes_what_it_checkpointed(pair: Pair) -> None:
    client = pair.client()
    tid = (await client.threads.create())["thread_id"]
    await client.runs.wait(tid, "nested", input={"topic": "owls"})
    second = await client.runs.create(tid, "nested", input={"topic": "bats"})
    await client.runs.join(tid, second["run_id"])
    await pair.client("b").runs.delete(tid, second["run_id"])
    # As on langgraph-api: the thread is as the first run left it.
    state = await client.threads.get_state(tid)
    assert state["values"]["notes"] == ["prepared owls", "plain owls", "done"]
    history = await client.threads.get_history(tid, limit=20)
    assert {h["metadata"]["run_id"] for h in history} == {(await client.runs.list(tid))[0]["run_id"]}


async def test_events_debug_and_messages_stream_modes(pair: Pair) -> None:
    client = pair.client()
    modes = ["events", "debug", "messages"]
    parts = [p async for p in client.runs.stream(None, "chat", input=HI, stream_mode=modes)]
    names = {p.event for p in parts}
    assert {"metadata", "events", "debug", "messages/metadata", "messages/partial"} <= names, names
    assert any(p.data.get("event") == "on_chat_model_stream" for p in parts if p.event == "events")
    partial = [p.data[0]["content"] for p in parts if p.event == "messages/partial"]
    assert expected_reply(["hi"]) in partial


async def test_on_disconnect_cancel_if_not_exists_cancel_wait_and_delete(pair: Pair) -> None:
    client = pair.client()
    tid = str(uuid.uuid4())
    # if_not_exists=create makes the thread; on_disconnect=cancel stops the run when we leave.
    stream = client.runs.stream(
        tid, "chat", input=HI, stream_mode=SLOW, if_not_exists="create", on_disconnect="cancel"
    )
    first = await anext(stream)
    await stream.aclose()
    run_id = first.data["run_id"]
    await until(lambda: _status(client, tid, run_id, "interrupted"), "the run cancelled", interval=0.1)
    assert (await client.runs.get(tid, run_id))["status"] == "interrupted"

    run = await client.runs.create(tid, "chat", input=HI, stream_mode=SLOW)
    result = await client.runs.cancel(tid, run["run_id"], wait=True)
    assert "__error__" not in result and result["messages"][0]["content"] == HI["messages"][0]["content"]
    with pytest.raises(ConflictError):  # still running: cancel before deleting
        active = await client.runs.create(tid, "chat", input=HI, stream_mode=SLOW)
        await client.runs.delete(tid, active["run_id"])
    await client.runs.join(tid, active["run_id"])
    await client.runs.delete(tid, active["run_id"])
    with pytest.raises(NotFoundError):
        await client.runs.get(tid, active["run_id"])


async def test_a_failing_run_reports_its_error_and_the_thread_says_error(pair: Pair) -> None:
    client = pair.client()
    tag = uuid.uuid4().hex
    thread = await client.threads.create(metadata={"tag": tag})
    tid = thread["thread_id"]
    # The example's triage reads state["request"]: without it the graph raises KeyError.
    with pytest.raises(Exception, match="KeyError"):  # the SDK raises a run's error by default
        await client.runs.wait(tid, "refunds", input={"amount": 5})
    result = await client.runs.wait(tid, "refunds", input={"amount": 5}, raise_error=False)
    assert result["__error__"] == {"error": "KeyError", "message": "'request'"}
    assert [r["status"] for r in await client.runs.list(tid)] == ["error", "error"]
    assert (await client.threads.get(tid))["status"] == "error"
    assert [t["thread_id"] for t in await client.threads.search(metadata={"tag": tag}, status="error")] == [
        tid
    ]
    parts = [p async for p in client.runs.stream(tid, "refunds", input={"amount": 5})]
    assert parts[-1].event == "error" and parts[-1].data["error"] == "KeyError"
    # and the thread recovers with a good run
    await client.runs.wait(tid, "refunds", input={"request": "where is it?"})
    assert (await client.threads.get(tid))["status"] == "idle"


async def test_interrupt_strategy_metadata_config_session_token_and_a_stateless_background_run(
    pair: Pair,
) -> None:
    client = pair.client()
    thread = await client.threads.create()
    tid = thread["thread_id"]
    first = await client.runs.create(tid, "chat", input=HI, stream_mode=SLOW)
    second = await client.runs.create(
        tid,
        "chat",
        input={"messages": [{"role": "user", "content": "instead"}]},
        multitask_strategy="interrupt",
        metadata={"why": "changed my mind"},
        config={"recursion_limit": 5, "configurable": {"user_setting": 1}},
    )
    assert second["metadata"] == {"why": "changed my mind"}
    final = await client.runs.join(tid, second["run_id"])
    assert (await client.runs.get(tid, first["run_id"]))["status"] == "interrupted"
    assert final["messages"][-1]["content"].endswith("you said: instead")
    state = await client.threads.get_state(tid)
    assert state["metadata"]["why"] == "changed my mind" and state["metadata"]["run_id"] == second["run_id"]

    # A session token works as the key does.
    token = httpx.post(f"{pair.b.url}/v1/sessions", json={"api_key": API_KEY}).json()["session_token"]
    by_token = get_client(url=pair.b.url, headers={"Authorization": f"Bearer {token}"})
    assert (await by_token.threads.get(tid))["thread_id"] == tid

    # A stateless background run, joined through the thread its Content-Location names.
    run = await client.runs.create(None, "refunds", input={"request": "refund", "amount": 1})
    result = await pair.client("b").runs.join(run["thread_id"], run["run_id"])
    assert result["decision"] == "approved"


async def test_sigterm_lets_a_background_run_finish_before_the_replica_exits(
    redis_server, start_replica
) -> None:
    env = redis_env(redis_server, **{**ENV, "MODEL_TOKEN_DELAY_MS": "150", "DRAIN_SECONDS": "10"})
    leaving, staying = start_replica(env, "leaving"), start_replica(env, "staying")
    a = get_client(url=leaving.url, api_key=API_KEY)
    thread = await a.threads.create()
    tid = thread["thread_id"]
    run = await a.runs.create(tid, "chat", input=HI, stream_mode=SLOW)
    await until(lambda: _status(a, tid, run["run_id"], "running"), "the run to start")
    leaving.signal(signal.SIGTERM)
    result = await get_client(url=staying.url, api_key=API_KEY).runs.join(tid, run["run_id"])
    assert result["messages"][-1]["content"] == expected_reply(["hi"])
    assert leaving.proc.wait(timeout=15) in (0, -signal.SIGTERM)
