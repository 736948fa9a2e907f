"""A test graph for runs that outlive their replica: ``steps`` slow steps, each appending its
number to ``done`` (so a step that ran twice, or was lost, shows), then optionally an
interrupt whose answer lands in ``answers``. The chaos driver's LangGraph-API mode uses it too."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated

from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict


class Steps(TypedDict, total=False):
    steps: int
    delay: float
    ask: str
    tag: str
    done: Annotated[list[str], operator.add]
    answers: Annotated[list[str], operator.add]


def _tag(state: Steps) -> str:
    # The input's, else the run's config (an assistant's ``configurable.tag``).
    return state.get("tag") or get_config()["configurable"].get("tag") or ""


def _mine(state: Steps) -> list[str]:
    return [d for d in state.get("done") or [] if d.startswith(_tag(state))]


async def step(state: Steps) -> dict:
    await asyncio.sleep(state.get("delay") or 0)
    return {"done": [f"{_tag(state)}{len(_mine(state)) + 1}"]}


def ask(state: Steps) -> dict:
    # The question names the thread's progress, so a resume answers its own interrupt.
    answer = interrupt({"question": state["ask"], "after": len(state.get("done") or [])})
    return {"answers": [f"{state['ask']}={answer}"], "ask": ""}


def after_step(state: Steps) -> str:
    if len(_mine(state)) < (state.get("steps") or 1):
        return "step"
    return "ask" if state.get("ask") else END


def begin(state: Steps) -> dict:
    return {}


builder = StateGraph(Steps)
builder.add_node("begin", begin)
builder.add_node("step", step)
builder.add_node("ask", ask)
builder.add_edge(START, "begin")
builder.add_edge("begin", "step")
builder.add_conditional_edges("step", after_step, ["step", "ask", END])
builder.add_edge("ask", END)
graph = builder.compile()
