"""Redis Sentinel and Cluster (issue 13), against real processes: a primary + replica + three
sentinels, and a 3-master Cluster formed by the fixture (``tests/servers.py``).

The Cluster runs LangGraph's conformance suite (FULL, with every extended capability) through
``open_checkpointer``; the Sentinel set shows the saver, the lease and the sessions following
the primary through a failover.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from checkpoint_graph import build_graph, expected_reply
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint
from redis.exceptions import ConnectionError as RedisConnectionError
from test_checkpoint_conformance import EXTENDED, extended_detected, run_suite, summary

from threadline import redis_client
from threadline.checkpoint import open_checkpointer
from threadline.config import CheckpointSettings
from threadline.redis_keys import ThreadKeys

from servers import RedisClusterSet, RedisSentinelSet

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
    from threadline.checkpoint.redis import RedisCheckpointSaver

    saver = RedisCheckpointSaver.from_url(redis_cluster.url(), ttl_seconds=60)
    config = {"configurable": {"thread_id": f"sync-{uuid.uuid4().hex[:8]}", "checkpoint_ns": ""}}
    stored = saver.put(config, create_checkpoint(empty_checkpoint(), None, 1), {"step": 1}, {})
    assert saver.get_tuple(config).config == stored
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
        recovered = None
        while time.monotonic() - killed < 30:
            try:
                state = await graph.ainvoke({"messages": [HumanMessage("after")]}, config)
                recovered = time.monotonic() - killed
                break
            except RedisConnectionError:
                await asyncio.sleep(0.1)
        assert recovered is not None, "no turn succeeded within 30 s of the primary's death"
        assert redis_sentinel.primary_port() != old
        assert [m.content for m in state["messages"]][::2] == ["before", "after"]
        print(f"sentinel: first successful turn {recovered:.2f} s after the primary was SIGKILLed")
        await client.aclose()
