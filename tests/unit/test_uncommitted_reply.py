"""Regression for what the local chaos test found after a Redis crash: a reply that exists only
as a pending write (the model step finished and its write was saved, but the checkpoint that
commits it was not) is served as "stored" to the retried message, and then dropped by the next
turn, which starts from the last committed checkpoint: the client holds a reply the thread
does not, and every later reply is computed from a history without it (lost + forked + stale).

The store fault is injected at the one write that matters (the checkpoint carrying the reply),
through the service's own graph and :class:`threadline.turns.Conversations`.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from chaos.driver import expected_reply

pytestmark = pytest.mark.unit


class CrashBeforeCommit(InMemorySaver):
    """Fails the ``put`` of the checkpoint whose last message has id :attr:`fail_on`."""

    fail_on: str | None = None

    async def aput(self, config, checkpoint, metadata, new_versions) -> Any:
        messages = checkpoint["channel_values"].get("messages") or []
        if self.fail_on and messages and messages[-1].id == self.fail_on:
            self.fail_on = None
            raise ConnectionError("Redis went away")
        return await super().aput(config, checkpoint, metadata, new_versions)


async def test_a_reply_served_to_a_retry_is_kept_by_the_next_turn() -> None:
    from threadline.agent.builtin import BuiltinChatModel
    from threadline.agent.graph import build_graph
    from threadline.lease import LocalTurnLease
    from threadline.runs.assistants import Assistants
    from threadline.runs.records_local import LocalRecordStore
    from threadline.runs.threads import Threads
    from threadline.turns import Conversations

    saver = CrashBeforeCommit()
    graph = build_graph(BuiltinChatModel(token_delay_ms=0), saver)
    threads = Threads(LocalRecordStore(), Assistants({"chat": graph}), LocalTurnLease(wait_seconds=1), saver)
    conversations = Conversations(threads, graph)
    thread = await conversations.create_thread("p")
    await conversations.run_turn(thread, "p", "m1", "one")

    saver.fail_on = "m2.reply"
    with pytest.raises(ConnectionError):
        await conversations.run_turn(thread, "p", "m2", "two")
    retried = await conversations.run_turn(thread, "p", "m2", "two")  # the client's retry
    await conversations.run_turn(thread, "p", "m3", "three")

    history = ["one", expected_reply(1, [], "one"), "two"]
    assert retried.reply == expected_reply(2, history[:2], "two")
    stored = (await conversations.thread(thread, "p"))["messages"]
    assert [m["id"] for m in stored] == ["m1", "m1.reply", "m2", "m2.reply", "m3", "m3.reply"]
    assert stored[3]["content"] == retried.reply  # what the client was given is what is kept
    assert stored[5]["content"] == expected_reply(3, [*history, retried.reply], "three")
