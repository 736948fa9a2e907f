"""A test graph with a tool call, for the guarantee that a stopped run leaves a thread the next
run can continue (ADR 0010): ``agent`` answers a human message with a tool call, ``tools``
runs it (slowly, so a test can cancel it mid-call), ``agent`` answers the result. Like a real
provider, ``agent`` refuses a history in which a tool call has no result."""

from __future__ import annotations

import asyncio

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph

TOOL_SECONDS = 3.0


def agent(state: MessagesState) -> dict:
    messages = state["messages"]
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    for m in messages:
        if isinstance(m, AIMessage) and any(c["id"] not in answered for c in m.tool_calls):
            raise ValueError("a tool call has no result: the provider would refuse this history")
    last = messages[-1]
    if isinstance(last, HumanMessage):
        call = {"name": "lookup", "args": {"q": last.content}, "id": f"call-{len(messages)}"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}
    return {"messages": [AIMessage(content=f"answer: {last.content}")]}


async def tools(state: MessagesState) -> dict:
    call = state["messages"][-1].tool_calls[0]
    await asyncio.sleep(TOOL_SECONDS)
    return {"messages": [ToolMessage(content=f"found {call['args']['q']}", tool_call_id=call["id"])]}


def route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


builder = StateGraph(MessagesState)
builder.add_node("agent", agent)
builder.add_node("tools", tools)
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", route, ["tools", END])
builder.add_edge("tools", "agent")
graph = builder.compile()
