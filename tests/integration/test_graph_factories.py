"""Graph factories as langgraph-api accepts them (ADR 0018), driven by the real
``langgraph-sdk`` against real replicas on one real Redis: a factory is called for every run
with that run's config (``graphs/factories.py`` bakes what it saw into the graph it makes), and
a context-manager factory is exited however its run stops: it ends, fails, is cancelled,
interrupted by the next run, times out, its replica stops (SIGTERM) or is paused past its lease
and taken over (the woken replica exits its context and writes nothing more)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from langgraph_sdk import get_client

from client import API_KEY
from servers import redis_env, until

pytestmark = pytest.mark.integration

GRAPHS = Path(__file__).resolve().parent / "graphs" / "factories.json"
# A 1 s lease: a paused replica's run is taken over about a second later.
ENV = {"LANGGRAPH_CONFIG": str(GRAPHS), "TURN_LEASE_SECONDS": "1", "TURN_LEASE_WAIT_SECONDS": "10"}


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """The file ``graphs/factories.py:cm`` writes its enters, exits and node runs into."""
    return tmp_path / "factory.log"


@pytest.fixture
def replicas(redis_server, start_replica, log: Path):
    def start(*names: str, **extra: str):
        env = redis_env(redis_server, **ENV, FACTORY_LOG=str(log), **extra)
        procs = [start_replica(env, name) for name in names]
        return procs, [get_client(url=p.url, api_key=API_KEY) for p in procs]

    return start


def lines(log: Path, run_id: str) -> list[tuple[int, str]]:
    """``(pid, what)`` of the lines ``cm`` wrote for ``run_id``: enter, node, exit."""
    found = []
    for line in log.read_text().splitlines() if log.exists() else []:
        pid, what, *rest = line.split()
        if rest and rest[-1] == run_id:
            found.append((int(pid), what))
    return found


async def holding(log: Path, run_id: str) -> None:
    await until(lambda: "node" in [w for _, w in lines(log, run_id)], f"{run_id}'s node running")


async def exited(log: Path, run_id: str) -> list[tuple[int, str]]:
    return await until(
        lambda: [w for w in lines(log, run_id) if w[1] == "exit"], f"{run_id}'s context exited"
    )


async def test_a_zero_argument_factory_is_called_for_every_run(replicas) -> None:
    _, (a,) = replicas("a")
    tid = (await a.threads.create())["thread_id"]
    first = await a.runs.wait(tid, "zero", input={})
    second = await a.runs.wait(tid, "zero", input={})
    assert second["made"]["call"] > first["made"]["call"]


async def test_the_runs_config_reaches_the_factory_on_any_replica(replicas) -> None:
    _, (a, b) = replicas("a", "b")
    tid = (await a.threads.create())["thread_id"]
    made = await a.runs.wait(tid, "configured", input={}, config={"configurable": {"greeting": "hello"}})
    assert made["made"] == {"greeting": "hello", "thread_id": tid}
    made = await b.runs.wait(tid, "configured", input={}, config={"configurable": {"greeting": "bonjour"}})
    assert made["made"] == {"greeting": "bonjour", "thread_id": tid}
    # An assistant's config reaches it too (under the run's own).
    assistant = await a.assistants.create("configured", config={"configurable": {"greeting": "hi"}})
    made = await b.runs.wait(tid, assistant["assistant_id"], input={})
    assert made["made"]["greeting"] == "hi"


async def test_a_server_runtime_factory_gets_the_runs_context_user_and_store(replicas) -> None:
    _, (a, b) = replicas("a", "b")
    tid = (await a.threads.create())["thread_id"]
    made = await a.runs.wait(tid, "runtime", input={}, context={"topic": "refunds"})
    assert made["made"] == {"access": "threads.create_run", "user": "alice", "context": {"topic": "refunds"}}
    # The store it was given is the run owner's: the owner reads what it wrote.
    item = await b.store.get_item(["factory"], "seen")
    assert item["value"] == {"context": {"topic": "refunds"}}
    # Schemas and the drawing call it too, for reading (no run context).
    schemas = await b.assistants.get_schemas("runtime")
    assert "made" in schemas["state_schema"]["properties"]
    drawn = await b.assistants.get_graph("runtime")
    assert {n["id"] for n in drawn["nodes"]} >= {"node"}


async def test_a_context_factory_is_entered_and_exited_once_per_run_and_read(replicas, log: Path) -> None:
    _, (a, b) = replicas("a", "b")
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.create(tid, "cm", input={})
    await a.runs.join(tid, run["run_id"])
    assert [w for _, w in lines(log, run["run_id"])] == ["enter", "node", "exit"]
    assert (await b.runs.get(tid, run["run_id"]))["status"] == "success"
    before = log.read_text().count("enter assistants.read")
    await b.assistants.get_schemas("cm")
    text = log.read_text()
    assert text.count("enter assistants.read") == before + 1
    assert text.count("exit assistants.read") == text.count("enter assistants.read")


async def test_a_context_factory_is_exited_when_its_graph_fails(replicas, log: Path) -> None:
    _, (a,) = replicas("a")
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.create(tid, "cm", input={"fail": True})
    await a.runs.join(tid, run["run_id"])
    assert (await a.runs.get(tid, run["run_id"]))["status"] == "error"
    assert [w for _, w in lines(log, run["run_id"])] == ["enter", "node", "exit"]


async def test_a_context_factory_is_exited_when_its_run_is_cancelled_or_interrupted(
    replicas, log: Path
) -> None:
    _, (a, b) = replicas("a", "b")
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.create(tid, "cm", input={"hold": True})
    await holding(log, run["run_id"])
    await b.runs.cancel(tid, run["run_id"])  # from the other replica
    await exited(log, run["run_id"])
    assert (await b.runs.get(tid, run["run_id"]))["status"] == "interrupted"
    # multitask_strategy=interrupt stops the running run the same way.
    held = await a.runs.create(tid, "cm", input={"hold": True})
    await holding(log, held["run_id"])
    after = await b.runs.create(tid, "cm", input={"hold": False}, multitask_strategy="interrupt")
    await exited(log, held["run_id"])
    await b.runs.join(tid, after["run_id"])
    assert (await b.runs.get(tid, held["run_id"]))["status"] == "interrupted"
    assert [w for _, w in lines(log, held["run_id"])] == ["enter", "node", "exit"]
    assert [w for _, w in lines(log, after["run_id"])] == ["enter", "node", "exit"]


async def test_a_context_factory_is_exited_when_its_run_times_out(replicas, log: Path) -> None:
    _, (a,) = replicas("a", TURN_TIMEOUT_SECONDS="1")
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.create(tid, "cm", input={"hold": True})
    await a.runs.join(tid, run["run_id"])
    assert (await a.runs.get(tid, run["run_id"]))["status"] == "timeout"
    assert [w for _, w in lines(log, run["run_id"])] == ["enter", "node", "exit"]


async def test_a_context_factory_is_exited_when_its_replica_stops_and_again_where_it_is_taken_over(
    replicas, log: Path
) -> None:
    (leaving, _), (a, b) = replicas("leaving", "staying", DRAIN_SECONDS="1")
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.create(tid, "cm", input={"hold": True})
    await holding(log, run["run_id"])
    leaving.signal(signal.SIGTERM)  # drains 1 s, then hands the run over
    assert leaving.proc.wait(timeout=20) in (0, -signal.SIGTERM)
    # The staying replica may have taken the run over (and entered) before the leaving one exits.
    left = [w for pid, w in lines(log, run["run_id"]) if pid == leaving.proc.pid]
    assert left == ["enter", "node", "exit"]
    Path(f"{log}.gate").touch()
    await b.runs.join(tid, run["run_id"])
    assert (await b.runs.get(tid, run["run_id"]))["status"] == "success"
    seen = lines(log, run["run_id"])
    assert [w for _, w in seen] == ["enter", "node", "exit"] * 2
    assert seen[0][0] == leaving.proc.pid and seen[3][0] != leaving.proc.pid


async def test_a_replica_paused_past_its_lease_exits_its_context_on_waking_and_writes_nothing(
    replicas, log: Path
) -> None:
    (paused, _), (a, b) = replicas("paused", "other")
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.create(tid, "cm", input={"hold": True})
    await holding(log, run["run_id"])
    paused.signal(signal.SIGSTOP)
    try:
        Path(f"{log}.gate").touch()  # the node may go on: only the other replica sees it now
        await b.runs.join(tid, run["run_id"])  # taken over past the 1 s lease, and finished
        assert (await b.runs.get(tid, run["run_id"]))["status"] == "success"
        before_waking = lines(log, run["run_id"])
        other = [w for pid, w in before_waking if pid != paused.proc.pid]
        assert other == ["enter", "node", "exit"]
        assert [w for pid, w in before_waking if pid == paused.proc.pid] == ["enter", "node"]
    finally:
        paused.signal(signal.SIGCONT)
    # Woken, it finds the run taken over: it exits its own context...
    await until(
        lambda: (
            [w for pid, w in lines(log, run["run_id"]) if pid == paused.proc.pid] == ["enter", "node", "exit"]
        ),
        "the woken replica to exit its context",
    )
    taken = ("run taken over by another replica", "run lost its thread's lease")
    await until(lambda: any(line in paused.logs() for line in taken), "the woken replica to see it taken")
    # ...and wrote nothing: the thread is as the other replica left it, no checkpoint of its own.
    state = await b.threads.get_state(tid)
    assert state["values"]["by"] != paused.proc.pid
    history = await b.threads.get_history(tid, limit=100)
    assert paused.proc.pid not in {h["values"].get("by") for h in history}
    assert (await a.runs.get(tid, run["run_id"]))["status"] == "success"
