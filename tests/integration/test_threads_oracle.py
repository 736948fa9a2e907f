"""Threads held to the reference: the same seeded random sequence of thread operations (create
with and without ``if_exists``, get, patch, delete, search with every filter, sort, page and
``select``, count, runs that end, stop at an interrupt or resume it, state, history and state
updates, known and unknown thread ids) sent to ``langgraph dev`` and to threadline — two
replicas on one Redis, taking turns, and one SQLite replica — and every answer compared:
status, body and paging headers.

Long sequences on purpose: past the search page, with threads that runs, patches and state
updates move up the ``updated_at`` order, which the examples in test_langgraph_api.py do not
reach.

Not compared, each for its reason:

- times and ids the servers make (``created_at``, checkpoint and run ids): their clocks and
  random sources;
- a thread's ``config``, ``error`` and (fresh) ``interrupts`` fields, and checkpoint metadata
  beyond LangGraph's own ``source`` and ``step``: docs/compatibility.md says how they differ
  (langgraph-api also copies its own version, host and request keys into every checkpoint);
- ``sort_order`` is sent only with a ``sort_by``: without one the reference ignores it, and
  threadline applies it (docs/compatibility.md);
- no ``values`` filter: the reference answers it with a 500 once a thread has no values;
- a resume is sent only to a thread the reference says waits at an interrupt: threadline
  refuses one that resumes nothing (409, docs/compatibility.md).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import httpx
import pytest

from client import API_KEY
from reference import answer_of, graphs_config, langgraph_dev, seeded_id

pytestmark = pytest.mark.integration

GRAPHS_DIR = Path(__file__).resolve().parent / "graphs"
GRAPHS = {"steps": f"{GRAPHS_DIR}/steps.py:graph"}
ENV = {"LANGGRAPH_CONFIG": str(GRAPHS_DIR / "langgraph.json")}
SEEDS = (1, 2, 3)
OPERATIONS = 300
# Made by each server for itself.
UNCOMPARED = {
    "created_at",
    "updated_at",
    "state_updated_at",
    "checkpoint_id",
    "parent_checkpoint_id",
    "run_id",
    "id",
}
THREAD_FIELDS_APART = ("config", "error", "interrupts")
SORT_KEYS = ["thread_id", "status", "created_at", "updated_at", "state_updated_at"]
FIELDS = ["thread_id", "status", "metadata", "values", "created_at", "updated_at"]


class Operations:
    """A seeded random sequence of thread operations as (method, path, body)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.made: list[str] = []
        self.waiting: set[str] = set()  # threads at an interrupt, as the reference answered

    def _id(self) -> str:
        if self.made and self.rng.random() < 0.9:
            return self.rng.choice(self.made)
        return seeded_id(self.rng)

    def _metadata(self) -> dict[str, Any]:
        r = self.rng
        return {
            r.choice("abc"): r.choice([1, 2, "x", True, None, {"n": 1}, [1]]) for _ in range(r.randint(0, 2))
        }

    def next(self) -> tuple[str, str, dict[str, Any] | None]:
        r = self.rng
        kinds = ["create", "get", "patch", "delete", "search", "count", "run", "state", "history", "update"]
        kind = r.choices(kinds, [5, 2, 3, 1, 6, 3, 4, 2, 2, 2])[0]
        if kind == "create":
            body: dict[str, Any] = {"thread_id": self._id() if r.random() < 0.2 else seeded_id(self.rng)}
            if body["thread_id"] not in self.made:
                self.made.append(body["thread_id"])
            if r.random() < 0.6:
                body["metadata"] = self._metadata()
            if r.random() < 0.3:
                body["if_exists"] = r.choice(["raise", "do_nothing"])
            return "POST", "/threads", body
        if kind == "get":
            return "GET", f"/threads/{self._id()}", None
        if kind == "patch":
            return "PATCH", f"/threads/{self._id()}", {"metadata": self._metadata()}
        if kind == "delete":
            return "DELETE", f"/threads/{self._id()}", None
        if kind == "state":
            return "GET", f"/threads/{self._id()}/state", None
        if kind == "history":
            body = {}
            if r.random() < 0.6:
                body["limit"] = r.randint(1, 5)
            if r.random() < 0.3:
                body["metadata"] = r.choice(
                    [{"source": "loop"}, {"step": 1}, {"source": "input"}, {"source": "update"}]
                )
            return "POST", f"/threads/{self._id()}/history", body
        if kind == "update":
            body = {"values": {"tag": r.choice("xy"), "done": [r.choice("pq")]}}
            if r.random() < 0.5:
                body["as_node"] = r.choice(["step", "ask", "nope"])
            return "POST", f"/threads/{self._id()}/state", body
        if kind == "run":
            thread_id = self._id()
            if thread_id in self.waiting and r.random() < 0.5:
                body = {"assistant_id": "steps", "command": {"resume": r.choice(["yes", "no"])}}
            else:
                body = {"assistant_id": "steps", "input": {"steps": r.randint(1, 2), "tag": r.choice("ab")}}
                if r.random() < 0.3:
                    body["input"]["ask"] = "q"
            if r.random() < 0.2:
                body["metadata"] = self._metadata()
            return "POST", f"/threads/{thread_id}/runs/wait", body
        body = {}
        if r.random() < 0.3:
            body["metadata"] = self._metadata()
        if r.random() < 0.2:
            body["status"] = r.choice(["idle", "busy", "interrupted", "error"])
        if kind == "search":
            if r.random() < 0.2 and self.made:
                body["ids"] = r.sample(self.made, min(len(self.made), r.randint(1, 3)))
            if r.random() < 0.7:
                body["limit"] = r.randint(1, 6)
            if r.random() < 0.5:
                body["offset"] = r.randint(0, 4)
            if r.random() < 0.6:
                body["sort_by"] = r.choice(SORT_KEYS)
                if r.random() < 0.6:
                    body["sort_order"] = r.choice(["asc", "desc"])
            if r.random() < 0.3:
                body["select"] = r.sample(FIELDS, r.randint(1, 3))
        return "POST", f"/threads/{kind}", body

    def answered(self, path: str, response: httpx.Response) -> None:
        """Learn from the reference's answer which threads wait at an interrupt."""
        if path.endswith("/runs/wait") and response.is_success:
            thread_id = path.split("/")[2]
            if "__interrupt__" in response.json():
                self.waiting.add(thread_id)
            else:
                self.waiting.discard(thread_id)


