"""Assistants held to the reference: the same seeded random sequence of assistant operations
(create with and without ``if_exists``, patch, get, delete, search with every filter, sort, page
and ``select``, count, versions, set latest; unknown ids and graphs, config beside context) sent
to ``langgraph dev`` and to threadline — two replicas on one Redis, taking turns, and one SQLite
replica — and every answer compared: status, body (times aside: they are the servers' clocks)
and paging headers.

Long sequences on purpose: past the search page, past the versions kept, deletes and re-creates
of the same id, which the examples in test_assistants.py do not reach.

One difference is on purpose (docs/compatibility.md): set latest makes the whole version current
in threadline, where the reference leaves the current ``context`` and ``graph_id`` in place. So
those two fields are not compared in its answer, and the assistant is deleted from both servers
right after, which keeps the two in step for the rest of the sequence.
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
ROOT = GRAPHS_DIR.parents[2]
# threadline serves its built-in chat graph beside langgraph.json's: the reference gets a graph
# of that id too, first, so both list the same built-ins in the same order.
GRAPHS = {
    "chat": f"{GRAPHS_DIR}/steps.py:graph",
    "refunds": f"{ROOT}/examples/refunds/graph.py:graph",
    "nested": f"{GRAPHS_DIR}/nested.py:graph",
    "steps": f"{GRAPHS_DIR}/steps.py:graph",
    "tools": f"{GRAPHS_DIR}/tools.py:graph",
}
SEEDS = (1, 2, 3)
OPERATIONS = 400
# Versions kept as many as the reference keeps (all), so set-latest finds the same ones.
ENV = {
    "LANGGRAPH_CONFIG": str(GRAPHS_DIR / "langgraph.json"),
    "QUOTA_ASSISTANTS_PER_PRINCIPAL": "0",
    "QUOTA_ASSISTANT_VERSIONS": str(OPERATIONS),
}


class Operations:
    """A seeded random sequence of assistant operations as (method, path, body)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.made: list[str] = []

    def _id(self) -> str:
        if self.made and self.rng.random() < 0.85:
            return self.rng.choice(self.made)
        return seeded_id(self.rng)

    def _metadata(self) -> dict[str, Any]:
        r = self.rng
        return {r.choice("abc"): r.choice([1, 2, "x", True, None, {"n": 1}]) for _ in range(r.randint(0, 2))}

    def _config_or_context(self, body: dict[str, Any]) -> None:
        c = self.rng.random()
        tag = self.rng.choice("pq")
        if c < 0.3:
            body["config"] = {"configurable": {"tag": tag}}
        elif c < 0.6:
            body["context"] = {"tag": tag}
        elif c < 0.65:  # both: refused
            body["config"], body["context"] = {"configurable": {"tag": "p"}}, {"tag": "q"}
        elif c < 0.75:
            body["config"] = {"tags": ["t"], "recursion_limit": 5}

    def next(self) -> tuple[str, str, dict[str, Any] | None]:
        r = self.rng
        kinds = ["create", "patch", "get", "delete", "search", "count", "versions", "latest"]
        kind = r.choices(kinds, [5, 4, 2, 1, 4, 2, 2, 2])[0]
        graphs = list(GRAPHS)
        if kind == "create":
            body: dict[str, Any] = {"graph_id": r.choice(graphs) if r.random() > 0.05 else "nope"}
            body["assistant_id"] = self._id() if r.random() < 0.2 else seeded_id(self.rng)
            if body["assistant_id"] not in self.made:
                self.made.append(body["assistant_id"])
            if r.random() < 0.3:
                body["if_exists"] = r.choice(["raise", "do_nothing"])
            if r.random() < 0.6:
                body["metadata"] = self._metadata()
            if r.random() < 0.6:
                body["name"] = r.choice(["Alpha", "beta", "Gamma", "alpha two"])
            if r.random() < 0.3:
                body["description"] = r.choice(["d1", "d2"])
            self._config_or_context(body)
            return "POST", "/assistants", body
        if kind == "patch":
            body = {}
            if r.random() < 0.3:
                body["graph_id"] = r.choice(graphs)
            if r.random() < 0.5:
                body["metadata"] = self._metadata()
            if r.random() < 0.4:
                body["name"] = r.choice(["Alpha", "beta", "Delta"])
            if r.random() < 0.2:
                body["description"] = r.choice(["d3", "d4"])
            self._config_or_context(body)
            return "PATCH", f"/assistants/{self._id()}", body
        if kind == "get":
            return "GET", f"/assistants/{self._id()}", None
        if kind == "delete":
            return "DELETE", f"/assistants/{self._id()}", None
        if kind == "versions":
            body = {}
            if r.random() < 0.5:
                body["limit"] = r.randint(1, 4)
            if r.random() < 0.4:
                body["offset"] = r.randint(0, 2)
            if r.random() < 0.3:
                body["metadata"] = self._metadata()
            return "POST", f"/assistants/{self._id()}/versions", body
        if kind == "latest":
            return "POST", f"/assistants/{self._id()}/latest", {"version": r.randint(1, 5)}
        body = {}
        if r.random() < 0.3:
            body["graph_id"] = r.choice(graphs)
        if r.random() < 0.3:
            body["metadata"] = self._metadata()
        if r.random() < 0.2:
            body["name"] = r.choice(["alpha", "Gam", "x"])
        if kind == "search":
            if r.random() < 0.7:
                body["limit"] = r.randint(1, 6)
            if r.random() < 0.5:
                body["offset"] = r.randint(0, 4)
            if r.random() < 0.6:
                body["sort_by"] = r.choice(["assistant_id", "graph_id", "name", "created_at", "updated_at"])
            if r.random() < 0.6:
                body["sort_order"] = r.choice(["asc", "desc"])
            if r.random() < 0.3:
                fields = ["assistant_id", "graph_id", "name", "metadata", "version", "config", "context"]
                body["select"] = r.sample(fields, r.randint(1, 3))
        return "POST", f"/assistants/{kind}", body


