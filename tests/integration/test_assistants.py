"""Assistants clients create (issue 23), driven by the real ``langgraph-sdk`` against two real
replicas on one real Redis and against one SQLite replica: create, versions, latest, search,
count, delete; their config and context reaching the graph, also in a run another replica takes
over; each principal's own; the built-ins read-only; every quota and refusal changing nothing.
tests/integration/test_assistants_oracle.py compares the same operations with ``langgraph dev``."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError, NotFoundError

from threadline.runs.assistants import assistant_id_of

from client import API_KEY, OTHER_KEY
from servers import until

pytestmark = pytest.mark.integration

GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"
# A 1 s lease: a killed replica's run is taken over about a second later.
ENV = {
    "LANGGRAPH_CONFIG": str(GRAPHS),
    "TURN_LEASE_SECONDS": "1",
    "TURN_LEASE_WAIT_SECONDS": "10",
    "QUOTA_ASSISTANTS_PER_PRINCIPAL": "5",
    "QUOTA_ASSISTANT_VERSIONS": "3",
    "QUOTA_ASSISTANT_BYTES": "2048",
}


def _status(exc: pytest.ExceptionInfo) -> int:
    return exc.value.response.status_code


@pytest.fixture
def replicas(sdk_replicas):
    """Two replicas on one Redis, or (``"sqlite"``) one replica on a SQLite file: the processes
    and alice's clients."""
    return lambda backend="redis": sdk_replicas(backend, **ENV)


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
async def test_an_assistant_is_created_versioned_and_runs_with_its_context(replicas, backend: str) -> None:
    _, clients = replicas(backend)
    a, b = clients[0], clients[-1]
    made = await a.assistants.create(
        "nested", context={"style": "fancy"}, metadata={"team": "red"}, name="Fancy writer"
    )
    aid = made["assistant_id"]
    assert made["version"] == 1 and made["graph_id"] == "nested" and made["name"] == "Fancy writer"
    # Context and configurable are one, as on langgraph-api.
    assert made["config"]["configurable"] == {"style": "fancy"} == made["context"]
    assert await b.assistants.get(aid) == made

    out = await b.runs.wait(None, aid, input={"topic": "cats"})
    assert out["draft"] == "fancy cats"
    # The run's own context goes over the assistant's.
    out = await a.runs.wait(None, aid, input={"topic": "cats"}, context={"style": "plain"})
    assert out["draft"] == "plain cats"

    changed = await b.assistants.update(aid, context={"style": "loud"}, metadata={"tier": 2})
    assert changed["version"] == 2 and changed["metadata"] == {"team": "red", "tier": 2}
    assert changed["created_at"] == made["created_at"] and changed["updated_at"] > made["updated_at"]
    assert (await a.runs.wait(None, aid, input={"topic": "dogs"}))["draft"] == "loud dogs"
    versions = await a.assistants.get_versions(aid)
    assert [v["version"] for v in versions] == [2, 1]
    assert [v["context"] for v in versions] == [{"style": "loud"}, {"style": "fancy"}]
    assert [v["version"] for v in await a.assistants.get_versions(aid, metadata={"tier": 2})] == [2]

    back = await a.assistants.set_latest(aid, 1)
    assert (
        back["version"] == 1 and back["context"] == {"style": "fancy"} and back["metadata"] == {"team": "red"}
    )
    assert (await b.runs.wait(None, aid, input={"topic": "owls"}))["draft"] == "fancy owls"

    # Search: the built-ins and the caller's own, by metadata, graph, name; count agrees.
    found = await b.assistants.search(metadata={"team": "red"})
    assert [x["assistant_id"] for x in found] == [aid]
    assert {x["assistant_id"] for x in await b.assistants.search(graph_id="nested")} == {
        aid,
        assistant_id_of("nested"),
    }
    assert [x["assistant_id"] for x in await b.assistants.search(name="fancy")] == [aid]
    assert await b.assistants.count(graph_id="nested") == 2
    assert await b.assistants.search(metadata={"team": "red"}, select=["name", "version"]) == [
        {"name": "Fancy writer", "version": 1}
    ]

    await b.assistants.delete(aid)
    with pytest.raises(NotFoundError):
        await a.assistants.get(aid)
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await a.runs.wait(None, aid, input={"topic": "x"})
    assert _status(refused) == 404
    assert await a.assistants.search(metadata={"team": "red"}) == []


async def test_assistants_are_their_principals_own(replicas) -> None:
    (a_proc, _), (alice, _) = replicas("redis")
    bob = get_client(url=a_proc.url, api_key=OTHER_KEY)
    mine = await alice.assistants.create("nested", context={"style": "mine"}, metadata={"who": "alice"})
    aid = mine["assistant_id"]
    with pytest.raises(NotFoundError):
        await bob.assistants.get(aid)
    with pytest.raises(NotFoundError):
        await bob.assistants.update(aid, name="taken")
    with pytest.raises(NotFoundError):
        await bob.assistants.delete(aid)
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await bob.runs.wait(None, aid, input={"topic": "x"})
    assert _status(refused) == 404
    assert await bob.assistants.search(metadata={"who": "alice"}) == []
    # The same id is free for bob: ids are a principal's own, as threads are.
    theirs = await bob.assistants.create("nested", assistant_id=aid, context={"style": "bob's"})
    assert (await bob.runs.wait(None, aid, input={"topic": "x"}))["draft"] == "bob's x"
    assert (await alice.runs.wait(None, aid, input={"topic": "x"}))["draft"] == "mine x"
    assert theirs["assistant_id"] == aid


