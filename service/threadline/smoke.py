"""A two-turn conversation against a running service: the `helm test` hook and image test.

Exits 0 only if both turns answered with the right turn numbers and, for the built-in model,
each reply is exactly what it must be given the whole conversation so far — so the second
reply provably saw the first turn. With ``any_model`` (a real provider) only the turn numbers
are checked. With a :class:`GraphRun`, one run through the LangGraph API follows.
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass

import httpx

from threadline.agent.builtin import builtin_reply


def run_keyless_smoke(url: str) -> int:
    """Without an API key (the chart's default helm test, adr/0006): the service is ready
    behind ``url`` and refuses a request that carries no credentials."""
    try:
        ready = httpx.get(f"{url}/readyz", timeout=30)
        refused = httpx.post(f"{url}/v1/threads", timeout=30)
    except httpx.HTTPError as exc:
        print(f"smoke: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if ready.status_code != 200 or refused.status_code != 401:
        print(
            f"smoke: readyz {ready.status_code}, unauthenticated POST {refused.status_code}", file=sys.stderr
        )
        return 1
    print(f"smoke: ready on {ready.json().get('replica')}; requests without credentials refused")
    return 0


@dataclass(frozen=True)
class GraphRun:
    """One stateless run through the LangGraph API: ``POST /runs/wait``, the body and
    ``x-api-key`` header ``langgraph-sdk``'s ``client.runs.wait(None, assistant, input=…)`` sends."""

    assistant: str
    input: dict
    expect_key: str = ""
    """A key the run's final values must hold; empty checks only that the run succeeded."""


def run_graph(client: httpx.Client, run: GraphRun) -> int:
    """Make ``run``; 0 if it answered 200 with final values (holding ``expect_key``)."""
    response = client.post("/runs/wait", json={"assistant_id": run.assistant, "input": run.input})
    if response.status_code != 200:
        print(
            f"smoke: run on {run.assistant!r} answered {response.status_code}: {response.text[:300]}",
            file=sys.stderr,
        )
        return 1
    values = response.json()
    # runs/wait answers 200 with the error in the body when the graph raised (the SDK checks it).
    if (
        not isinstance(values, dict)
        or "__error__" in values
        or (run.expect_key and run.expect_key not in values)
    ):
        print(
            f"smoke: run on {run.assistant!r} did not finish as expected: {str(values)[:300]}",
            file=sys.stderr,
        )
        return 1
    print(f"smoke: run on {run.assistant!r} finished with keys {sorted(values)}")
    return 0


def run_smoke(url: str, api_key: str, any_model: bool = False, graph_run: GraphRun | None = None) -> int:
    if not api_key:
        print("smoke: set THREADLINE_API_KEY", file=sys.stderr)
        return 2
    headers = {"X-API-Key": api_key}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            thread = client.post("/v1/threads").raise_for_status().json()["thread_id"]
            said: list[str] = []
            for n, content in enumerate(["hello from the smoke test", "do you remember me?"], 1):
                turn = (
                    client.post(
                        f"/v1/threads/{thread}/messages", json={"content": content, "id": uuid.uuid4().hex}
                    )
                    .raise_for_status()
                    .json()
                )
                said.append(content)
                got = turn["reply"]["content"]
                if turn["turn"] != n or not (any_model or got == builtin_reply(said, n)):
                    print(f"smoke: turn {n} did not see the conversation: {got!r}", file=sys.stderr)
                    return 1
                said.append(got)
                print(f"smoke: turn {n} on {turn['replica']}: {got}")
            if graph_run is not None:
                return run_graph(client, graph_run)
    except (httpx.HTTPError, ValueError) as exc:
        print(f"smoke: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0
