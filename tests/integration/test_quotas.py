"""Quotas (issue 10 point 3): threads per principal and message bytes per thread, shared by the
replicas through the checkpoint Redis, answered 429 ``quota_exceeded`` naming the limit; and
the start-up warning when the checkpoint Redis would evict keys."""

from __future__ import annotations

import uuid

import httpx
import pytest
import redis
from jwt_issuer import Issuer, example_env

from threadline.config import QuotaSettings
from threadline.quotas import QuotaExceeded, RedisQuotas
from threadline.redis_client import async_client
from threadline.redis_keys import thread_bytes_key

from client import API_KEY, OTHER_KEY, Client
from servers import RedisServer, redis_env, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(params=["api-keys", "custom-auth"])
def replicas(request, fresh_redis, start_replica, tmp_path):
    """Two replicas; with ``custom-auth`` also serving the custom auth example (issue 21): the
    API_KEYS principals keep their quotas beside it (test_custom_auth.py: those of JWT users)."""
    env = redis_env(fresh_redis, QUOTA_THREADS_PER_PRINCIPAL="2", QUOTA_THREAD_BYTES="100")
    if request.param == "custom-auth":
        env |= example_env(str(Issuer(tmp_path).jwks_file))
    return start_replica(env, name="quota-a"), start_replica(env, name="quota-b")


def _refused(response, setting: str) -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded" and setting in error["message"]


def test_threads_per_principal_across_replicas(replicas):
    a, b = (Client(r.url, API_KEY) for r in replicas)
    first = a.new_thread()
    b.new_thread()
    _refused(a.http.post("/v1/threads"), "QUOTA_THREADS_PER_PRINCIPAL=2")
    _refused(b.http.post("/v1/threads"), "QUOTA_THREADS_PER_PRINCIPAL=2")
    Client(replicas[0].url, OTHER_KEY).new_thread()  # another tenant is not affected
    assert b.http.delete(f"/v1/threads/{first}").status_code == 204
    a.new_thread()  # a deleted thread stops counting


def test_langgraph_api_threads_and_run_inputs_take_the_same_quotas(replicas):
    a, b = (httpx.Client(base_url=r.url, headers={"x-api-key": API_KEY}, timeout=30) for r in replicas)
    first = a.post("/threads", json={}).json()["thread_id"]
    Client(replicas[1].url, API_KEY).new_thread()  # a /v1 thread counts toward the same quota
    _refused(b.post("/threads", json={}), "QUOTA_THREADS_PER_PRINCIPAL=2")
    stateless = a.post("/runs/wait", json={"assistant_id": "chat", "input": {}})
    _refused(stateless, "QUOTA_THREADS_PER_PRINCIPAL=2")
    missing = str(uuid.uuid4())
    body = {"assistant_id": "chat", "input": {"messages": []}, "if_not_exists": "create"}
    _refused(a.post(f"/threads/{missing}/runs/wait", json=body), "QUOTA_THREADS_PER_PRINCIPAL=2")
    assert b.get(f"/threads/{missing}").status_code == 404  # refused: nothing stored
    # Run input bytes count toward QUOTA_THREAD_BYTES=100 (its JSON: 63 bytes; with custom auth
    # the example's handler stamps {"owner":"alice"}, 17 bytes, on the thread and on the run).
    hi = {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "x" * 20}]}}
    assert a.post(f"/threads/{first}/runs/wait", json=hi).status_code == 200
    _refused(b.post(f"/threads/{first}/runs/wait", json=hi), "QUOTA_THREAD_BYTES=100")
    assert a.delete(f"/threads/{first}").status_code == 204  # releases its slot
    assert b.post("/threads", json={}).status_code == 200


