"""Graphs that use the store (long-term memory), as agents do: ``remember`` writes what the
input says under ``memories``, and every run answers with what a semantic search finds.
``graph`` takes the store from the runtime (async node); ``sync_graph`` from ``get_store()``
in a sync node, which LangGraph runs in a worker thread."""

from __future__ import annotations

from typing import TypedDict

from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime


class State(TypedDict, total=False):
    remember: str
    query: str
    recall: list[str]


async def recall(state: State, runtime: Runtime) -> State:
    store = runtime.store
    assert store is not None, "the server gives every run a store"
    if state.get("remember"):
        await store.aput(("memories",), state["remember"].split()[0], {"text": state["remember"]})
    found = await store.asearch(("memories",), query=state.get("query") or None, limit=5)
    return {"recall": [item.value["text"] for item in found]}


def recall_sync(state: State) -> State:
    store = get_store()
    if state.get("remember"):
        store.put(("memories",), state["remember"].split()[0], {"text": state["remember"]})
    return {"recall": [item.value["text"] for item in store.search(("memories",), limit=5)]}


def _build(node) -> StateGraph:
    builder = StateGraph(State)
    builder.add_node("recall", node)
    builder.add_edge(START, "recall")
    builder.add_edge("recall", END)
    return builder


graph = _build(recall).compile()
sync_graph = _build(recall_sync).compile()
