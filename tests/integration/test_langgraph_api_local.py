"""The LangGraph API on one replica of each backend other than ``redis`` (which
test_langgraph_api.py drives with two replicas): the embedded default (``make run``: SQLite
checkpoints, in-process records and lease) where a newcomer's first SDK calls work with no
Redis and a thread outlives a restart, and memory, Postgres and Redis Stack."""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoint_graph import flush
from langgraph_sdk import get_client
from langgraph_sdk.errors import UnprocessableEntityError

from client import API_KEY, API_KEYS, expected_reply
from servers import ServiceProcess

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refunds" / "langgraph.json"


async def test_sdk_on_sqlite_survives_a_restart(start_replica, tmp_path: Path) -> None:
    env = {
        "CHECKPOINT_BACKEND": "sqlite",
        "CHECKPOINT_SQLITE_PATH": str(tmp_path / "checkpoints.sqlite"),
        "SESSION_BACKEND": "memory",
        "API_KEYS": API_KEYS,
        "LANGGRAPH_CONFIG": str(EXAMPLE),
    }
    replica: ServiceProcess = start_replica(env, "local")
    client = get_client(url=replica.url, api_key=API_KEY)
    chat = await client.threads.create(metadata={"who": "newcomer"})
    result = await client.runs.wait(
        chat["thread_id"], "chat", input={"messages": [{"role": "user", "content": "hi"}]}
    )
    assert result["messages"][-1]["content"] == expected_reply(["hi"])
    refund = await client.threads.create()
    parts = [
        p
        async for p in client.runs.stream(
            refund["thread_id"], "refunds", input={"request": "refund", "amount": 500}, stream_mode="custom"
        )
    ]
    assert [p.data["node"] for p in parts if p.event == "custom"] == ["triage", "review"]
    assert (await client.threads.get(refund["thread_id"]))["status"] == "interrupted"

    replica.stop()
    replica = start_replica(env, "local-again")
    client = get_client(url=replica.url, api_key=API_KEY)
    # The records were in the old process; the checkpoints name the owner and the graph.
    again = await client.threads.get(refund["thread_id"])
    assert again["metadata"]["graph_id"] == "refunds" and again["values"]["amount"] == 500
    assert again["status"] == "interrupted"
    resumed = await client.runs.wait(refund["thread_id"], "refunds", command={"resume": "approve"})
    assert resumed["answer"] == "your refund of 500 is approved"
    state = await client.threads.get_state(chat["thread_id"])
    assert len(state["values"]["messages"]) == 2
    # copy replays the history through the SQLite saver (it has no copy_thread of its own)
    copy = await client.threads.copy(refund["thread_id"])
    assert copy["values"] == (await client.threads.get(refund["thread_id"]))["values"]
    history = await client.threads.get_history(refund["thread_id"], limit=50)
    copied = await client.threads.get_history(copy["thread_id"], limit=50)
    assert [h["values"] for h in copied] == [h["values"] for h in history]
    assert [h["next"] for h in copied] == [h["next"] for h in history]


@pytest.mark.parametrize("backend", ["memory", "postgres", "redis-stack"])
async def test_every_backend_serves_the_api(
    backend: str, request: pytest.FixtureRequest, start_replica, tmp_path: Path
) -> None:
    env = {"CHECKPOINT_BACKEND": backend, "SESSION_BACKEND": "memory", "API_KEYS": API_KEYS}
    env["LANGGRAPH_CONFIG"] = str(EXAMPLE)
    if backend == "postgres":
        env["CHECKPOINT_POSTGRES_URL"] = request.getfixturevalue("postgres_url")
    elif backend == "redis-stack":
        server = request.getfixturevalue("redis_stack_server")
        flush(server, 0)
        env["CHECKPOINT_REDIS_URL"] = server.url(0)
    client = get_client(url=start_replica(env, backend).url, api_key=API_KEY)
    thread = await client.threads.create(metadata={"backend": backend})
    tid = thread["thread_id"]
    first = await client.runs.wait(tid, "refunds", input={"request": "refund", "amount": 300})
    assert first["__interrupt__"][0]["value"]["amount"] == 300
    assert [t["thread_id"] for t in await client.threads.search(status="interrupted")] == [tid]
    # Resumable: a plain run that ends before the join connects keeps no events to replay.
    run = await client.runs.create(
        tid, "refunds", command={"resume": "deny"}, stream_mode="custom", stream_resumable=True
    )
    parts = [p async for p in client.runs.join_stream(tid, run["run_id"])]
    assert [p.data for p in parts if p.event == "custom"][-1] == {"node": "respond", "decision": "denied"}
    assert (await client.runs.join(tid, run["run_id"]))["answer"] == "your refund of 300 is denied"
    assert (await client.threads.get(tid))["status"] == "idle"
    if backend == "redis-stack":
        # langgraph-checkpoint-redis has no delete_for_runs: rollback is refused (422), naming
        # the setting. The other backends roll back (test_langgraph_run_semantics.py).
        with pytest.raises(UnprocessableEntityError) as refused:
            await client.runs.create(tid, "refunds", input={"request": "x"}, multitask_strategy="rollback")
        assert "CHECKPOINT_BACKEND" in refused.value.response.text
        assert len(await client.runs.list(tid)) == 2
    await client.threads.delete(tid)
    assert await client.threads.search() == []
