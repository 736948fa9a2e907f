"""Between the API's run and the graph: the input or ``Command`` a run sends, the config it runs
with, the graph's stream, the result it ends with, and the repair of tool calls a stopped run
left open."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command, Send

from threadline.custom_auth import graph_configurable
from threadline.runs import wire
from threadline.runs.assistants import Assistant, input_keys
from threadline.runs.errors import Invalid
from threadline.runs.protocol import PROTOCOL_KWARG, PROTOCOL_V2
from threadline.runs.records import RunRecord
from threadline.runs.threads import OWNER_KEY, thread_config

log = logging.getLogger(__name__)

# The run kwarg holding the caller's user and permissions (custom_auth.Caller.as_json), kept
# with the run so whichever replica executes it hands the graph the same user.
AUTH_KWARG = "langgraph_auth"
# The result a tool call gets when its run was stopped before the tool answered.
STOPPED_TOOL_RESULT = "error: the run was stopped before this tool call returned a result"


def check_input(assistant: Assistant, payload: dict[str, Any]) -> None:
    """Raises Invalid: input and command together, or input the graph does not take."""
    # interrupt_before/after naming a node the graph lacks are not refused: langgraph-api runs
    # them (the name never matches, so the run does not stop there), and clients rely on it.
    graph_input, command = payload.get("input"), payload.get("command")
    if graph_input is not None and command is not None:
        raise Invalid("send either input or command, not both")
    if graph_input is None:
        return
    channels = input_keys(assistant.graph)
    if channels is None:
        return  # a graph whose input is one value: any JSON value fits
    if not isinstance(graph_input, dict):
        raise Invalid(f"input: graph {assistant.graph_id!r} takes an object with keys {sorted(channels)}")
    unknown = sorted(set(graph_input) - set(channels))
    if unknown:
        graph_id = assistant.graph_id
        raise Invalid(
            f"input: {unknown} are not input keys of graph {graph_id!r} (it takes {sorted(channels)})"
        )


def graph_input(kwargs: dict[str, Any]) -> Any:
    """What the run sends the graph: its input, or its ``command`` as LangGraph's Command."""
    command = kwargs.get("command")
    if not command:
        return kwargs.get("input")
    goto = command.get("goto")
    if goto is not None and not isinstance(goto, list):
        goto = [goto]
    update = command.get("update")
    if isinstance(update, list) and all(isinstance(u, list) and len(u) == 2 for u in update):
        update = [tuple(u) for u in update]
    return Command(
        update=update,
        goto=[g if isinstance(g, str) else Send(g["node"], g["input"]) for g in goto] if goto else (),
        resume=command.get("resume"),
    )


async def close_open_tool_calls(graph: Any, thread_id: str, token: str | None) -> int:
    """Answer every tool call of the thread's messages that has no result with an error
    result, so the next run's model sees a valid history; returns how many.

    A run stopped between a model's tool call and the tool's result (a cancel, the
    ``interrupt`` strategy, a timeout) leaves the AI message with ``tool_calls`` as the last
    checkpointed state. The next run adds its human message after it, and every provider
    refuses such a history. The results are written as the pending node (``tools``) would
    have written them, so the graph moves past it. Only for a ``messages`` channel with a
    reducer (``add_messages``): a plain channel would be overwritten, not appended to.
    """
    channel = graph.channels.get("messages")
    if not isinstance(channel, BinaryOperatorAggregate):
        return 0
    config = thread_config(thread_id, None, token)
    state = await graph.aget_state(config)
    messages = state.values.get("messages") if isinstance(state.values, dict) else None
    if not messages:
        return 0
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    calls = [
        c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls if c.get("id") not in answered
    ]
    if not calls:
        return 0
    results = [
        ToolMessage(content=STOPPED_TOOL_RESULT, tool_call_id=c["id"], name=c.get("name"), status="error")
        for c in calls
    ]
    await graph.aupdate_state(config, {"messages": results}, as_node=state.next[0] if state.next else None)
    log.info("closed tool calls a stopped run left open", extra={"thread_id": thread_id, "calls": len(calls)})
    return len(results)


