"""Write ``format1_thread.json``: a conversation stored by the previous release's saver.

    .venv/bin/python tests/legacy_redis_saver/make_fixture.py

Starts its own ``redis-server``, runs four turns of a ``MessagesState`` graph through the
frozen saver and a pending write on the last checkpoint, and dumps the thread's keys (fields
and members base64-encoded; they hold no thread id, so a test can load them under any).
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path
from typing import Any

import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from legacy_redis_saver.saver import RedisCheckpointSaver  # noqa: E402
from servers import RedisServer  # noqa: E402

THREAD = "fixture"
FIXTURE = HERE / "format1_thread.json"


def graph(saver: Any) -> Any:
    """The graph of the fixture and of the upgrade tests: one node answering each message."""
    builder = StateGraph(MessagesState)
    builder.add_node("reply", lambda s: {"messages": [AIMessage(f"reply to: {s['messages'][-1].content}")]})
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


async def main() -> None:
    server = RedisServer().start()
    try:
        saver = RedisCheckpointSaver.from_url(server.url(1), ttl_seconds=3600)
        g = graph(saver)
        config = {"configurable": {"thread_id": THREAD}}
        for turn in range(1, 5):
            await g.ainvoke({"messages": [HumanMessage(f"question {turn}")]}, config)
        latest = await saver.aget_tuple(config)
        await saver.aput_writes(latest.config, [("messages", [HumanMessage("pending")])], "task-pending")
        await saver.aclose()
        client = redis.Redis.from_url(server.url(1))
        keys: dict[str, Any] = {}
        for key in sorted(client.scan_iter(match=f"tl:{{{THREAD}}}:*")):
            suffix = key.decode().rsplit(":", 1)[1]
            if client.type(key) == b"hash":
                keys[suffix] = {"hash": {b64(f): b64(v) for f, v in sorted(client.hgetall(key).items())}}
            else:
                keys[suffix] = {"zset": [b64(m) for m in client.zrange(key, 0, -1)]}
        client.close()
        messages = [[m.type, m.content] for m in latest.checkpoint["channel_values"]["messages"]]
        FIXTURE.write_text(json.dumps({"keys": keys, "messages": messages}, indent=1) + "\n")
    finally:
        server.close()


if __name__ == "__main__":
    asyncio.run(main())
