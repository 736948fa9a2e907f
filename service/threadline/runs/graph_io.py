"""Between the API's run and the graph: the input or ``Command`` a run sends, the config it runs
with, the graph's stream, one attempt's graph run (:func:`run_graph`) and the result it ends
with, and the repair of tool calls a stopped run left open."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore
from langgraph.types import Command, Send

from threadline.checkpoint import delete_for_runs
from threadline.checkpoint.errors import FencedError
from threadline.config import QuotaSettings
from threadline.custom_auth import graph_configurable
from threadline.lease import HeldLease, LeaseBusy, TurnLease
from threadline.retry import store_failures, through_store_failures
from threadline.runs import wire
from threadline.runs.assistant import Assistant, synced
from threadline.runs.errors import Invalid
from threadline.runs.events import Emitter, EventLog
from threadline.runs.graph_schemas import input_keys
from threadline.runs.protocol import PROTOCOL_KWARG, PROTOCOL_V2
from threadline.runs.records import RunRecord
from threadline.runs.thread_checkpoints import OWNER_KEY, thread_config

log = logging.getLogger(__name__)

# The run kwarg holding the caller's user and permissions (custom_auth.Caller.as_json), kept
# with the run so whichever replica executes it hands the graph the same user.
AUTH_KWARG = "langgraph_auth"
# The run kwarg holding the id of the cron whose tick made the run, when the cron has a context
# (which may not go with a ``configurable``): added to the graph's ``configurable`` as
# langgraph-api adds it.
CRON_KWARG = "langgraph_cron_id"
# The result a tool call gets when its run was stopped before the tool answered.
STOPPED_TOOL_RESULT = "error: the run was stopped before this tool call returned a result"


def check_input(assistant: Assistant, payload: dict[str, Any]) -> None:
    """Raises Invalid: input and command together, config.configurable and context together,
    or input the graph does not take."""
    # interrupt_before/after naming a node the graph lacks are not refused: langgraph-api runs
    # them (the name never matches, so the run does not stop there), and clients rely on it.
    graph_input, command = payload.get("input"), payload.get("command")
    if graph_input is not None and command is not None:
        raise Invalid("send either input or command, not both")
    synced(payload.get("config") or {}, payload.get("context"))  # raises when both are given
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
        # As the state shows them (a run's own wait answers them whole: _stream_run).
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
        **({"cron_id": kwargs[CRON_KWARG]} if CRON_KWARG in kwargs else {}),
        **thread_config(run.thread_id, checkpoint, token)["configurable"],
        # Who the run is for, as langgraph-api passes it (and LangGraph's Runtime.server_info
        # reads it); last, so a client's config cannot claim to be someone else.
        **graph_configurable(kwargs.get(AUTH_KWARG), run.owner),
        "assistant_id": assistant.assistant_id,
        "graph_id": assistant.graph_id,
        "run_id": run.run_id,  # as langgraph-api passes it (graphs read it there)
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
    subgraphs = bool(kwargs.get("stream_subgraphs"))
    options: dict[str, Any] = {
        "stream_mode": sorted(modes),
        "interrupt_before": kwargs.get("interrupt_before"),
        "interrupt_after": kwargs.get("interrupt_after"),
        "durability": kwargs.get("durability") or "sync",
    }
    # Always a context, {} by default (an assistant's default, as langgraph-api passes it): a
    # graph with a context schema then gets its defaults instead of None.
    options["context"] = kwargs.get("context") or {}
    if kwargs.get(PROTOCOL_KWARG) == PROTOCOL_V2:
        # The v2 protocol: LangGraph's own protocol events, every namespace (runs/protocol.py).
        del options["stream_mode"]
        async with await graph.astream_events(graph_input, config, version="v3", **options) as events:
            async for event in events:
                yield tuple(event["params"].get("namespace") or ()), "protocol", event
        return
    if "events" not in requested:
        # Subgraphs' parts only when asked for: streaming them makes LangGraph run every step's
        # tasks concurrently with a stream waiter (its fast path is one task run inline), so a
        # step's writes and its checkpoint went in two round trips instead of one (issue 24).
        async for part in graph.astream(graph_input, config, subgraphs=subgraphs, **options):
            yield part if subgraphs else ((), *part)
        return
    async for event in graph.astream_events(graph_input, config, version="v2", subgraphs=True, **options):
        if event["event"] == "on_chain_stream" and event["run_id"] == str(config["run_id"]):
            ns, mode, chunk = event["data"]["chunk"]
            if not ns or subgraphs:
                yield ns, mode, chunk
        else:
            yield (), "events", event


async def run_graph(
    run: RunRecord,
    assistant: Assistant,
    held: HeldLease,
    attempt: int,
    events: EventLog,
    quota: QuotaSettings,
    timeout_seconds: float | None,
    store: BaseStore | None = None,
) -> tuple[str, str, bytes]:
    """One attempt's graph run under the thread's lease ``held``: its events into ``events``;
    returns ``(run status, thread status, result)``. A run taken over (``attempt`` > 1) goes
    on from its own last checkpoint, if it wrote one. ``store``: what the graph's nodes get as
    their ``store`` (the run's owner's view of the long-term memory).

    Raises:
        FencedError: the lease was lost (nothing more is stored from here).
        store failures and CancelledError, as raised.
    """
    run = replace(run, kwargs=assistant.applied(run.kwargs))
    kwargs = run.kwargs
    input_ = graph_input(kwargs)
    resumed = False
    if attempt > 1:
        # Taken over: if the run got as far as writing a checkpoint, it goes on from the
        # thread's last one (its own; runs of a thread are serial), LangGraph reusing the
        # writes of the steps that completed. Else it starts over from its input.
        latest = await assistant.graph.checkpointer.aget_tuple(thread_config(run.thread_id))
        resumed = latest is not None and (latest.metadata or {}).get("run_id") == run.run_id
        if resumed:
            input_ = None
    config = run_config(run, assistant, held.token, from_latest=resumed)
    if ceiling := quota.max_recursion_limit:  # MAX_RECURSION_LIMIT: lower is kept
        config["recursion_limit"] = min(int(config.get("recursion_limit") or ceiling), ceiling)
    # A factory's graph is made for this run, with its config and user, and its context
    # exited when the run stops, whichever way (ADR 0018). A plain graph: no work here.
    opened = assistant.opened(
        "threads.create_run",
        config,
        user=config["configurable"].get("langgraph_auth_user"),
        store=store,
        context=kwargs.get("context"),
    )
    async with opened as graph:
        if store is not None:
            graph = graph.copy(update={"store": store})  # ~14 µs
        return await _stream_run(run, graph, input_, config, held, events, quota, timeout_seconds)


async def _stream_run(
    run: RunRecord,
    graph: Any,
    input_: Any,
    config: dict[str, Any],
    held: HeldLease,
    events: EventLog,
    quota: QuotaSettings,
    timeout_seconds: float | None,
) -> tuple[str, str, bytes]:
    """The graph's stream of one attempt into ``events``, and how the run ended."""
    kwargs = run.kwargs
    requested = list(kwargs.get("stream_mode") or ["values"])
    emit = Emitter(events, requested, quota.max_events_per_run)  # "metadata" went with "running"
    deadline = asyncio.timeout(timeout_seconds)
    try:
        try:
            async with deadline:
                async for part in stream_graph(graph, input_, config, kwargs, requested):
                    if held.lost.is_set():
                        raise FencedError(run.thread_id)
                    await emit.part(*part)
        except TimeoutError:
            if not deadline.expired():
                raise  # the graph's own TimeoutError: an error like any other
            # Ran longer than allowed: stopped like a cancel (what was checkpointed stays).
            error = {
                "error": "TimeoutError",
                "message": f"the run took longer than {timeout_seconds:g} s",
            }
            await emit("error", error)
            await close_open_tool_calls(graph, run.thread_id, held.token)
            return (
                "timeout",
                "interrupted" if emit.interrupts else "idle",
                wire.dumps({"__error__": error}),
            )
    except (FencedError, asyncio.CancelledError, *store_failures()):
        raise
    except Exception as exc:
        log.warning("run raised", extra={"run_id": run.run_id, "error": type(exc).__name__}, exc_info=True)
        error = wire.error_body(exc)
        await emit("error", error)
        return "error", "error", wire.dumps({"__error__": error})
    if emit.last_values is None:  # no step ran: nothing streamed, read what is stored
        state = await graph.aget_state(thread_config(run.thread_id))
        values, interrupts, paused = state.values, list(state.interrupts), bool(state.next)
    else:
        # The stream already said it all: the last values, and an "__interrupt__" update at
        # an interrupt or a breakpoint (empty then). Saves a state read per run.
        values, interrupts, paused = emit.last_values, emit.interrupts, emit.paused
    result = dict(values) if isinstance(values, dict) else {"__root__": values}
    if interrupts:
        result["__interrupt__"] = list(interrupts)  # whole, as langgraph-api answers a run's wait
    return "success", "interrupted" if paused or interrupts else "idle", wire.dumps(result)


