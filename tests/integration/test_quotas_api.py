"""Quotas on every LangGraph API path that stores what a tenant sends (issue 18 bullets 3, 7, 8),
against real replicas on a real Redis: each thing a tenant can make the server store counts
toward ``QUOTA_THREAD_BYTES`` (thread metadata on create and PATCH, state updates, a run's input,
command, config, context and metadata), a copy starts from its source's count, the queue cap
``QUOTA_QUEUED_RUNS_PER_THREAD``, the events cap ``MAX_EVENTS_PER_RUN``, the recursion ceiling
``MAX_RECURSION_LIMIT``; JSON beyond the limits is a 422 that takes no quota slot; a create
with another principal's thread id is a 404 like a read of it."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import orjson
import pytest
import redis

from client import API_KEY, OTHER_KEY
from servers import redis_env, wait_until

pytestmark = pytest.mark.integration

GRAPHS = Path(__file__).parent / "graphs" / "langgraph.json"


def _json(value) -> int:
    return len(orjson.dumps(value))


def _refused(response: httpx.Response, setting: str) -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded" and setting in error["message"], error


def _http(replica, key: str = API_KEY) -> httpx.Client:
    return httpx.Client(base_url=replica.url, headers={"x-api-key": key}, timeout=60)


def _used(db: redis.Redis, thread: str) -> int:
    return int(db.get(f"tl:{{{thread}}}:bytes") or 0)


def _threads_counted(db: redis.Redis, principal: str = "alice") -> int:
    return db.zcard(f"tl:p:{{{principal}}}:threads")


@pytest.fixture
def bytes_replicas(fresh_redis, start_replica):
    env = redis_env(fresh_redis, QUOTA_THREAD_BYTES="1000", LANGGRAPH_CONFIG=str(GRAPHS))
    return start_replica(env, name="bytes-a"), start_replica(env, name="bytes-b")


def test_every_thing_a_tenant_stores_counts_toward_the_thread_bytes(bytes_replicas, fresh_redis):
    db = redis.Redis.from_url(fresh_redis.url(1))
    a, b = (_http(r) for r in bytes_replicas)
    metadata = {"note": "m" * 50}
    thread = a.post("/threads", json={"metadata": metadata}).json()["thread_id"]
    expected = _json(metadata)
    assert _used(db, thread) == expected

    patch = {"label": "p" * 30}
    assert b.patch(f"/threads/{thread}", json={"metadata": patch}).status_code == 200
    expected += _json(patch)
    assert _used(db, thread) == expected

    run = {
        "assistant_id": "chat",
        "input": {"messages": [{"role": "user", "content": "i" * 20}]},
        "metadata": {"run": "r" * 20},
        "config": {"metadata": {"cfg": "c" * 20}, "tags": ["t"]},
        "context": {"ctx": "x" * 10},
    }
    done = b.post(f"/threads/{thread}/runs/wait", json=run)
    assert done.status_code == 200, done.text
    expected += sum(_json(run[k]) for k in ("input", "metadata", "config", "context"))
    assert _used(db, thread) == expected

    # After the run (before it, the thread has no graph to write through: 400, as the reference).
    values = {"messages": [{"role": "user", "content": "s" * 40}]}
    assert a.post(f"/threads/{thread}/state", json={"values": values}).status_code == 200
    expected += _json(values)
    assert _used(db, thread) == expected

    # Each path is refused once the thread is full, and stores nothing.
    big = {"fill": "f" * (1000 - expected)}
    _refused(a.patch(f"/threads/{thread}", json={"metadata": big}), "QUOTA_THREAD_BYTES=1000")
    assert "fill" not in b.get(f"/threads/{thread}").json()["metadata"]
    state = a.get(f"/threads/{thread}/state").json()
    _refused(
        a.post(
            f"/threads/{thread}/state",
            json={"values": {"messages": [{"role": "user", "content": big["fill"]}]}},
        ),
        "QUOTA_THREAD_BYTES=1000",
    )
    assert a.get(f"/threads/{thread}/state").json()["checkpoint"] == state["checkpoint"]
    for field, value in (("metadata", big), ("config", {"metadata": big}), ("context", big)):
        body = {"assistant_id": "chat", "input": {"messages": []}, field: value}
        _refused(b.post(f"/threads/{thread}/runs/wait", json=body), "QUOTA_THREAD_BYTES=1000")
    assert _used(db, thread) == expected
    # A thread created with more metadata than its quota is refused and takes no slot.
    before = _threads_counted(db)
    _refused(a.post("/threads", json={"metadata": {"fill": "f" * 1001}}), "QUOTA_THREAD_BYTES=1000")
    assert _threads_counted(db) == before


def test_command_counts_toward_the_thread_bytes(bytes_replicas, fresh_redis):
    db = redis.Redis.from_url(fresh_redis.url(1))
    a = _http(bytes_replicas[0])
    thread = a.post("/threads", json={}).json()["thread_id"]
    start = {"assistant_id": "steps", "input": {"steps": 1, "ask": "ok?"}}
    assert a.post(f"/threads/{thread}/runs/wait", json=start).status_code == 200
    used = _used(db, thread)
    assert used == _json(start["input"])
    resume = {"assistant_id": "steps", "command": {"resume": "y" * 100}}
    assert a.post(f"/threads/{thread}/runs/wait", json=resume).status_code == 200
    assert _used(db, thread) == used + _json({"resume": "y" * 100})
    update = {"assistant_id": "steps", "command": {"update": {"tag": "u" * 900}, "goto": "step"}}
    _refused(a.post(f"/threads/{thread}/runs/wait", json=update), "QUOTA_THREAD_BYTES=1000")


def test_a_copy_counts_against_the_copier_from_its_source_count(bytes_replicas, fresh_redis):
    """Copy, fill, copy, fill passed the quota (2.86 MB in 1 MiB) while a copy reset the count."""
    db = redis.Redis.from_url(fresh_redis.url(1))
    a, b = (_http(r) for r in bytes_replicas)
    thread = a.post("/threads", json={}).json()["thread_id"]
    fill = {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "f" * 600}]}}
    assert a.post(f"/threads/{thread}/runs/wait", json=fill).status_code == 200
    copied = b.post(f"/threads/{thread}/copy")
    assert copied.status_code == 200, copied.text
    copy = copied.json()["thread_id"]
    assert _used(db, copy) == _used(db, thread) > 600
    _refused(a.post(f"/threads/{copy}/runs/wait", json=fill), "QUOTA_THREAD_BYTES=1000")
    assert len(a.get(f"/threads/{copy}/state").json()["values"]["messages"]) == 2  # nothing stored


def test_queued_runs_per_thread(fresh_redis, start_replica):
    env = redis_env(fresh_redis, QUOTA_QUEUED_RUNS_PER_THREAD="3", LANGGRAPH_CONFIG=str(GRAPHS))
    a, b = (_http(start_replica(env, name=n)) for n in ("queue-a", "queue-b"))
    thread = a.post("/threads", json={}).json()["thread_id"]
    slow = {"assistant_id": "steps", "input": {"steps": 1, "delay": 1.5}}
    runs = [(a if i % 2 else b).post(f"/threads/{thread}/runs", json=slow) for i in range(3)]
    assert [r.status_code for r in runs] == [200] * 3, [r.text for r in runs]
    # Pending and running runs count alike, whichever replica is asked, and stateless runs of
    # the principal are not affected (they have threads of their own).
    _refused(a.post(f"/threads/{thread}/runs", json=slow), "QUOTA_QUEUED_RUNS_PER_THREAD=3")
    _refused(b.post(f"/threads/{thread}/runs/wait", json=slow), "QUOTA_QUEUED_RUNS_PER_THREAD=3")
    other = a.post("/threads", json={}).json()["thread_id"]
    assert a.post(f"/threads/{other}/runs", json=slow).status_code == 200
    assert len(a.get(f"/threads/{thread}/runs", params={"limit": 100}).json()) == 3  # nothing stored
    # Once one has ended, there is room for one more.
    first = runs[0].json()["run_id"]
    assert a.get(f"/threads/{thread}/runs/{first}/join").status_code == 200
    assert b.post(f"/threads/{thread}/runs", json=slow).status_code == 200


def test_events_per_run(fresh_redis, start_replica):
    env = redis_env(fresh_redis, MAX_EVENTS_PER_RUN="5", LANGGRAPH_CONFIG=str(GRAPHS))
    a = _http(start_replica(env, name="events"))
    thread = a.post("/threads", json={}).json()["thread_id"]
    body = {"assistant_id": "steps", "input": {"steps": 20}, "stream_mode": ["updates"]}
    with a.stream("POST", f"/threads/{thread}/runs/stream", json=body) as stream:
        lines = list(stream.iter_lines())
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert events.count("updates") == 5 and events[-1] == "error", events
    error = next(line for line in reversed(lines) if line.startswith("data: "))
    assert "MAX_EVENTS_PER_RUN=5" in error
    (run,) = a.get(f"/threads/{thread}/runs").json()
    assert run["status"] == "error"
    # Fewer events than the cap run to the end.
    short = {**body, "input": {"steps": 2, "tag": "s"}}
    assert a.post(f"/threads/{thread}/runs/wait", json=short).status_code == 200
    assert a.get(f"/threads/{thread}/runs").json()[0]["status"] == "success"


def test_recursion_limit_has_a_server_ceiling(fresh_redis, start_replica):
    env = redis_env(fresh_redis, MAX_RECURSION_LIMIT="6", LANGGRAPH_CONFIG=str(GRAPHS))
    a = _http(start_replica(env, name="recursion"))

    def steps_done(config: dict | None) -> tuple[int, str]:
        thread = a.post("/threads", json={}).json()["thread_id"]
        body = {"assistant_id": "steps", "input": {"steps": 1000}, **({"config": config} if config else {})}
        result = a.post(f"/threads/{thread}/runs/wait", json=body).json()
        done = a.get(f"/threads/{thread}/state").json()["values"].get("done", [])
        return len(done), orjson.dumps(result).decode()

    for config in (None, {"recursion_limit": 10_000}):  # the default, and a client asking more
        done, result = steps_done(config)
        assert done < 6 and "Recursion limit of 6 reached" in result, (config, done, result)
    done, result = steps_done({"recursion_limit": 3})  # lower is kept
    assert done < 3 and "Recursion limit of 3 reached" in result
    bad = {"assistant_id": "steps", "input": {}, "config": {"recursion_limit": "many"}}
    assert a.post("/runs/wait", json=bad).status_code == 422


def _nested(depth: int) -> object:
    value: object = "x"
    for _ in range(depth):
        value = [value]
    return value


def _deep_text(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.fixture
def limited(fresh_redis, start_replica):
    env = redis_env(fresh_redis, QUOTA_THREADS_PER_PRINCIPAL="2", QUOTA_THREAD_BYTES="1000")
    return start_replica(env, name="json")


def test_json_limits_are_422_and_take_no_quota_slot(limited, fresh_redis):
    """Today's 500s (orjson refuses > 255 levels and integers past 64 bits) as 422 before
    anything is reserved; at the limits bodies go through."""
    db = redis.Redis.from_url(fresh_redis.url(1))
    http = _http(limited)
    thread = http.post("/threads", json={}).json()["thread_id"]
    deep = {256: _deep_text(256), 500: _deep_text(500), 999: _deep_text(999), 5000: _deep_text(5000)}
    bodies = [
        *(f'{{"metadata": {{"x": {text}}}}}' for text in deep.values()),
        '{"metadata": {"x": 18446744073709551616}}',
        '{"metadata": {"x": -9223372036854775809}}',
        '{"metadata": {"x": ' + "9" * 5000 + "}}",
    ]
    routes = [
        ("POST", "/threads"),
        ("POST", "/runs/wait"),
        ("POST", f"/threads/{thread}/runs/wait"),
        ("PATCH", f"/threads/{thread}"),
        ("POST", f"/threads/{thread}/state"),
        ("POST", "/threads/search"),
        ("POST", f"/v1/threads/{thread}/messages"),
        ("POST", "/v1/sessions"),
    ]
    for method, path in routes:
        for text in bodies:
            sent = text if "runs" not in path else text[:-1] + ', "assistant_id": "chat"}'
            response = http.request(method, path, content=sent, headers={"content-type": "application/json"})
            assert response.status_code == 422, (method, path, sent[:60], response.status_code, response.text)
            assert response.json()["error"]["code"] == "invalid_request"
    assert _threads_counted(db) == 1  # no slot taken by any of them
    # At the limits: 64 levels, the 64-bit extremes.
    ok = {"metadata": {"deep": _nested(62), "hi": 2**64 - 1, "lo": -(2**63)}}
    created = http.post("/threads", json=ok)
    assert created.status_code == 200, created.text
    assert created.json()["metadata"]["hi"] == 2**64 - 1
    _refused(http.post("/threads", json={}), "QUOTA_THREADS_PER_PRINCIPAL=2")


def test_a_refused_stateless_run_gives_its_thread_slot_back(limited, fresh_redis):
    db = redis.Redis.from_url(fresh_redis.url(1))
    http = _http(limited)
    big = {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "b" * 1000}]}}
    for _ in range(3):  # refused after its thread was made (the thread's bytes are counted on it)
        _refused(http.post("/runs/wait", json=big), "QUOTA_THREAD_BYTES=1000")
    assert _threads_counted(db) == 0
    for _ in range(2):
        assert http.post("/threads", json={}).status_code == 200


def test_create_with_another_principals_id_is_404_and_takes_nothing(limited, fresh_redis):
    alice, bob = _http(limited), _http(limited, OTHER_KEY)
    thread = alice.post("/threads", json={"metadata": {"mine": True}}).json()["thread_id"]
    for if_exists in ("raise", "do_nothing"):
        taken = bob.post("/threads", json={"thread_id": thread, "if_exists": if_exists})
        assert taken.status_code == 404, taken.text
        assert taken.json() == bob.get(f"/threads/{thread}").json()  # as a read answers
    run = {"assistant_id": "chat", "input": {"messages": []}, "if_not_exists": "create"}
    assert bob.post(f"/threads/{thread}/runs/wait", json=run).status_code == 404
    assert alice.get(f"/threads/{thread}").json()["metadata"] == {"mine": True}
    assert alice.post("/threads", json={"thread_id": thread}).status_code == 409  # own: 409
    free = str(uuid.uuid4())
    assert bob.post("/threads", json={"thread_id": free}).status_code == 200


def test_queue_cap_is_per_thread_not_stale(fresh_redis, start_replica):
    """A thread whose runs all ended takes new runs up to the cap again (the cap counts only
    pending and running runs)."""
    env = redis_env(fresh_redis, QUOTA_QUEUED_RUNS_PER_THREAD="1")
    a = _http(start_replica(env, name="queue-one"))
    thread = a.post("/threads", json={}).json()["thread_id"]
    body = {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "hi"}]}}
    for _ in range(3):
        assert a.post(f"/threads/{thread}/runs/wait", json=body).status_code == 200
    wait_until(lambda: a.get(f"/threads/{thread}").json()["status"] == "idle", "the thread to be idle", 5)
    assert a.post(f"/threads/{thread}/runs/wait", json=body).status_code == 200
