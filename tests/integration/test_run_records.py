"""What a LangGraph API run leaves in Redis grows with the run, not with its thread (issue 18
bullet 4), and what a join answers once it is gone, against real replicas on a real Redis.

A 300-turn chat driven through ``runs.wait`` held 163 MB (121 MB of events, 40 MB of results
kept 7 days) where docs/sizing.md sizes the same conversation at 1.2 MB: every run kept its
``values`` events and its result, each the whole state. Now a run's events stay only while a
client can ask for them (``stream_resumable``, or a client streaming the run or its thread) and
its result only for the joiners waiting as it ends; a later join answers from the thread, as
langgraph-api's does.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import redis
from langgraph_sdk import get_client

from client import API_KEY
from servers import redis_env, thread_memory

pytestmark = pytest.mark.integration

GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"
# The conversation docs/sizing.md measures: a 240-character question and
# the built-in model's answer a turn, sized at 3.7 KB a turn plus the message text.
QUESTION = "Tell me more about this, in some detail please. " * 5
SIZING_PER_TURN = 3700
TURNS = 300


def test_a_300_turn_chat_through_runs_wait_holds_at_most_twice_the_sizing(redis_server, start_replica):
    replica = start_replica(redis_env(redis_server, QUOTA_THREAD_BYTES="0"), "chat")
    http = httpx.Client(base_url=replica.url, headers={"x-api-key": API_KEY}, timeout=60)
    thread = http.post("/threads", json={}).json()["thread_id"]
    body = {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": QUESTION}]}}
    admin = redis.Redis.from_url(redis_server.url(1))
    held_at: dict[int, int] = {}
    for turn in range(1, TURNS + 1):
        answer = http.post(f"/threads/{thread}/runs/wait", json=body)
        assert answer.status_code == 200, answer.text
        if turn in (TURNS // 2, TURNS):
            held_at[turn] = sum(thread_memory(admin, thread).values())
    messages = answer.json()["messages"]
    assert len(messages) == 2 * TURNS  # the whole conversation came back, every turn
    sizing = TURNS * SIZING_PER_TURN + sum(len(m["content"]) for m in messages)
    held = thread_memory(admin, thread)
    assert "events" not in held and "results" not in held, held  # nobody streamed or joined
    assert held_at[TURNS] <= 2 * sizing, (held, sizing)
    # Linear: the second half of the chat costs about what the first did (quadratic: 3x).
    assert held_at[TURNS] <= 2.3 * held_at[TURNS // 2], held_at
    # Its runs are all still listed, with their records.
    assert len(http.get(f"/threads/{thread}/runs", params={"limit": 1000}).json()) == TURNS


@pytest.fixture
def pair(redis_server, start_replica):
    env = redis_env(redis_server, LANGGRAPH_CONFIG=str(GRAPHS))
    return [get_client(url=start_replica(env, name).url, api_key=API_KEY) for name in ("a", "b")]


async def test_a_join_after_the_end_answers_from_the_thread_as_langgraph_api(pair) -> None:
    a, b = pair
    tid = (await a.threads.create())["thread_id"]
    first = await a.runs.create(tid, "steps", input={"steps": 2, "tag": "f"})
    assert (await a.runs.join(tid, first["run_id"]))["done"] == ["f1", "f2"]
    # Ended before the join: from the thread, on the other replica too.
    assert (await b.runs.join(tid, first["run_id"]))["done"] == ["f1", "f2"]
    await a.runs.wait(tid, "steps", input={"steps": 1, "tag": "s"})
    # The thread went on: its values now, as langgraph-api's join of a finished run answers.
    assert (await b.runs.join(tid, first["run_id"]))["done"] == ["f1", "f2", "s1"]
    # A failed run's error stays with its record: a later join still says what went wrong.
    failed = await a.runs.create(tid, "steps", input={"steps": 5}, config={"recursion_limit": 2})
    for client in (a, b):
        answer = await client.runs.join(tid, failed["run_id"])
        assert answer["__error__"]["error"] == "GraphRecursionError", answer
    assert (await b.runs.get(tid, failed["run_id"]))["status"] == "error"


async def test_a_joiner_on_another_replica_gets_the_runs_own_result_and_nothing_stays(
    pair, redis_server
) -> None:
    a, b = pair
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.create(tid, "steps", input={"steps": 3, "delay": 0.2, "tag": "j"})
    assert (await b.runs.join(tid, run["run_id"]))["done"] == ["j1", "j2", "j3"]
    # The result went through the run's end stream, kept for an hour at most; no events.
    held = thread_memory(redis.Redis.from_url(redis_server.url(1)), tid)
    assert "results" in held and "events" not in held, held
    end = f"tl:{{{tid}}}:run:{run['run_id']}:end"
    assert 0 < redis.Redis.from_url(redis_server.url(1)).ttl(end) <= 3600


async def test_a_resumable_run_replays_after_its_end_and_a_plain_one_does_not(pair) -> None:
    a, b = pair
    tid = (await a.threads.create())["thread_id"]
    kept = await a.runs.create(tid, "steps", input={"steps": 2}, stream_resumable=True)
    await a.runs.join(tid, kept["run_id"])
    replay = [p.event async for p in b.runs.join_stream(tid, kept["run_id"], last_event_id="-1")]
    assert replay[0] == "metadata" and replay.count("values") >= 2
    plain = await a.runs.create(tid, "steps", input={"steps": 2})
    await a.runs.join(tid, plain["run_id"])
    # As langgraph-api: nothing to replay of a run nobody streamed; the stream ends at once.
    assert [p async for p in b.runs.join_stream(tid, plain["run_id"], last_event_id="-1")] == []
    # A run streamed as it ran keeps its events for a reconnect.
    streamed = [p async for p in a.runs.stream(tid, "steps", input={"steps": 2}, stream_mode="values")]
    run_id = streamed[0].data["run_id"]
    again = [p async for p in b.runs.join_stream(tid, run_id, last_event_id="-1")]
    assert [p.data for p in again] == [p.data for p in streamed]