def _comparable(value: Any) -> Any:
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "thread_id" in value and "status" in value:  # a thread
        value = {k: v for k, v in value.items() if k not in THREAD_FIELDS_APART}
    if "next" in value and "values" in value:  # a state
        metadata = value.get("metadata")
        value = {**value, "metadata": metadata and {k: metadata.get(k) for k in ("source", "step")}}
    return {k: _comparable(v) for k, v in value.items() if k not in UNCOMPARED}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    with langgraph_dev(graphs_config(tmp_path_factory.mktemp("reference"), GRAPHS)) as served:
        yield served.url


def _clear(http: httpx.Client) -> None:
    """Delete every thread of the reference (its state lives as long as the module's server)."""
    while found := http.post("/threads/search", json={"limit": 1000, "select": ["thread_id"]}).json():
        for thread in found:
            http.delete(f"/threads/{thread['thread_id']}").raise_for_status()


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
@pytest.mark.parametrize("seed", SEEDS)
def test_thread_operations_answer_as_the_reference(reference, replicas_on, backend: str, seed: int) -> None:
    replicas = replicas_on(backend, **ENV)
    ours = [httpx.Client(base_url=r.url, headers={"x-api-key": API_KEY}, timeout=30) for r in replicas]
    theirs = httpx.Client(base_url=reference, timeout=30)
    _clear(theirs)
    operations = Operations(seed)
    for n in range(OPERATIONS):
        method, path, body = operations.next()
        answered = theirs.request(method, path, json=body)
        operations.answered(path, answered)
        got = answer_of(ours[n % len(ours)].request(method, path, json=body), _comparable)
        assert got == answer_of(answered, _comparable), f"operation {n}: {method} {path} {body}"
