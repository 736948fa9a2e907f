"""A turn's deadline and the history's memory bound (issue 10 points 4 and 6), on real replicas
and a real Redis."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
import redis

from client import API_KEY, Client, metric
from servers import redis_env

pytestmark = pytest.mark.integration


def test_a_turn_past_its_deadline_is_cancelled_and_releases_its_lease(redis_server, start_replica):
    # 2 s between tokens, 1 s deadline: the model call never finishes in time.
    slow = start_replica(
        redis_env(redis_server, MODEL_TOKEN_DELAY_MS="2000", TURN_TIMEOUT_SECONDS="1"), name="deadline"
    )
    alice = Client(slow.url, API_KEY)
    thread = alice.new_thread()
    sse = alice.stream(thread, "hello there", message_id="m1")
    errors = [json.loads(data)["error"]["code"] for event, data in sse.events if event == "error"]
    assert errors == ["turn_timeout"] and sse.done() is None
    assert redis.Redis.from_url(redis_server.url(1)).exists(f"tl:{{{thread}}}:lease") == 0
    assert metric(slow.url, "threadline_turn_duration_seconds_count", 'outcome="timeout"') == 1
    assert metric(slow.url, "threadline_model_cancelled_total") >= 1
    # The lease is free: a retry with the same id (plain JSON, which the built-in model answers
    # without delays) is not 409 (busy): it finishes the turn, once.
    retry = alice.say(thread, "hello there", message_id="m1")
    assert retry.status_code == 200, retry.text
    assert [m["role"] for m in alice.thread(thread)["messages"]] == ["human", "ai"]


def _rss(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith(field + ":"))


def test_three_history_requests_on_a_big_thread_stay_within_64_mb(redis_server, start_replica):
    replica = start_replica(redis_env(redis_server, QUOTA_THREAD_BYTES="0"), name="history")
    alice = Client(replica.url, API_KEY, timeout=120)
    thread = alice.new_thread()
    for turn in range(40):  # issue 10's thread: 40 turns of 32 KB
        assert alice.say(thread, f"{turn:02d}" + "x" * (32 * 1024 - 2)).status_code == 200

    pid = replica.proc.pid
    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("5")  # restart the peak (VmHWM) from now
    before = _rss(pid, "VmRSS")
    results: list[httpx.Response] = []

    def history() -> None:
        results.append(alice.http.get(f"/v1/threads/{thread}/checkpoints", params={"limit": 100}))

    readers = [threading.Thread(target=history) for _ in range(3)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(120)
    assert [r.status_code for r in results] == [200, 200, 200]
    assert all(len(r.json()["checkpoints"]) == 100 for r in results)
    growth = _rss(pid, "VmHWM") - before
    # Issue 10: one request +303 MB, three +561 MB.
    assert growth < 64 * 1024 * 1024, f"peak RSS grew by {growth / 2**20:.0f} MB"


def test_history_limit_is_bounded(redis_server, start_replica):
    replica = start_replica(redis_env(redis_server), name="history-limit")
    alice = Client(replica.url, API_KEY)
    thread = alice.new_thread()
    refused = alice.http.get(f"/v1/threads/{thread}/checkpoints", params={"limit": 101})
    assert refused.status_code == 422