def test_message_bytes_per_thread(replicas):
    a, b = (Client(r.url, API_KEY) for r in replicas)
    thread = a.new_thread()
    assert a.say(thread, "x" * 60, message_id="m1").status_code == 200
    before = a.thread(thread)
    _refused(b.say(thread, "y" * 41), "QUOTA_THREAD_BYTES=100")
    sse = b.http.post(
        f"/v1/threads/{thread}/messages", json={"content": "y" * 41}, headers={"Accept": "text/event-stream"}
    )
    _refused(sse, "QUOTA_THREAD_BYTES=100")  # a status, not an event inside a 200 stream
    assert a.thread(thread) == before  # nothing stored
    # A retried message id the thread already holds is not counted again.
    assert b.say(thread, "x" * 60, message_id="m1").status_code == 200
    assert b.say(thread, "z" * 40).status_code == 200  # exactly 100


def test_quota_counters_are_keys_of_the_schema_with_ttls(replicas, fresh_redis):
    a = Client(replicas[0].url, API_KEY)
    thread = a.new_thread()
    a.say(thread, "hello")
    db = redis.Redis.from_url(fresh_redis.url(1))
    assert int(db.get(f"tl:{{{thread}}}:bytes")) == 5
    assert db.zscore("tl:p:{alice}:threads", thread) is not None
    assert db.ttl(f"tl:{{{thread}}}:bytes") > 0 and db.ttl("tl:p:{alice}:threads") > 0
    assert a.http.delete(f"/v1/threads/{thread}").status_code == 204
    assert db.exists(f"tl:{{{thread}}}:bytes") == 0
    assert db.zscore("tl:p:{alice}:threads", thread) is None


@pytest.mark.parametrize(("policy", "warned"), [("allkeys-lru", True), ("noeviction", False)])
def test_startup_warns_when_the_checkpoint_redis_evicts(start_replica, policy, warned):
    server = RedisServer().start()
    try:
        redis.Redis.from_url(server.url()).config_set("maxmemory-policy", policy)
        replica = start_replica(redis_env(server), name=f"evict-{policy}")
        if warned:
            wait_until(lambda: "evicts keys" in replica.logs(), "the eviction warning in the log")
        assert ("evicts keys" in replica.logs()) is warned
    finally:
        server.close()


async def test_expired_threads_stop_counting(fresh_redis):
    """A thread idle past the checkpoint TTL is gone with its data; it must not hold a slot."""
    clock = [1_000_000.0]
    client = async_client(fresh_redis.url(1))
    quotas = RedisQuotas(
        client, QuotaSettings(threads_per_principal=2), ttl_seconds=100, clock=lambda: clock[0]
    )
    try:
        await quotas.reserve_thread("alice", "t1")
        clock[0] += 60
        await quotas.reserve_thread("alice", "t2")
        with pytest.raises(QuotaExceeded):
            await quotas.reserve_thread("alice", "t3")
        clock[0] += 50  # t1 idle 110 s > ttl; t2 idle 50 s
        await quotas.add_message_bytes("alice", "t2", 5)  # activity keeps t2 counting
        await quotas.reserve_thread("alice", "t3")
        with pytest.raises(QuotaExceeded):
            await quotas.reserve_thread("alice", "t4")
    finally:
        await client.aclose()


async def test_message_bytes_are_counted_after_redis_forgot_the_script(fresh_redis):
    """add_message_bytes sends the script by its SHA in one round trip; a Redis that lost it
    (restarted, SCRIPT FLUSH) gets it loaded and counts the same."""
    client = async_client(fresh_redis.url(1))
    quotas = RedisQuotas(client, QuotaSettings(thread_bytes=10), ttl_seconds=100)
    try:
        await client.script_flush()
        await quotas.add_message_bytes("alice", "t1", 6)
        with pytest.raises(QuotaExceeded):
            await quotas.add_message_bytes("alice", "t1", 5)
        await quotas.add_message_bytes("alice", "t1", 4)
        assert int(await client.get(thread_bytes_key("t1"))) == 10
    finally:
        await client.aclose()
