"""Several replicas on one Redis, as real processes: continuity, one turn at a time, fencing,
exactly-once retries, cancellation, outages, drain and start-up."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import httpx
import pytest
import redis

from threadline.redis_keys import lease_key

from client import API_KEY, Client, assert_whole, expected_reply, metric, parse_sse
from servers import RedisServer, redis_env, wait_until

pytestmark = pytest.mark.integration

# The built-in model's reply has 9 words; at 150 ms a token a turn streams for ~1.2 s.
SLOW = {"MODEL_TOKEN_DELAY_MS": "150", "TURN_LEASE_SECONDS": "1", "TURN_LEASE_WAIT_SECONDS": "5"}


def test_thread_continues_on_another_replica(redis_server, start_replica):
    a = Client(start_replica(redis_env(redis_server), "a").url)
    b = Client(start_replica(redis_env(redis_server), "b").url)
    thread = a.new_thread()
    replicas = []
    for i, client in enumerate([a, b, a, b]):
        response = client.say(thread, f"message {i}")
        assert response.status_code == 200
        replicas.append(response.json()["replica"])
    assert replicas == ["a", "b", "a", "b"]
    assert_whole(b.thread(thread)["messages"], 4)


def test_concurrent_messages_on_two_replicas_are_serialized(redis_server, start_replica):
    env = redis_env(redis_server, MODEL_TOKEN_DELAY_MS="20", TURN_LEASE_WAIT_SECONDS="10")
    clients = [Client(start_replica(env, name).url) for name in ("a", "b")]
    thread = clients[0].new_thread()

    def send(i: int) -> httpx.Response:
        return clients[i % 2].say(thread, f"concurrent {i}", f"c-{i}")

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(send, range(8)))
    ok = [r for r in responses if r.status_code == 200]
    assert all(r.status_code in (200, 409) for r in responses), [r.text for r in responses]
    assert len(ok) >= 2  # 10 s of waiting covers 8 turns of ~0.2 s: most, if not all, get in
    state = clients[1].thread(thread)
    assert_whole(state["messages"], len(ok))
    assert sorted(r.json()["turn"] for r in ok) == list(range(1, len(ok) + 1))


def test_concurrent_same_message_id_runs_once(redis_server, start_replica):
    env = redis_env(redis_server, MODEL_TOKEN_DELAY_MS="30", TURN_LEASE_WAIT_SECONDS="10")
    clients = [Client(start_replica(env, name).url) for name in ("a", "b")]
    thread = clients[0].new_thread()
    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(lambda i: clients[i % 2].say(thread, "same", "dup-1"), range(6)))
    statuses = [(r.status_code, r.text) for r in responses]
    assert all(status in (200, 409) for status, _ in statuses), statuses
    bodies = {json.dumps(r.json()["reply"]) for r in responses if r.status_code == 200}
    assert len(bodies) == 1, statuses
    assert_whole(clients[0].thread(thread)["messages"], 1)


def _stream_in_background(url: str, thread: str, content: str, message_id: str):
    """Start a streamed turn in a thread; returns (thread, result dict filled when it ends,
    but for ``tokens``: the token events read so far)."""
    result: dict = {"tokens": 0}

    def counted(lines):
        for line in lines:
            if line.startswith("event: token"):
                result["tokens"] += 1
            yield line

    def run() -> None:
        try:
            with httpx.stream(
                "POST",
                f"{url}/v1/threads/{thread}/messages",
                json={"content": content, "id": message_id},
                headers={"X-API-Key": API_KEY, "Accept": "text/event-stream"},
                timeout=30,
            ) as response:
                result["status"] = response.status_code
                result["sse"] = parse_sse(counted(response.iter_lines()))
        except httpx.HTTPError as exc:
            result["error"] = type(exc).__name__

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    return worker, result


def _mid_turn_on_a(redis_server, start_replica, content: str, message_id: str):
    """Replicas a and b (slow tokens, 1 s lease) and a thread whose first turn is done and
    whose second is streaming on a. Returns (a, b, thread, worker, result)."""
    a = start_replica(redis_env(redis_server, **SLOW), "a")
    b = start_replica(redis_env(redis_server, **SLOW), "b")
    thread = Client(a.url).new_thread()
    Client(a.url).say(thread, "first")
    worker, result = _stream_in_background(a.url, thread, content, message_id)
    wait_until(lambda: metric(a.url, "threadline_active_streams") == 1, "a streaming")
    return a, b, thread, worker, result


def test_paused_replica_cannot_write_after_losing_its_lease(redis_server, start_replica):
    a, b, thread, worker, result = _mid_turn_on_a(redis_server, start_replica, "during the pause", "fenced-1")
    a.signal(signal.SIGSTOP)
    try:
        leases = redis.Redis.from_url(redis_server.url(1))
        wait_until(lambda: not leases.exists(lease_key(thread)), "a's 1 s lease to expire", 5)
        # b takes the thread and finishes the same message (exactly-once) plus one more turn.
        retried = Client(b.url).say(thread, "during the pause", "fenced-1")
        assert retried.status_code == 200, retried.text
        assert Client(b.url).say(thread, "after the pause").status_code == 200
    finally:
        a.signal(signal.SIGCONT)
    worker.join(timeout=15)
    # a's late turn was refused: its stream ends in an error event, never in a second reply.
    assert result["sse"].done() is None
    assert any(event == "error" for event, _ in result["sse"].events)
    wait_until(lambda: metric(a.url, "threadline_turn_lease_lost_total") >= 1, "lease lost")
    assert_whole(Client(b.url).thread(thread)["messages"], 3)


def test_killed_mid_turn_then_retried_elsewhere_completes_once(redis_server, start_replica):
    a, b, thread, worker, result = _mid_turn_on_a(redis_server, start_replica, "second", "killed-1")
    wait_until(lambda: result["tokens"] >= 2, "a few tokens streamed by a")
    a.kill()
    worker.join(timeout=10)

    retried = Client(b.url).say(thread, "second", "killed-1")  # waits out a's lease
    assert retried.status_code == 200, retried.text
    assert retried.json()["turn"] == 2
    assert_whole(Client(b.url).thread(thread)["messages"], 2)


def test_client_disconnect_cancels_the_model_promptly(redis_server, start_replica):
    replica = start_replica(redis_env(redis_server, MODEL_TOKEN_DELAY_MS="300"), "a")
    client = Client(replica.url)
    thread = client.new_thread()
    before = metric(replica.url, "threadline_model_cancelled_total")
    with httpx.stream(
        "POST",
        f"{replica.url}/v1/threads/{thread}/messages",
        json={"content": "I will hang up", "id": "cancel-1"},
        headers={"X-API-Key": API_KEY, "Accept": "text/event-stream"},
        timeout=30,
    ) as response:
        for line in response.iter_lines():
            if line.startswith("event: token"):
                break  # one token in, hang up
    hung_up = time.monotonic()
    wait_until(lambda: metric(replica.url, "threadline_model_cancelled_total") > before, "cancellation", 1.0)
    cancelled_after = time.monotonic() - hung_up
    assert cancelled_after < 1.0
    wait_until(lambda: metric(replica.url, "threadline_active_streams") == 0, "stream closed")

    # The thread is consistent: the interrupted turn is pending, and a retry finishes it once.
    state = client.thread(thread)
    assert state["pending"] is True and [m["id"] for m in state["messages"]] == ["cancel-1"]
    assert client.say(thread, "I will hang up", "cancel-1").status_code == 200
    assert client.say(thread, "next").status_code == 200
    assert_whole(client.thread(thread)["messages"], 2)


def test_redis_outage_gives_503_and_recovers_without_restart(fresh_redis, start_replica):
    replica = start_replica(redis_env(fresh_redis), "a")
    client = Client(replica.url, timeout=10)
    thread = client.new_thread()
    client.say(thread, "before")

    fresh_redis.stop()
    try:
        started = time.monotonic()
        response = client.say(thread, "during", "outage-1")
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "1"
        assert time.monotonic() - started < 10
        assert httpx.get(f"{replica.url}/readyz", timeout=10).status_code == 503
    finally:
        fresh_redis.start()
    wait_until(lambda: httpx.get(f"{replica.url}/readyz", timeout=5).status_code == 200, "ready", 10)
    assert client.say(thread, "during", "outage-1").status_code == 200
    assert_whole(client.thread(thread)["messages"], 2)


def test_logs_never_contain_the_redis_password(start_replica):
    password = "Du0PmDvmqDWqDTgfGnmi6/SKyuQydi3z7cPTgEQoE+s="
    server = RedisServer(password=password).start()
    try:
        raw = lambda db: f"redis://:{password}@127.0.0.1:{server.port}/{db}"  # noqa: E731
        env = redis_env(server, CHECKPOINT_REDIS_URL=raw(1), REDIS_URL=raw(0), LOG_LEVEL="DEBUG")
        replica = start_replica(env, "a")
        client = Client(replica.url, timeout=10)
        thread = client.new_thread()
        assert client.say(thread, "hello").status_code == 200
        server.stop()  # errors get logged now
        assert client.say(thread, "fails").status_code == 503
        assert httpx.get(f"{replica.url}/readyz", timeout=10).status_code == 503
    finally:
        server.close()
    logs = replica.logs()
    assert "store unavailable" in logs
    for form in (password, quote(password, safe=""), password.replace("+", " ")):
        assert form not in logs


def test_sigterm_drains_in_flight_streams(redis_server, start_replica):
    replica = start_replica(redis_env(redis_server, MODEL_TOKEN_DELAY_MS="200", DRAIN_SECONDS="10"), "a")
    thread = Client(replica.url).new_thread()
    worker, result = _stream_in_background(replica.url, thread, "finish me", "drain-1")
    wait_until(lambda: metric(replica.url, "threadline_active_streams") == 1, "streaming")
    replica.signal(signal.SIGTERM)
    wait_until(lambda: httpx.get(f"{replica.url}/readyz").status_code == 503, "not ready", 2)
    refused = Client(replica.url).say(thread, "too late")
    assert refused.status_code == 503 and refused.headers["retry-after"]
    worker.join(timeout=15)
    assert result["sse"].done()["reply"]["content"] == expected_reply(["finish me"])
    # uvicorn re-raises the SIGTERM it handled once shut down, so the exit is "by SIGTERM".
    assert replica.proc.wait(timeout=15) in (0, -signal.SIGTERM)


def test_misconfiguration_stops_start_up_naming_the_variable():
    for env, variable in [
        ({"CHECKPOINT_BACKEND": "mongodb"}, "CHECKPOINT_BACKEND"),
        (
            {"CHECKPOINT_BACKEND": "redis", "CHECKPOINT_REDIS_URL": "redis://:pw@host:port/1"},
            "CHECKPOINT_REDIS_URL",
        ),
        (
            {"CHECKPOINT_BACKEND": "redis-stack", "CHECKPOINT_REDIS_URL": "redis://h:6379/1"},
            "CHECKPOINT_REDIS_URL",
        ),
        ({"API_KEYS": "alice:not-a-hash"}, "API_KEYS"),
        ({"MODEL": "nonexistent-provider:some-model"}, "MODEL"),
        ({"TURN_LEASE_SECONDS": "-1"}, "TURN_LEASE_SECONDS"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "threadline", "serve", "--port", "1"],
            env={"PATH": "/usr/bin:/bin", **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, (env, done.stderr[-2000:])
        assert variable in done.stderr, (variable, done.stderr[-2000:])
        assert "pw@" not in done.stderr


def test_store_down_at_start_up_means_not_ready_then_recovers(start_replica):
    server = RedisServer()  # not started yet
    try:
        replica = start_replica(redis_env(server), "a", wait_ready=False)
        wait_until(lambda: _status(f"{replica.url}/livez") == 200, "live", 30)
        assert _status(f"{replica.url}/readyz") == 503
        response = httpx.post(f"{replica.url}/v1/threads", headers={"X-API-Key": API_KEY})
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        server.start()
        replica.wait_ready(timeout=15)
        assert Client(replica.url).say(Client(replica.url).new_thread(), "hi").status_code == 200
    finally:
        server.close()


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return 0


def test_unique_message_ids_are_generated_when_absent(redis_server, start_replica):
    client = Client(start_replica(redis_env(redis_server), "a").url)
    thread = client.new_thread()
    body = client.http.post(f"/v1/threads/{thread}/messages", json={"content": "no id"}).json()
    assert body["reply"]["id"].endswith(".reply")
    ids = [m["id"] for m in client.thread(thread)["messages"]]
    assert ids[1] == f"{ids[0]}.reply" and uuid.UUID(ids[0])


def test_interrupted_turn_is_finished_before_the_next_message(redis_server, start_replica):
    a, b, thread, worker, _ = _mid_turn_on_a(redis_server, start_replica, "abandoned", "gave-up-1")
    a.kill()
    worker.join(timeout=10)
    assert Client(b.url).thread(thread)["pending"] is True

    # The client never retries "abandoned"; its next message still finds a whole thread.
    response = Client(b.url).say(thread, "moving on", "next-1")
    assert response.status_code == 200, response.text
    assert response.json()["turn"] == 3
    messages = Client(b.url).thread(thread)["messages"]
    assert [m["id"] for m in messages][2:] == ["gave-up-1", "gave-up-1.reply", "next-1", "next-1.reply"]
    assert_whole(messages, 3)
