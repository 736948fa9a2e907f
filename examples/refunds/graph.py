"""An example graph for threadline: a refund desk with a human in the loop.

Three nodes over a custom state: ``triage`` reads the request, ``review`` asks a human to
approve a refund above the limit (``interrupt()``; a client resumes it with
``Command(resume="approve")`` or ``"deny"``), ``respond`` answers. Every node streams a
progress event (``get_stream_writer()``, seen with ``stream_mode="custom"``).

Compiled without a checkpointer: the server (threadline, or ``langgraph dev``) supplies it.
No ``from __future__ import annotations``: Aegra 0.6 resolves the state's type hints outside
this module's globals (``name 'Literal' is not defined``), and this graph serves its benchmark.
"""

import operator
from typing import Annotated, Literal, TypedDict

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

# Refunds up to this amount are approved without a human.
AUTO_APPROVE_LIMIT = 100


class Ticket(TypedDict, total=False):
    request: str
    amount: int
    category: Literal["refund", "question"]
    decision: Literal["approved", "denied", "not needed"]
    answer: str
    trail: Annotated[list[str], operator.add]


def triage(state: Ticket) -> dict:
    category = "refund" if "refund" in state["request"].lower() else "question"
    get_stream_writer()({"node": "triage", "category": category})
    return {"category": category, "trail": ["triage"]}


def route(state: Ticket) -> Literal["review", "respond"]:
    return "review" if state["category"] == "refund" else "respond"


def review(state: Ticket) -> dict:
    amount = state.get("amount", 0)
    if amount <= AUTO_APPROVE_LIMIT:
        decision = "approved"
    else:
        get_stream_writer()({"node": "review", "waiting_for": "a human"})
        # Pauses the run here; the checkpoint keeps it until a client resumes with a Command.
        verdict = interrupt({"question": f"approve a refund of {amount}?", "amount": amount})
        decision = "approved" if verdict == "approve" else "denied"
    return {"decision": decision, "trail": ["review"]}


def respond(state: Ticket) -> dict:
    if state["category"] == "question":
        text, decision = "thanks, a person will answer your question", "not needed"
    else:
        decision = state["decision"]
        text = f"your refund of {state.get('amount', 0)} is {decision}"
    get_stream_writer()({"node": "respond", "decision": decision})
    return {"answer": text, "decision": decision, "trail": ["respond"]}


builder = StateGraph(Ticket)
builder.add_node("triage", triage)
builder.add_node("review", review)
builder.add_node("respond", respond)
builder.add_edge(START, "triage")
builder.add_conditional_edges("triage", route)
builder.add_edge("review", "respond")
builder.add_edge("respond", END)
graph = builder.compile(name="refunds")
