"""The growing chat of ``make bench-api`` and ``scripts/profile_run.py``: a MessagesState graph
with one node that answers every human message with a ~200-character AI reply (the
conversation of issue 12, as ``scripts/bench_checkpointers.py`` has it): each run adds two
messages to the thread, so its state grows with every turn.

No ``from __future__ import annotations``: Aegra 0.6 resolves a node's type hints outside this
module's globals (see examples/refunds/graph.py), and this graph serves its benchmark too."""

from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph

REPLY = (
    "All good: here is a reply of about two hundred characters, long enough to look like "
    "a real answer from a chat model, with a little more text so that it reaches the size "
    "we want per turn."
)
QUESTION = "Tell me more about this, in some detail please. " * 5  # 240 characters
# What a client sends each turn (runs.wait's input).
INPUT = {"messages": [{"role": "human", "content": QUESTION}]}


def reply(state: MessagesState) -> dict:
    return {"messages": [AIMessage(REPLY)]}


builder = StateGraph(MessagesState)
builder.add_node("reply", reply)
builder.add_edge(START, "reply")
graph = builder.compile()
