"""A run's ``durability`` (and the SDKs' older ``checkpoint_during``) decides which of its steps
are checkpointed, as on langgraph-api 0.16.7 (``langgraph dev``): the same graph
(``graphs/steps.py``), the same calls through the real ``langgraph-sdk``, the same history.

A run that names neither is ``"sync"`` on threadline and ``"async"`` on the reference
(docs/compatibility.md): both checkpoint every step, so their histories are the same too; that
"sync" stores each step before the next starts is test_turn_durability.py's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client

from client import API_KEY
from reference import graphs_config, langgraph_dev

pytestmark = pytest.mark.integration

GRAPHS_DIR = Path(__file__).resolve().parent / "graphs"
ENV = {"LANGGRAPH_CONFIG": str(GRAPHS_DIR / "langgraph.json")}
OPTIONS: list[dict[str, Any]] = [
    {},
    {"durability": "sync"},
    {"durability": "async"},
    {"durability": "exit"},
    {"checkpoint_during": True},
    {"checkpoint_during": False},
    {"checkpoint_during": False, "durability": "sync"},
    {"checkpoint_during": True, "durability": "exit"},
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    graphs = {"steps": f"{GRAPHS_DIR}/steps.py:graph"}
    with langgraph_dev(graphs_config(tmp_path_factory.mktemp("reference"), graphs)) as served:
        yield served.url


async def _checkpointed_steps(client, options: dict[str, Any]) -> list[list[int]]:
    """The ``step`` of each checkpoint of two runs of three steps on a new thread, newest first."""
    thread = (await client.threads.create())["thread_id"]
    steps = []
    for _ in range(2):
        await client.runs.wait(thread, "steps", input={"steps": 3}, **options)
        steps.append([h["metadata"]["step"] for h in await client.threads.get_history(thread, limit=100)])
    return steps


# The SDKs warn of checkpoint_during: clients that still send it are what this test is for.
@pytest.mark.filterwarnings("ignore:`checkpoint_during` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("backend", ["redis", "sqlite"])
async def test_a_runs_durability_checkpoints_the_steps_the_reference_does(
    reference, replicas_on, backend: str
) -> None:
    ours = get_client(url=replicas_on(backend, **ENV)[0].url, api_key=API_KEY)
    theirs = get_client(url=reference, api_key=None)
    for options in OPTIONS:
        expected = await _checkpointed_steps(theirs, options)
        assert await _checkpointed_steps(ours, options) == expected, options
    # Not vacuous: "exit" keeps one checkpoint a run, the others one a step.
    assert [len(run) for run in await _checkpointed_steps(theirs, {"durability": "exit"})] == [1, 2]
    assert len((await _checkpointed_steps(theirs, {}))[0]) > 3