def _untimed(value: Any) -> Any:
    """``value`` without times: they are the servers' clocks."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in ("created_at", "updated_at")}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _whole_version_aside(answer: tuple[int, Any, dict[str, str]]) -> tuple[int, Any, dict[str, str]]:
    status, body, headers = answer
    if body is not None:
        body = {k: v for k, v in body.items() if k not in ("context", "graph_id")}
    return status, body, headers


def _clear(http: httpx.Client) -> None:
    """Delete every assistant a client made (the built-ins stay)."""
    made = http.post("/assistants/search", json={"limit": 1000}).json()
    for a in made:
        if a["metadata"].get("created_by") != "system":
            http.delete(f"/assistants/{a['assistant_id']}").raise_for_status()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    with langgraph_dev(graphs_config(tmp_path_factory.mktemp("reference"), GRAPHS)) as served:
        yield served.url


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
@pytest.mark.parametrize("seed", SEEDS)
def test_assistant_operations_answer_as_the_reference(
    reference, replicas_on, backend: str, seed: int
) -> None:
    replicas = replicas_on(backend, **ENV)
    ours = [httpx.Client(base_url=r.url, headers={"x-api-key": API_KEY}, timeout=30) for r in replicas]
    theirs = httpx.Client(base_url=reference, timeout=30)
    _clear(theirs)
    operations = Operations(seed)
    for n in range(OPERATIONS):
        method, path, body = operations.next()
        expected = answer_of(theirs.request(method, path, json=body), _untimed)
        got = answer_of(ours[n % len(ours)].request(method, path, json=body), _untimed)
        if path.endswith("/latest"):
            expected, got = _whole_version_aside(expected), _whole_version_aside(got)
        assert got == expected, f"operation {n}: {method} {path} {body}"
        if path.endswith("/latest") and got[0] == 200:
            assistant = path.split("/")[2]
            operations.made.remove(assistant)
            assert theirs.delete(f"/assistants/{assistant}").status_code == 204
            assert ours[0].delete(f"/assistants/{assistant}").status_code == 204
