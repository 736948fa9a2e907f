"""The verdict fails when the store is wrong: threads corrupted directly in Redis.

Real turns run through a real replica (``redis`` checkpoint backend); then the stored state of
some threads is rewritten through the real saver and LangGraph (``graph.aupdate_state``, which
writes a new checkpoint that GET then returns): a turn dropped, a reply duplicated, a thread
forked, a reply replaced by one computed from a shorter history. The verdict, reading the
threads back over HTTP, must name each damage as itself, and pass the untouched threads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from chaos.cluster import LocalCluster, running_cluster
from chaos.driver import Driver, DriverConfig, expected_reply, judge_thread

pytestmark = pytest.mark.integration

TURNS = 4


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with running_cluster(1, {"MODEL_TOKEN_DELAY_MS": "0"}) as cluster:
        yield cluster


@pytest.fixture
async def graph(cluster: LocalCluster) -> AsyncIterator[Any]:
    """The service's own graph over the real Redis saver, for rewriting stored state."""
    from threadline.agent.builtin import BuiltinChatModel
    from threadline.agent.graph import build_graph
    from threadline.checkpoint import open_checkpointer
    from threadline.config import CheckpointSettings

    settings = CheckpointSettings(backend="redis", redis_url=cluster.redis.url(1))
    async with open_checkpointer(settings) as saver:
        yield build_graph(BuiltinChatModel(token_delay_ms=0), saver)


async def conversation(cluster: LocalCluster, conversations: int = 1) -> Driver:
    driver = Driver(
        cluster.endpoints, DriverConfig(conversations=conversations, turns=TURNS, api_key=cluster.api_key)
    )
    await driver.run()
    return driver


async def rewrite(graph: Any, thread_id: str, edit) -> None:
    """Replace the thread's messages by ``edit(messages)``, as a new checkpoint."""
    from threadline.agent.graph import MODEL_NODE

    config = {"configurable": {"thread_id": thread_id}}
    messages: list[BaseMessage] = (await graph.aget_state(config)).values["messages"]
    new = edit(list(messages))
    await graph.aupdate_state(
        config, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *new]}, as_node=MODEL_NODE
    )


async def judged(driver: Driver):
    threads = await driver.read_back()
    [rec] = driver.records
    return judge_thread(rec, threads[rec.thread_id], TURNS), threads[rec.thread_id]


def kinds(found) -> dict[str, int]:
    return {
        k: getattr(found, k) for k in ("lost", "duplicated", "forked", "stale", "other") if getattr(found, k)
    }


async def test_untouched_threads_pass(cluster: LocalCluster) -> None:
    driver = await conversation(cluster, conversations=3)
    verdict = driver.verdict(await driver.read_back())
    assert verdict.ok, verdict.problems
    assert verdict.turns == 3 * TURNS


async def test_dropped_turn_is_reported_lost(cluster: LocalCluster, graph: Any) -> None:
    driver = await conversation(cluster)
    await rewrite(graph, driver.records[0].thread_id, lambda m: m[:2] + m[4:])  # turn 2 gone
    found, stored = await judged(driver)
    assert len(stored["messages"]) == 2 * TURNS - 2  # the store really changed
    assert kinds(found) == {"lost": 1}, found.problems
    assert "turn 2" in found.problems[0]


async def test_duplicated_reply_is_reported(cluster: LocalCluster, graph: Any) -> None:
    driver = await conversation(cluster)

    def duplicate(m: list[BaseMessage]) -> list[BaseMessage]:
        again = AIMessage(content=m[3].content, id=f"{m[3].id}-again")
        return [*m[:4], again, *m[4:]]

    await rewrite(graph, driver.records[0].thread_id, duplicate)
    found, stored = await judged(driver)
    # The server's own count is off too (5 replies for 4 turns): reported as "other".
    assert stored["turns"] == TURNS + 1
    assert found.duplicated == 1, found.problems
    assert not (found.lost or found.forked or found.stale), found.problems


async def test_duplicated_message_id_is_reported(cluster: LocalCluster, graph: Any) -> None:
    driver = await conversation(cluster)
    await rewrite(graph, driver.records[0].thread_id, lambda m: [*m[:4], *m[2:4], *m[4:]])
    found, stored = await judged(driver)
    ids = [msg["id"] for msg in stored["messages"]]
    assert len(ids) == len(set(ids)) + 2  # the same ids really are stored twice
    assert found.duplicated == 2 and found.lost == 0 and found.stale == 0, found.problems


async def test_second_human_message_without_reply_is_a_fork(cluster: LocalCluster, graph: Any) -> None:
    driver = await conversation(cluster)

    def fork(m: list[BaseMessage]) -> list[BaseMessage]:
        branch = HumanMessage(content="another branch", id="branch-1")
        return [*m[:5], branch, *m[5:]]  # after human 3, before its reply

    await rewrite(graph, driver.records[0].thread_id, fork)
    found, _ = await judged(driver)
    assert found.forked >= 1 and found.lost == 0 and found.duplicated == 0, found.problems
    assert any("follows human" in p for p in found.problems)


async def test_two_continuations_are_a_fork(cluster: LocalCluster, graph: Any) -> None:
    driver = await conversation(cluster)
    rec = driver.records[0]

    def fork(m: list[BaseMessage]) -> list[BaseMessage]:
        other = expected_reply(3, rec.history(3), "a different message")
        return [*m[:6], AIMessage(content=other, id="other-reply"), *m[6:]]

    await rewrite(graph, rec.thread_id, fork)
    found, stored = await judged(driver)
    assert stored["turns"] == TURNS + 1  # the server counts the extra reply: "other"
    assert found.forked == 1, found.problems
    assert not (found.lost or found.duplicated or found.stale), found.problems


async def test_reply_from_a_shorter_history_is_stale(cluster: LocalCluster, graph: Any) -> None:
    driver = await conversation(cluster)
    rec = driver.records[0]

    def shorten(m: list[BaseMessage]) -> list[BaseMessage]:
        short = expected_reply(3, rec.history(3)[:-2], rec.turns[2].content)  # turn 2 unseen
        m[5] = AIMessage(content=short, id=m[5].id)
        return m

    await rewrite(graph, rec.thread_id, shorten)
    found, stored = await judged(driver)
    assert stored["messages"][5]["content"] != rec.turns[2].reply
    assert kinds(found) == {"stale": 1}, found.problems
    assert "turn 3" in found.problems[0]
