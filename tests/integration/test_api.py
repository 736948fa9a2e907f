"""The HTTP API of one replica, end to end: real uvicorn, real Redis (db 0 sessions, db 1
checkpoints)."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
import redis

from client import API_KEY, OTHER_KEY, Client, expected_reply, metric
from servers import ServiceProcess, redis_env

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def replica(redis_server, tmp_path_factory):
    env = redis_env(
        redis_server,
        MAX_MESSAGE_BYTES="1024",
        SSE_KEEPALIVE_SECONDS="0.05",
        SESSION_TTL_SECONDS="2",
    )
    proc = ServiceProcess(env, name="api-1", log_dir=tmp_path_factory.mktemp("api")).start()
    yield proc
    proc.kill()


@pytest.fixture
def alice(replica) -> Client:
    return Client(replica.url, API_KEY)


@pytest.fixture
def bob(replica) -> Client:
    return Client(replica.url, OTHER_KEY)


def thread_keys(redis_server, thread_id: str) -> list[bytes]:
    client = redis.Redis.from_url(redis_server.url(1))
    return list(client.scan_iter(match=f"*{{{thread_id}}}*"))


def test_conversation_round_trip(alice, replica):
    thread = alice.new_thread()
    said: list[str] = []
    for content in ["hello", "what did I say?"]:
        response = alice.say(thread, content)
        assert response.status_code == 200, response.text
        body = response.json()
        said.append(content)
        assert body["reply"]["content"] == expected_reply(said)
        assert body["turn"] == len(said) // 2 + 1
        assert body["replica"] == "api-1" == response.headers["x-replica"]
        said.append(body["reply"]["content"])

    state = alice.thread(thread)
    assert [m["content"] for m in state["messages"]] == said
    assert [m["role"] for m in state["messages"]] == ["human", "ai", "human", "ai"]
    assert state["turns"] == 2 and state["pending"] is False


def test_streamed_reply_matches_stored_reply(alice):
    thread = alice.new_thread()
    sse = alice.stream(thread, "stream me a reply")
    done = sse.done()
    assert done is not None, sse.events
    assert "".join(sse.tokens()) == done["reply"]["content"] == expected_reply(["stream me a reply"])
    assert len(sse.tokens()) == len(done["reply"]["content"].split(" "))
    assert done["turn"] == 1 and done["thread_id"] == thread
    assert alice.thread(thread)["messages"][-1]["content"] == done["reply"]["content"]


def test_keepalive_comments_while_the_model_is_silent(redis_server, start_replica):
    # 9 tokens, 150 ms apart, keepalive every 50 ms: comments must appear between tokens.
    slow = start_replica(
        redis_env(redis_server, MODEL_TOKEN_DELAY_MS="150", SSE_KEEPALIVE_SECONDS="0.05"), "slow"
    )
    client = Client(slow.url)
    sse = client.stream(client.new_thread(), "take your time")
    assert sse.done() is not None
    assert "keepalive" in sse.comments


def test_retrying_a_message_id_returns_the_stored_reply(alice):
    thread = alice.new_thread()
    first = alice.say(thread, "only once", "msg-1").json()
    again = alice.say(thread, "only once", "msg-1")
    assert again.status_code == 200 and again.json() == first
    streamed = alice.stream(thread, "only once", "msg-1")
    assert streamed.done() == first and streamed.tokens() == []
    assert [m["id"] for m in alice.thread(thread)["messages"]] == ["msg-1", "msg-1.reply"]

    reused = alice.say(thread, "different content", "msg-1")
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "message_id_reused"


def test_checkpoint_history_newest_first_and_delete(alice, redis_server):
    thread = alice.new_thread()
    alice.say(thread, "one")
    alice.say(thread, "two")
    history = alice.http.get(f"/v1/threads/{thread}/checkpoints").json()["checkpoints"]
    steps = [c["step"] for c in history]
    assert steps == sorted(steps, reverse=True) and len(history) >= 7
    assert history[0]["source"] == "loop" and history[-1]["parent_checkpoint_id"] is None
    assert [c["parent_checkpoint_id"] for c in history[:-1]] == [c["checkpoint_id"] for c in history[1:]]

    assert thread_keys(redis_server, thread)
    assert alice.http.delete(f"/v1/threads/{thread}").status_code == 204
    assert alice.http.get(f"/v1/threads/{thread}").status_code == 404
    assert alice.http.get(f"/v1/threads/{thread}/checkpoints").status_code == 404
    # Only the fence counter may outlive the thread (it keeps tokens monotonic; it has a TTL).
    assert [k for k in thread_keys(redis_server, thread) if not k.endswith(b":fence")] == []


def test_auth_required_and_threads_private(replica, alice, bob):
    anonymous = httpx.post(f"{replica.url}/v1/threads")
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthenticated"
    bad_key = httpx.post(f"{replica.url}/v1/threads", headers={"X-API-Key": "nope"})
    assert bad_key.status_code == 401

    thread = alice.new_thread()
    alice.say(thread, "secret")
    for response in (
        bob.http.get(f"/v1/threads/{thread}"),
        bob.http.get(f"/v1/threads/{thread}/checkpoints"),
        bob.say(thread, "let me in"),
        bob.http.delete(f"/v1/threads/{thread}"),
    ):
        assert response.status_code == 404, response.text
    # Indistinguishable from a thread that does not exist.
    assert (
        bob.http.get(f"/v1/threads/{uuid.uuid4().hex}").json() == bob.http.get(f"/v1/threads/{thread}").json()
    )
    assert len(alice.thread(thread)["messages"]) == 2


def test_a_session_token_works_like_its_key(replica):
    """Over HTTP: a key buys a session token that authenticates. (Sliding and absolute expiry
    run on an injected clock: tests/unit/test_session_store.py, tests/integration/test_sessions.py.)"""
    created = httpx.post(f"{replica.url}/v1/sessions", json={"api_key": API_KEY})
    assert created.status_code == 201
    body = created.json()
    assert body["principal"] == "alice" and body["expires_in"] == 2
    bearer = {"Authorization": f"Bearer {body['session_token']}"}
    assert httpx.post(f"{replica.url}/v1/threads", headers=bearer).status_code == 201
    assert httpx.post(f"{replica.url}/v1/sessions", json={"api_key": "wrong"}).status_code == 401


@pytest.mark.parametrize(
    ("name", "body", "status", "code"),
    [
        ("empty content", {"content": ""}, 413, "content_empty"),
        ("blank content", {"content": "   "}, 413, "content_empty"),
        ("oversized content", {"content": "x" * 1025}, 413, "content_too_large"),
        ("oversized multibyte", {"content": "é" * 513}, 413, "content_too_large"),
        ("huge body", {"content": "x" * 100_000}, 413, "content_too_large"),
        ("content not a string", {"content": 42}, 422, "invalid_request"),
        ("missing content", {"id": "a"}, 422, "invalid_request"),
        ("bad message id", {"content": "hi", "id": "no spaces allowed"}, 422, "invalid_request"),
        ("id not a string", {"content": "hi", "id": 7}, 422, "invalid_request"),
        ("a reply's id", {"content": "hi", "id": "m1.reply"}, 422, "invalid_request"),
        ("malformed json", b"{not json", 422, "invalid_request"),
    ],
)
def test_bad_input_is_refused_and_stores_nothing(alice, redis_server, name, body, status, code):
    thread = alice.new_thread()
    before = alice.http.get(f"/v1/threads/{thread}/checkpoints").json()["checkpoints"]
    if isinstance(body, bytes):
        response = alice.http.post(
            f"/v1/threads/{thread}/messages", content=body, headers={"Content-Type": "application/json"}
        )
    else:
        response = alice.http.post(f"/v1/threads/{thread}/messages", json=body)
    assert response.status_code == status, (name, response.text)
    assert response.json()["error"]["code"] == code
    after = alice.http.get(f"/v1/threads/{thread}/checkpoints").json()["checkpoints"]
    assert after == before


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/v1/threads/has.dot/messages", 400),
        ("/v1/threads/" + "a" * 65 + "/messages", 400),
        ("/v1/threads/%20space/messages", 400),
        (f"/v1/threads/{'0' * 32}/messages", 404),
    ],
)
def test_bad_thread_ids(alice, redis_server, path, status):
    keys_before = redis.Redis.from_url(redis_server.url(1)).dbsize()
    response = alice.http.post(path, json={"content": "hi"})
    assert response.status_code == status, response.text
    assert "error" in response.json()
    assert redis.Redis.from_url(redis_server.url(1)).dbsize() == keys_before


def test_missing_credentials_store_nothing(replica, alice, redis_server):
    thread = alice.new_thread()
    response = httpx.post(f"{replica.url}/v1/threads/{thread}/messages", json={"content": "hi"})
    assert response.status_code == 401
    assert alice.thread(thread)["messages"] == []


def test_openapi_docs_and_metrics(replica, alice):
    assert httpx.get(f"{replica.url}/docs").status_code == 200
    spec = httpx.get(f"{replica.url}/openapi.json").json()
    assert {"/v1/sessions", "/v1/threads", "/v1/threads/{thread_id}/messages"} <= set(spec["paths"])

    alice.say(alice.new_thread(), "count me")
    text = httpx.get(f"{replica.url}/metrics").text
    for series in (
        'threadline_checkpoint_read_duration_seconds_count{backend="redis"}',
        'threadline_checkpoint_write_duration_seconds_count{backend="redis"}',
        'threadline_checkpoint_operations_total{backend="redis",op="put"}',
        "threadline_turn_duration_seconds_count",
        "threadline_turn_lease_wait_seconds_count",
        'threadline_http_requests_total{method="POST",route="/v1/threads/{thread_id}/messages",status="200"}',
    ):
        assert series in text, series
    assert metric(replica.url, "threadline_checkpoint_operations_total", 'backend="redis",op="put"') > 0
    assert metric(replica.url, "threadline_active_streams") == 0


def test_readyz_and_livez(replica):
    assert httpx.get(f"{replica.url}/livez").json() == {"status": "ok"}
    ready = httpx.get(f"{replica.url}/readyz")
    assert ready.status_code == 200 and ready.json()["replica"] == "api-1"


def test_sse_error_shape_is_json(alice):
    # Errors before the stream starts are plain HTTP errors even when SSE was asked for.
    response = alice.http.post(
        f"/v1/threads/{'f' * 32}/messages",
        json={"content": "hi"},
        headers={"Accept": "text/event-stream"},
    )
    assert response.status_code == 404
    assert json.loads(response.text)["error"]["code"] == "thread_not_found"
