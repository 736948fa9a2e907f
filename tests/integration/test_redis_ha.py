"""Redis Sentinel and Cluster (issue 13), against real processes: a primary + replica + three
sentinels, and a 3-master Cluster formed by the fixture (``tests/servers.py``).

The Cluster runs LangGraph's conformance suite (FULL, with every extended capability) through
``open_checkpointer``; the Sentinel set shows the saver, the lease and the sessions following
the primary through a failover.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
import uuid

import httpx
import pytest
import uvloop
from checkpoint_graph import build_graph, expected_reply
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint
from redis.exceptions import ConnectionError as RedisConnectionError
from test_checkpoint_conformance import EXTENDED, extended_detected, run_suite, summary

from threadline import redis_client
from threadline.checkpoint import open_checkpointer
from threadline.checkpoint.errors import FencedError
from threadline.checkpoint.redis import RedisCheckpointSaver
from threadline.config import CheckpointSettings
from threadline.lease import NotReplicated, RedisTurnLease
from threadline.redis_keys import ThreadKeys, lease_key

from client import API_KEYS, Client
from client import expected_reply as expected_service_reply
from servers import RedisClusterSet, RedisSentinelSet, until, wait_until

pytestmark = pytest.mark.integration


def cluster_settings(cluster: RedisClusterSet, **extra: object) -> CheckpointSettings:
    return CheckpointSettings(backend="redis", redis_url=cluster.url(), **extra)


def flush_cluster(cluster: RedisClusterSet) -> None:
    for master in cluster.masters:
        client = master.client()
        client.flushall()
        client.close()


async def test_cluster_full_conformance(redis_cluster: RedisClusterSet, record_property) -> None:
    report = await run_suite(
        "redis-cluster", cluster_settings(redis_cluster), fresh_store=lambda: flush_cluster(redis_cluster)
    )
    record_property("conformance", summary(report))
    print(f"redis cluster: {summary(report)}")
    assert extended_detected(report) == EXTENDED, summary(report)
    assert report.passed_all_base(), summary(report)
    assert report.conformance_level() == "FULL", summary(report)


async def test_cluster_spreads_threads_over_masters_and_lists_across_them(
    redis_cluster: RedisClusterSet,
) -> None:
    flush_cluster(redis_cluster)
    threads = [f"spread-{i}" for i in range(30)]
    async with open_checkpointer(cluster_settings(redis_cluster)) as saver:
        for thread_id in threads:
            config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            await saver.aput(config, create_checkpoint(empty_checkpoint(), None, 1), {"step": 1}, {})
        listed = {t.config["configurable"]["thread_id"] async for t in saver.alist(None)}
    assert listed == set(threads)  # SCAN over every master, not just one
    holding = [m.client().dbsize() for m in redis_cluster.masters]
    assert all(n > 0 for n in holding), holding  # 30 threads land on all three masters


async def test_cluster_keeps_a_thread_in_one_slot_through_a_graph_run(redis_cluster: RedisClusterSet) -> None:
    """A whole conversation (puts in MULTI, Lua scripts, reads) on a Cluster: any key of a
    thread outside its slot would fail with CROSSSLOT."""
    thread_id = f"conv-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread_id}}
    history: list[str] = []
    async with open_checkpointer(cluster_settings(redis_cluster)) as saver:
        graph = build_graph(saver)
        for turn in range(1, 4):
            content = f"message {turn}"
            state = await graph.ainvoke({"messages": [HumanMessage(content)]}, config)
            reply = state["messages"][-1].content
            assert reply == expected_reply(history, content)
            history += [content, reply]
        async with open_checkpointer(cluster_settings(redis_cluster)) as other:  # another replica
            state = await build_graph(other).aget_state(config)
        assert [m.content for m in state.values["messages"]] == history
        await saver.adelete_thread(thread_id)
    client = redis_cluster.masters[0].client()
    assert len({client.execute_command("CLUSTER KEYSLOT", k) for k in ThreadKeys.of(thread_id)}) == 1


def test_cluster_sync_methods(redis_cluster: RedisClusterSet) -> None:
    saver = RedisCheckpointSaver.from_url(redis_cluster.url(), ttl_seconds=60)
    thread_id = f"sync-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": ["hello"]}
    checkpoint["channel_versions"] = {"messages": "1"}
    # Channel values make put a MULTI (blobs + script); copy_thread reads and writes in MULTI.
    stored = saver.put(config, checkpoint, {"step": 1}, {"messages": "1"})
    assert saver.get_tuple(config).config == stored
    assert saver.get_tuple(config).checkpoint["channel_values"] == {"messages": ["hello"]}
    saver.copy_thread(thread_id, f"{thread_id}-copy")
    copy = saver.get_tuple({"configurable": {"thread_id": f"{thread_id}-copy", "checkpoint_ns": ""}})
    assert copy.checkpoint["channel_values"] == {"messages": ["hello"]}
    assert config["configurable"]["thread_id"] in {
        t.config["configurable"]["thread_id"] for t in saver.list(None)
    }
    asyncio.run(saver.aclose())


async def test_sentinel_saver_follows_the_primary_through_a_failover(
    redis_sentinel: RedisSentinelSet,
) -> None:
    settings = CheckpointSettings(backend="redis", redis_url=redis_sentinel.url(1))
    thread_id = "follow"
    config = {"configurable": {"thread_id": thread_id}}
    async with open_checkpointer(settings) as saver:
        graph = build_graph(saver)
        await graph.ainvoke({"messages": [HumanMessage("before")]}, config)
        # Wait until the replica has it (this test is about following, not about WAIT): a write
        # and WAIT on one connection cover every earlier write of the primary.
        client = redis_client.async_client(redis_sentinel.url(1))
        replies = await redis_client.on_one_connection(
            client, "probe", ("SET", "probe", 1), ("WAIT", 1, 5000)
        )
        assert replies[1] == 1
        old = redis_sentinel.primary_port()
        redis_sentinel.kill_primary()
        killed = time.monotonic()
        state = await until(
            lambda: graph.ainvoke({"messages": [HumanMessage("after")]}, config),
            "a turn to succeed after the primary's death",
            30,
            interval=0.1,
            ignore=(RedisConnectionError,),
        )
        recovered = time.monotonic() - killed
        assert redis_sentinel.primary_port() != old
        assert [m.content for m in state["messages"]][::2] == ["before", "after"]
        print(f"sentinel: first successful turn {recovered:.2f} s after the primary was SIGKILLed")
        await client.aclose()


# --- the turn lease across a failover, and WAIT ------------------------------------------------


def sentinel_lease(servers: RedisSentinelSet, **options: object) -> tuple[RedisTurnLease, object]:
    client = redis_client.async_client(servers.url(1))
    lease = RedisTurnLease(client, lease_seconds=5, wait_seconds=0.2, counter_ttl_seconds=60, **options)
    return lease, client


async def replicated(client) -> None:
    """Return once the replica has every write the primary has made so far."""
    _set, acked = await redis_client.on_one_connection(client, "sync", ("SET", "sync", 1), ("WAIT", 1, 5000))
    assert acked == 1


async def test_a_counter_that_goes_backwards_on_the_promoted_replica_lets_no_stale_writer_through(
    redis_sentinel: RedisSentinelSet,
) -> None:
    """The failover the fence must survive: the stale holder's INCR and lease never reached the
    replica that was promoted, so the new primary's counter hands out the stale holder's number
    again. The token's epoch (the primary's replication id) keeps the two tokens different."""
    thread_id = "fence-failover"
    keys = ThreadKeys.of(thread_id)
    stale, stale_client = sentinel_lease(redis_sentinel)
    async with open_checkpointer(
        CheckpointSettings(backend="redis", redis_url=redis_sentinel.url(1))
    ) as saver:
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        async with stale.hold(thread_id) as held:
            await replicated(stale_client)
            old = redis_sentinel.primary_port()
            redis_sentinel.kill_primary()  # the stale holder's replica is paused, say: it lives on
            redis_sentinel.wait_for_failover(old)
            # What asynchronous replication may lose: the lease and the counter's last INCR.
            new_primary = redis_sentinel.node(redis_sentinel.primary_port()).client()
            new_primary.select(1)
            new_primary.delete(keys.lease)
            new_primary.decr(keys.fence)
            fresh, fresh_client = sentinel_lease(redis_sentinel)
            async with fresh.hold(thread_id) as current:
                counter, epoch = current.token.split(".")
                assert counter == held.token.split(".")[0]  # the counter went backwards...
                assert epoch != held.token.split(".")[1]  # ...but the epoch moved on
                stale_config = {"configurable": {**config["configurable"], "fencing_token": held.token}}
                with pytest.raises(FencedError):
                    await saver.aput(stale_config, create_checkpoint(empty_checkpoint(), None, 1), {}, {})
                fresh_config = {"configurable": {**config["configurable"], "fencing_token": current.token}}
                await saver.aput(
                    fresh_config, create_checkpoint(empty_checkpoint(), None, 2), {"step": 2}, {}
                )
        assert (await saver.aget_tuple(config)).metadata["step"] == 2
    for client in (stale_client, fresh_client):
        await client.aclose()


async def test_wait_confirms_a_turn_on_a_replica(redis_sentinel: RedisSentinelSet) -> None:
    lease, client = sentinel_lease(redis_sentinel, wait_replicas=1, wait_timeout_ms=5000)
    async with lease.hold("wait-ok"):
        await client.set("tl:{wait-ok}:payload", "x")
    replica = redis_sentinel.replica.client()
    replica.select(1)
    assert replica.get("tl:{wait-ok}:payload") == b"x"  # there before hold() returned
    await client.aclose()


async def test_a_turn_no_replica_confirms_is_not_replicated(redis_sentinel: RedisSentinelSet) -> None:
    lease, client = sentinel_lease(redis_sentinel, wait_replicas=1, wait_timeout_ms=300)
    redis_sentinel.replica.proc.send_signal(signal.SIGSTOP)  # alive to the sentinels for ~1 s
    try:
        with pytest.raises(NotReplicated, match="0 of 1 replicas confirmed within 300 ms"):
            async with lease.hold("wait-stopped"):
                await client.set("tl:{wait-stopped}:payload", "x")
    finally:
        redis_sentinel.replica.proc.send_signal(signal.SIGCONT)
    assert await client.exists(lease_key("wait-stopped")) == 0  # released all the same
    two, _ = sentinel_lease(redis_sentinel, wait_replicas=2, wait_timeout_ms=1000)
    with pytest.raises(NotReplicated, match="1 of 2 replicas"):
        async with two.hold("wait-two"):
            pass
    await client.aclose()


async def test_a_turn_that_saw_the_primary_change_is_not_acknowledged(
    redis_sentinel: RedisSentinelSet,
) -> None:
    """Its last writes may have gone to the old primary and died with it, even though its lease
    (older, replicated) is on the new one: WAIT there would prove nothing."""
    lease, client = sentinel_lease(redis_sentinel, wait_replicas=1, wait_timeout_ms=1000)
    with pytest.raises(NotReplicated, match="primary changed"):
        async with lease.hold("wait-failover"):
            await replicated(client)
            old = redis_sentinel.primary_port()
            redis_sentinel.kill_primary()
            redis_sentinel.wait_for_failover(old)
    await client.aclose()


# --- through the service -----------------------------------------------------------------------


def sentinel_env(servers: RedisSentinelSet, **extra: str) -> dict[str, str]:
    return {
        "CHECKPOINT_BACKEND": "redis",
        "CHECKPOINT_REDIS_URL": servers.url(1),
        "SESSION_BACKEND": "redis",
        "REDIS_URL": servers.url(0),
        "API_KEYS": API_KEYS,
        **extra,
    }


def test_an_unconfirmed_turn_is_503_and_its_retry_is_exactly_once(redis_sentinel, start_replica) -> None:
    env = sentinel_env(
        redis_sentinel, CHECKPOINT_REDIS_WAIT_REPLICAS="1", CHECKPOINT_REDIS_WAIT_TIMEOUT_MS="300"
    )
    client = Client(start_replica(env, name="r1").url)
    thread = client.new_thread()
    assert client.say(thread, "first").status_code == 200
    redis_sentinel.replica.proc.send_signal(signal.SIGSTOP)
    try:
        response = client.say(thread, "second", message_id="m-2")
        assert response.status_code == 503, response.text
        assert response.headers.get("Retry-After")
        assert response.json()["error"]["code"]
    finally:
        redis_sentinel.replica.proc.send_signal(signal.SIGCONT)
    # The turn ran and is stored on the primary; it was only not acknowledged. The retry (same
    # id) finds it, waits for the replica this time, and answers the stored reply.
    retry = client.say(thread, "second", message_id="m-2")
    assert retry.status_code == 200, retry.text
    assert retry.json()["reply"]["content"] == expected_service_reply(
        ["first", expected_service_reply(["first"]), "second"]
    )
    messages = client.thread(thread)["messages"]
    assert [m["content"] for m in messages if m["role"] == "human"] == ["first", "second"]
    assert len(messages) == 4


def test_the_service_on_a_cluster_serves_turns_and_sessions(redis_cluster, start_replica) -> None:
    env = {
        "CHECKPOINT_BACKEND": "redis",
        "CHECKPOINT_REDIS_URL": redis_cluster.url(),
        "SESSION_BACKEND": "redis",
        "REDIS_URL": redis_cluster.url(),  # db 0 for both: sessions and checkpoints share it
        "API_KEYS": API_KEYS,
    }
    first, second = start_replica(env, name="c1"), start_replica(env, name="c2")
    session = httpx.post(f"{first.url}/v1/sessions", json={"api_key": "test-key-alice"}, timeout=10)
    assert session.status_code == 201, session.text
    token = session.json()["session_token"]
    a, b = Client(first.url), Client(second.url)
    b.http.headers.pop("X-API-Key")
    b.http.headers["Authorization"] = f"Bearer {token}"  # a session made on the other replica
    thread = a.new_thread()
    history: list[str] = []
    for i, client in enumerate([a, b, a, b]):
        reply = client.say(thread, f"m{i}").json()["reply"]["content"]
        assert reply == expected_service_reply([*history, f"m{i}"])
        history += [f"m{i}", reply]
    assert [m["content"] for m in b.thread(thread)["messages"]] == history


def test_sessions_leases_and_checkpoints_follow_a_sentinel_failover(redis_sentinel, start_replica) -> None:
    """Through the service: a session made before the primary dies still authenticates after
    the failover, and the conversation goes on with its whole history."""
    service = start_replica(sentinel_env(redis_sentinel), name="s1")
    session = httpx.post(f"{service.url}/v1/sessions", json={"api_key": "test-key-alice"}, timeout=10)
    assert session.status_code == 201, session.text
    client = Client(service.url)
    client.http.headers.pop("X-API-Key")
    client.http.headers["Authorization"] = f"Bearer {session.json()['session_token']}"
    thread = client.new_thread()
    first = client.say(thread, "before").json()["reply"]["content"]
    primary = redis_sentinel.primary.client()
    pipe = primary.pipeline(transaction=False)
    assert pipe.set("sync", 1).execute_command("WAIT", 1, 5000).execute()[1] == 1  # replicated
    old = redis_sentinel.primary_port()
    redis_sentinel.kill_primary()

    def after() -> httpx.Response | None:  # 503 while no primary; the same message id each time
        response = client.say(thread, "after", message_id="m-after")
        assert response.status_code in (200, 503), response.text
        return response if response.status_code == 200 else None

    response = wait_until(after, "a turn after the failover", 30, interval=0.1)
    assert redis_sentinel.primary_port() != old
    assert response.json()["reply"]["content"] == expected_service_reply(["before", first, "after"])
    assert [m["content"] for m in client.thread(thread)["messages"]][::2] == ["before", "after"]


def _api_runs_across(first, second, thread_id: str | None = None) -> str:
    """One LangGraph API run made on ``first`` (SDK, x-api-key) and joined from ``second``;
    returns the thread id."""
    from langgraph_sdk import get_sync_client

    from client import API_KEY

    a = get_sync_client(url=first.url, api_key=API_KEY)
    b = get_sync_client(url=second.url, api_key=API_KEY)
    if thread_id is None:
        thread_id = a.threads.create()["thread_id"]
    turn = len(b.threads.get_state(thread_id)["values"].get("messages", [])) // 2 + 1
    run = a.runs.create(thread_id, "chat", input={"messages": [{"role": "human", "content": f"m{turn}"}]})
    b.runs.join(thread_id, run["run_id"])
    assert b.runs.get(thread_id, run["run_id"])["status"] == "success"
    messages = b.threads.get_state(thread_id)["values"]["messages"]
    assert len(messages) == 2 * turn and messages[-1]["content"].startswith(f"turn {turn} ")
    return thread_id


def test_langgraph_api_runs_on_a_cluster(redis_cluster, start_replica) -> None:
    """Thread records, run records and run events live under the thread's hash tag (or in
    keys of their own slot): runs work on a Cluster, created on one replica, joined on another."""
    env = {
        "CHECKPOINT_BACKEND": "redis",
        "CHECKPOINT_REDIS_URL": redis_cluster.url(),
        "SESSION_BACKEND": "redis",
        "REDIS_URL": redis_cluster.url(),
        "API_KEYS": API_KEYS,
    }
    first, second = start_replica(env, name="lc1"), start_replica(env, name="lc2")
    thread = _api_runs_across(first, second)
    _api_runs_across(second, first, thread)


def test_langgraph_api_runs_after_a_sentinel_failover(redis_sentinel, start_replica) -> None:
    """Runs, their records and the thread's lease follow the primary: a run made after the
    failover continues the thread made before it."""
    env = {
        "CHECKPOINT_BACKEND": "redis",
        "CHECKPOINT_REDIS_URL": redis_sentinel.url(1),
        "SESSION_BACKEND": "redis",
        "REDIS_URL": redis_sentinel.url(0),
        "CHECKPOINT_REDIS_WAIT_REPLICAS": "1",
        "API_KEYS": API_KEYS,
    }
    first, second = start_replica(env, name="ls1"), start_replica(env, name="ls2")
    thread = _api_runs_across(first, second)
    old = redis_sentinel.kill_primary()
    redis_sentinel.wait_for_failover(old.port)
    redis_sentinel.rejoin(old)  # WAIT 1 needs a replica again
    # The replicas notice the new primary on their next connection.
    wait_until(
        lambda: _api_runs_across(second, first, thread),
        "runs after the failover",
        30,
        interval=0.5,
        ignore=(Exception,),
    )


async def test_a_task_cancelled_while_it_talks_to_redis_stops(redis_server) -> None:
    """Python 3.11's ``wait_for``, around every command redis-py writes, returned instead of
    raising when the caller was cancelled as the write completed: a loop of GETs ignored
    about half of its cancels (a lease renewer then outlived its turn and held the thread).
    Each cancel here lands at a random point of a loop of commands; every one must stop it."""
    client = redis_client.async_client(redis_server.url())
    rng = random.Random(7)

    async def talk() -> None:
        while True:
            await client.get("tl:test:cancel")

    ignored = 0
    try:
        for _ in range(300):
            task = asyncio.create_task(talk())
            await asyncio.sleep(rng.uniform(0, 0.002))
            task.cancel()
            done, _ = await asyncio.wait([task], timeout=1)
            if not done:
                ignored += 1
                while not task.done():  # do not leave it running
                    task.cancel()
                    await asyncio.wait([task], timeout=0.01)
                if ignored == 5:
                    break
        assert ignored == 0, f"{ignored} cancels ignored (it stops counting at 5)"
    finally:
        await client.aclose()


def test_a_write_on_a_closed_transport_under_uvloop_is_a_connection_error(redis_server) -> None:
    """The other face of it, under uvloop (what uvicorn runs the service on): the transport
    closed (the peer reset it) while the connection still looks open. uvloop raised
    ``RuntimeError: ... the handler is closed`` (a 500 in the cluster-failover chaos test)."""

    async def scenario() -> None:
        client = redis_client.async_client(redis_server.url())
        try:
            connection = await client.connection_pool.get_connection()
            await connection.connect()
            connection._writer.transport.close()
            with pytest.raises(RedisConnectionError):
                await connection.send_command("PING", check_health=False)
            await client.connection_pool.release(connection)
            assert await client.ping()
        finally:
            await client.aclose()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())
