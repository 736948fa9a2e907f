"""A full or read-only Redis is a store that is away (issue 18 bullet 5): 503 with Retry-After
on every route of /v1 and the LangGraph API, never 500; logins work for as long as db 0 can
take them.

Full: ``CONFIG SET maxmemory`` below what the test-owned Redis holds, ``noeviction`` (the
in-chart Redis's policy): Redis answers ``OOM command not allowed`` to every write. Read-only:
the Redis is demoted to a replica of another that holds the same data (``READONLY``), as a
primary is during a failover.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
import redis

from client import API_KEY
from servers import RedisServer, redis_env, wait_until

pytestmark = pytest.mark.integration

CHAT = {"assistant_id": "chat"}
HI = {**CHAT, "input": {"messages": [{"role": "user", "content": "hi"}]}}


def _prepare(base: str) -> dict[str, str]:
    """A session, a /v1 thread and an API thread with a finished run, while Redis has room."""
    http = httpx.Client(base_url=base, headers={"x-api-key": API_KEY}, timeout=30)
    token = httpx.post(f"{base}/v1/sessions", json={"api_key": API_KEY}).json()["session_token"]
    v1 = http.post("/v1/threads").json()["thread_id"]
    assert http.post(f"/v1/threads/{v1}/messages", json={"content": "hello"}).status_code == 200
    api = http.post("/threads", json={}).json()["thread_id"]
    done = http.post(f"/threads/{api}/runs/wait", json=HI)
    assert done.status_code == 200, done.text
    run = done.headers["content-location"].rsplit("/", 1)[-1]
    return {"token": token, "v1": v1, "api": api, "run": run}


# (method, path, JSON body): every route that stores something. {v1}, {api}, {run} are filled in.
WRITES = [
    ("POST", "/v1/threads", None),
    ("POST", "/v1/threads/{v1}/messages", {"content": "more"}),
    ("POST", "/threads", {}),
    ("POST", "/threads", {"thread_id": "{new}"}),
    ("PATCH", "/threads/{api}", {"metadata": {"k": "v"}}),
    ("POST", "/threads/{api}/copy", None),
    ("POST", "/threads/{api}/state", {"values": {"messages": [{"role": "user", "content": "x"}]}}),
    ("POST", "/threads/{api}/runs", HI),
    ("POST", "/threads/{api}/runs/wait", HI),
    ("POST", "/threads/{api}/runs/stream", HI),
    ("POST", "/runs", HI),
    ("POST", "/runs/wait", HI),
    ("POST", "/runs/stream", HI),
    ("POST", "/threads/{new}/runs/wait", {**HI, "if_not_exists": "create"}),
]
# Routes that only read (they may answer 200: a full or read-only Redis still serves reads).
READS = [
    ("GET", "/v1/threads/{v1}", None),
    ("GET", "/v1/threads/{v1}/checkpoints", None),
    ("GET", "/threads/{api}", None),
    ("GET", "/threads/{api}/state", None),
    ("POST", "/threads/{api}/history", {"limit": 5}),
    ("POST", "/threads/search", {}),
    ("POST", "/threads/count", {}),
    ("GET", "/threads/{api}/runs", None),
    ("GET", "/threads/{api}/runs/{run}", None),
    ("GET", "/threads/{api}/runs/{run}/join", None),
    ("POST", "/assistants/search", {}),
    ("GET", "/assistants/chat", None),
    ("GET", "/info", None),
]
# What frees space: DEL is allowed on a full Redis, but a delete first takes the thread's lease
# (a write), so it may be refused there too; on a read-only one it is refused.
DELETES = [
    ("POST", "/threads/{api}/runs/{run}/cancel", None),
    ("DELETE", "/threads/{api}/runs/{run}", None),
    ("DELETE", "/threads/{api}", None),
    ("DELETE", "/v1/threads/{v1}", None),
    ("DELETE", "/v1/sessions", None),
]


def _fill(value, ids: dict[str, str]):
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    return value


def _call(base: str, ids: dict[str, str], method: str, path: str, body) -> httpx.Response:
    headers = {"x-api-key": API_KEY}
    if path == "/v1/sessions":
        headers = {"Authorization": f"Bearer {ids['token']}"}
    kwargs = {} if body is None else {"json": _fill(body, ids)}
    return httpx.request(method, base + _fill(path, ids), headers=headers, timeout=30, **kwargs)


def _unavailable(response: httpx.Response, what: str) -> None:
    assert response.status_code == 503, f"{what}: {response.status_code} {response.text[:300]}"
    assert response.headers.get("retry-after", "").isdigit(), f"{what}: no Retry-After"
    assert response.json()["error"]["code"] == "unavailable", what


def _every_route(base: str, ids: dict[str, str], deletes_refused: bool) -> None:
    ids = {**ids, "new": str(uuid.uuid4())}
    for method, path, body in WRITES:
        _unavailable(_call(base, ids, method, path, body), f"{method} {path}")
    for method, path, body in READS:
        response = _call(base, ids, method, path, body)
        assert response.status_code in (200, 503), f"{method} {path}: {response.status_code} {response.text}"
        if response.status_code == 503:
            _unavailable(response, f"{method} {path}")
    for method, path, body in DELETES:
        response = _call(base, ids, method, path, body)
        # (A cancel of a run that has ended writes nothing: 202 either way.)
        if (deletes_refused and method == "DELETE") or response.status_code >= 500:
            _unavailable(response, f"{method} {path}")


def _login(base: str) -> httpx.Response:
    return httpx.post(f"{base}/v1/sessions", json={"api_key": API_KEY}, timeout=30)


def _fill_up(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url())
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", str(max(1, int(admin.info("memory")["used_memory"]) // 2)))


def test_full_redis_answers_503_with_retry_after_on_every_route(fresh_redis, start_replica):
    replica = start_replica(redis_env(fresh_redis), name="full")
    ids = _prepare(replica.url)
    _fill_up(fresh_redis)
    _unavailable(_login(replica.url), "POST /v1/sessions")  # db 0 is on the full Redis too
    _every_route(replica.url, ids, deletes_refused=False)
    assert "Traceback" not in replica.logs()
    # Room again: the service goes on, no restart.
    redis.Redis.from_url(fresh_redis.url()).config_set("maxmemory", "0")
    assert _login(replica.url).status_code == 201
    again = httpx.post(f"{replica.url}/runs/wait", json=HI, headers={"x-api-key": API_KEY}, timeout=30)
    assert again.status_code == 200, again.text


def test_logins_work_while_db0_has_room(fresh_redis, start_replica):
    """Sessions on a Redis of their own (REDIS_URL) that has room: logging in works while the
    full checkpoint Redis answers 503."""
    sessions = RedisServer().start()
    try:
        env = {**redis_env(fresh_redis), "REDIS_URL": sessions.url(0)}
        replica = start_replica(env, name="full-db1")
        ids = _prepare(replica.url)
        _fill_up(fresh_redis)
        login = _login(replica.url)
        assert login.status_code == 201, login.text
        token = login.json()["session_token"]
        created = httpx.post(
            f"{replica.url}/threads", json={}, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        _unavailable(created, "POST /threads with the new session")
        _every_route(replica.url, ids, deletes_refused=False)
    finally:
        sessions.close()


def test_read_only_redis_answers_503_with_retry_after_on_every_route(fresh_redis, start_replica):
    replica = start_replica(redis_env(fresh_redis), name="read-only")
    ids = _prepare(replica.url)
    # Demote the service's Redis to a replica of one that first copied its data.
    other = RedisServer().start()
    try:
        copy = redis.Redis.from_url(other.url())
        copy.replicaof("127.0.0.1", fresh_redis.port)
        _wait_synced(copy)
        copy.replicaof("no", "one")
        demoted = redis.Redis.from_url(fresh_redis.url())
        demoted.replicaof("127.0.0.1", other.port)
        _wait_synced(demoted)
        _unavailable(_login(replica.url), "POST /v1/sessions")
        _every_route(replica.url, ids, deletes_refused=True)
        assert "Traceback" not in replica.logs()
    finally:
        other.close()


def _wait_synced(client: redis.Redis, timeout: float = 15.0) -> None:
    def synced() -> bool:
        info = client.info("replication")
        return info.get("master_link_status") == "up" and not info.get("master_sync_in_progress")

    wait_until(synced, "the replica to sync", timeout)