async def settle_stopped_run(
    lease: TurnLease, run: RunRecord, assistant: Assistant, action: str
) -> tuple[str, str, bytes]:
    """Settle a stopped run and return its end as langgraph-api 0.16 records one: the run
    ``interrupted`` with no ``error`` event (a cancel is not a failure: the JS SDK's
    ``runs.wait`` would throw and ``useStream`` call ``onError``), its result the thread's
    values (what ``join``/``wait`` answer), the thread ``interrupted`` when its state has
    a next step (stopped mid-run) and ``idle`` when not (rolled back, or stopped at the end).

    Settled means left in a state the next run can continue, under the thread's lease (no
    other run or turn writes meanwhile): ``rollback`` deletes every checkpoint and pending
    write the run wrote (the thread is as before the run); ``interrupt`` keeps what it
    checkpointed and closes the tool calls it left open."""
    graph = assistant.graph

    async def settle(_retry: int) -> Any:
        while True:
            try:
                async with lease.hold(run.thread_id) as held:
                    if action == "rollback":
                        await delete_for_runs(graph.checkpointer, run.thread_id, [run.run_id])
                    else:
                        await close_open_tool_calls(graph, run.thread_id, held.token)
                    return await graph.aget_state(thread_config(run.thread_id))
            except LeaseBusy:
                continue  # its dead or paused executor's lease: wait until it expires

    # A Redis restart is waited out, as in a run's own steps: recording the run's end
    # meanwhile would contradict the accepted cancel.
    state = await through_store_failures(run.run_id, "settling a cancelled run; trying again", settle)
    return "interrupted", "interrupted" if state.next else "idle", values_result(state)