async def test_built_ins_stay_the_deployments_and_refusals_change_nothing(replicas) -> None:
    _, (a, b) = replicas("redis")
    builtin = assistant_id_of("nested")
    for refused in (
        a.assistants.update(builtin, name="mine now"),
        a.assistants.delete(builtin),
        a.assistants.create("nested", assistant_id=builtin),
    ):
        with pytest.raises(ConflictError):
            await refused
    assert (await b.assistants.get(builtin))["name"] == "nested"

    made = await a.assistants.create("nested", metadata={"n": 1})
    aid = made["assistant_id"]
    with pytest.raises(ConflictError):
        await b.assistants.create("nested", assistant_id=aid, metadata={"n": 2})
    same = await b.assistants.create("nested", assistant_id=aid, metadata={"n": 2}, if_exists="do_nothing")
    assert same == made

    async with httpx.AsyncClient(base_url=a.http.client.base_url, headers={"x-api-key": API_KEY}) as http:
        refusals = [
            (await http.post("/assistants", json={"graph_id": "nope"}), 404),
            (await http.post("/assistants", json={"graph_id": "nested", "assistant_id": "not-a-uuid"}), 422),
            (
                await http.post(
                    "/assistants",
                    json={"graph_id": "nested", "config": {"configurable": {"a": 1}}, "context": {"b": 2}},
                ),
                400,
            ),
            (await http.post("/assistants", json={"graph_id": "nested", "metadata": {"x": "y" * 3000}}), 413),
            (await http.patch(f"/assistants/{aid}", json={"metadata": {"x": "y" * 3000}}), 413),
            (await http.patch(f"/assistants/{aid}", json={"graph_id": "nope"}), 404),
            (await http.post(f"/assistants/{aid}/latest", json={"version": 7}), 404),
            (await http.post(f"/assistants/{aid}/latest", json={"version": 0}), 422),
        ]
        assert [r.status_code for r, _ in refusals] == [want for _, want in refusals]
    assert await b.assistants.get(aid) == made
    assert [v["version"] for v in await b.assistants.get_versions(aid)] == [1]


async def test_quotas_bound_a_principals_assistants_and_their_versions(replicas) -> None:
    _, (a, b) = replicas("redis")
    made = [await (a, b)[i % 2].assistants.create("steps", metadata={"i": i}) for i in range(5)]
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await a.assistants.create("steps")
    assert _status(refused) == 429
    assert "QUOTA_ASSISTANTS_PER_PRINCIPAL=5" in refused.value.response.text
    assert await b.assistants.count(graph_id="steps") == 6  # five and the built-in

    aid = made[0]["assistant_id"]
    for n in range(2, 7):
        await (a, b)[n % 2].assistants.update(aid, metadata={"n": n})
    # QUOTA_ASSISTANT_VERSIONS=3: the last three are kept, older ones are gone.
    assert [v["version"] for v in await a.assistants.get_versions(aid)] == [6, 5, 4]
    with pytest.raises(NotFoundError):
        await b.assistants.set_latest(aid, 1)
    assert (await b.assistants.set_latest(aid, 4))["metadata"] == {"i": 0, "n": 4}
    # A deleted assistant gives its slot back.
    await a.assistants.delete(made[1]["assistant_id"])
    await b.assistants.create("steps")


async def test_a_taken_over_run_keeps_the_assistant_version_it_was_created_with(replicas) -> None:
    (doomed, _), (a, b) = replicas("redis")
    aid = (await b.assistants.create("steps", config={"configurable": {"tag": "x"}}))["assistant_id"]
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.create(tid, aid, input={"steps": 4, "delay": 0.3})

    async def stepped() -> bool:
        return len((await b.threads.get_state(tid))["values"].get("done") or []) >= 1

    await until(stepped, "a step checkpointed")
    await b.assistants.update(aid, config={"configurable": {"tag": "y"}})
    doomed.kill()  # SIGKILL mid-run: the survivor takes the run over
    result = await b.runs.join(tid, run["run_id"])
    assert result["done"] == ["x1", "x2", "x3", "x4"]
    # A new run takes the new version.
    assert (await b.runs.wait(None, aid, input={"steps": 1}))["done"] == ["y1"]


async def test_deleting_with_delete_threads_removes_the_threads_made_for_it(replicas) -> None:
    _, (a, b) = replicas("redis")
    aid = (await a.assistants.create("steps"))["assistant_id"]
    tid = (await a.threads.create())["thread_id"]
    await a.runs.wait(tid, aid, input={"steps": 1})
    other = (await a.threads.create())["thread_id"]
    await a.runs.wait(other, "steps", input={"steps": 1})
    await b.assistants.delete(aid, delete_threads=True)
    with pytest.raises(NotFoundError):
        await a.threads.get(tid)
    assert (await a.threads.get(other))["thread_id"] == other
