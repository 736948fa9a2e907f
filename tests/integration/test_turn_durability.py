"""A turn's human message is stored before the model is called (ADR 0002, durability "sync").

In-process: the real turn code, graph and ``redis`` saver on a real Redis, with a saver whose
writes take a while (as on a busy Redis) and a model that records what is stored when it runs.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from langchain_core.messages import BaseMessage, HumanMessage
from pydantic import Field

from threadline.agent.builtin import BuiltinChatModel
from threadline.agent.graph import build_graph
from threadline.checkpoint.redis import RedisCheckpointSaver
from threadline.lease import RedisTurnLease
from threadline.runs.assistants import Assistants
from threadline.runs.records_local import LocalRecordStore
from threadline.runs.threads import Threads
from threadline.turns import Conversations

pytestmark = pytest.mark.integration


class SlowWrites(RedisCheckpointSaver):
    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.05)
        return await super().aput(*args, **kwargs)


class Witness(BuiltinChatModel):
    """Records, when called, the human messages a fresh reader finds stored for the thread."""

    reader: Any = None
    thread_id: str = ""
    stored_when_called: list[list[str]] = Field(default_factory=list)

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        latest = await self.reader.aget_tuple({"configurable": {"thread_id": self.thread_id}})
        stored = latest.checkpoint["channel_values"].get("messages", []) if latest else []
        self.stored_when_called.append([m.content for m in stored if isinstance(m, HumanMessage)])
        return await super()._agenerate(messages, *args, **kwargs)


async def test_the_human_message_is_durable_before_the_model_runs(redis_server) -> None:
    url = redis_server.url(1)
    saver = SlowWrites.from_url(url, ttl_seconds=3600)
    reader = RedisCheckpointSaver.from_url(url, ttl_seconds=3600, cache_bytes=0)  # another replica
    client = aioredis.Redis.from_url(url)
    try:
        lease = RedisTurnLease(client, lease_seconds=5, wait_seconds=1, counter_ttl_seconds=60)
        model = Witness(reader=reader)
        graph = build_graph(model, saver)
        threads = Threads(LocalRecordStore(), Assistants({"chat": graph}), lease, saver)
        conversations = Conversations(threads, graph)
        model.thread_id = await conversations.create_thread("alice")
        for content in ("first", "second"):
            await conversations.run_turn(model.thread_id, "alice", uuid.uuid4().hex, content)
        assert model.stored_when_called == [["first"], ["first", "second"]]
    finally:
        await client.aclose()
        await reader.aclose()
        await saver.aclose()
