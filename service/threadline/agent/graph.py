"""The conversation graph: one model node over MessagesState, plus the thread's owner."""

from __future__ import annotations

import asyncio

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from threadline import metrics

MODEL_NODE = "model"


class ThreadState(MessagesState):
    """Messages plus the principal that owns the thread (stored with the thread itself)."""

    owner: str


REPLY_SUFFIX = ".reply"


def reply_id_for(message_id: str) -> str:
    """The id of the reply to human message ``message_id``.

    Deterministic, so a retried or resumed turn replaces its reply instead of adding a second
    one (``add_messages`` merges messages by id).
    """
    return message_id + REPLY_SUFFIX


def build_graph(model: BaseChatModel, checkpointer: BaseCheckpointSaver) -> CompiledStateGraph:
    """START → model → END, checkpointed after every step."""

    async def call_model(state: ThreadState) -> dict:
        messages = state["messages"]
        human = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        try:
            reply = await model.ainvoke(messages)
        except asyncio.CancelledError:
            metrics.MODEL_CANCELLED.inc()
            raise
        return {"messages": [AIMessage(content=reply.content, id=reply_id_for(str(human.id)))]}

    builder = StateGraph(ThreadState)
    builder.add_node(MODEL_NODE, call_model)
    builder.add_edge(START, MODEL_NODE)
    builder.add_edge(MODEL_NODE, END)
    return builder.compile(checkpointer=checkpointer)
