"""A test graph for the LangGraph API: a subgraph (for ``stream_subgraphs``), a run context
(``context``) and three steps to stop between (``interrupt_before/after``, ``checkpoint_id``)."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict


class Notes(TypedDict, total=False):
    topic: str
    draft: str
    notes: Annotated[list[str], operator.add]


class Draft(TypedDict, total=False):
    topic: str
    draft: str


@dataclass
class Style:
    style: str = "plain"


def prepare(state: Notes) -> dict:
    return {"notes": [f"prepared {state['topic']}"]}


def write(state: Draft, runtime: Runtime[Style]) -> dict:
    get_stream_writer()({"writing": state["topic"]})
    return {"draft": f"{runtime.context.style} {state['topic']}"}


def finish(state: Notes) -> dict:
    return {"notes": [state["draft"], "done"]}


inner = StateGraph(Draft, context_schema=Style)
inner.add_node("write", write)
inner.add_edge(START, "write")
inner.add_edge("write", END)

outer = StateGraph(Notes, context_schema=Style)
outer.add_node("prepare", prepare)
outer.add_node("inner", inner.compile())
outer.add_node("finish", finish)
outer.add_edge(START, "prepare")
outer.add_edge("prepare", "inner")
outer.add_edge("inner", "finish")
outer.add_edge("finish", END)
graph = outer.compile()