def values_result(state: Any) -> bytes:
    """The result of a run that ended at ``state`` (a ``StateSnapshot``): its values, and its
    pending interrupts as ``__interrupt__``."""
    values = state.values
    result = dict(values) if isinstance(values, dict) else {"__root__": values}
    if state.interrupts:
        result["__interrupt__"] = [wire.interrupt_dict(i) for i in state.interrupts]
    return wire.dumps(result)


def can_delete_for_runs(saver: BaseCheckpointSaver) -> bool:
    """Whether the saver implements ``adelete_for_runs`` (the base class only raises)."""
    return type(saver).adelete_for_runs is not BaseCheckpointSaver.adelete_for_runs


def run_config(
    run: RunRecord, assistant: Assistant, token: str | None, from_latest: bool = False
) -> dict[str, Any]:
    """The run's graph config; ``from_latest`` ignores the checkpoint the run was asked to
    start from (a taken-over run goes on from its own last checkpoint)."""
    kwargs = run.kwargs
    config = dict(kwargs.get("config") or {})
    checkpoint = {} if from_latest else dict(kwargs.get("checkpoint") or {})
    if kwargs.get("checkpoint_id") and not from_latest:
        checkpoint["checkpoint_id"] = kwargs["checkpoint_id"]
    configurable = {
        **(config.get("configurable") or {}),
        **thread_config(run.thread_id, checkpoint, token)["configurable"],
        # Who the run is for, as langgraph-api passes it (and LangGraph's Runtime.server_info
        # reads it); last, so a client's config cannot claim to be someone else.
        **graph_configurable(kwargs.get(AUTH_KWARG), run.owner),
        "assistant_id": assistant.assistant_id,
        "graph_id": assistant.graph_id,
    }
    config["configurable"] = configurable
    config["metadata"] = {
        **(config.get("metadata") or {}),
        **run.metadata,
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "graph_id": assistant.graph_id,
        "assistant_id": assistant.assistant_id,
        # In every checkpoint the run writes: the thread's owner survives a lost record.
        OWNER_KEY: run.owner,
    }
    config["run_id"] = uuid.UUID(run.run_id)
    return config


async def stream_graph(graph, graph_input, config, kwargs, requested: list[str]) -> AsyncIterator[tuple]:
    """``(namespace, mode, chunk)`` from the graph, plus ``((), "events", event)`` when the
    client asked for ``events``."""
    # Always values and updates: the run's result and whether it stopped come from them.
    modes = {m for m in requested if m not in ("events", "messages-tuple", "messages")} | {
        "updates",
        "values",
    }
    if "messages" in requested or "messages-tuple" in requested:
        modes.add("messages")
    options: dict[str, Any] = {
        "stream_mode": sorted(modes),
        "subgraphs": True,
        "interrupt_before": kwargs.get("interrupt_before"),
        "interrupt_after": kwargs.get("interrupt_after"),
        "durability": kwargs.get("durability") or "sync",
    }
    # Always a context, {} by default (an assistant's default, as langgraph-api passes it): a
    # graph with a context schema then gets its defaults instead of None.
    options["context"] = kwargs.get("context") or {}
    if kwargs.get(PROTOCOL_KWARG) == PROTOCOL_V2:
        # The v2 protocol: LangGraph's own protocol events, every namespace (runs/protocol.py).
        del options["stream_mode"], options["subgraphs"]
        async with await graph.astream_events(graph_input, config, version="v3", **options) as events:
            async for event in events:
                yield tuple(event["params"].get("namespace") or ()), "protocol", event
        return
    subgraphs = bool(kwargs.get("stream_subgraphs"))
    if "events" not in requested:
        async for ns, mode, chunk in graph.astream(graph_input, config, **options):
            if ns and not subgraphs:
                continue
            yield ns, mode, chunk
        return
    async for event in graph.astream_events(graph_input, config, version="v2", **options):
        if event["event"] == "on_chain_stream" and event["run_id"] == str(config["run_id"]):
            ns, mode, chunk = event["data"]["chunk"]
            if not ns or subgraphs:
                yield ns, mode, chunk
        else:
            yield (), "events", event
