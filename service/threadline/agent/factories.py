"""Graph factories (ADR 0018): telling a factory apart by its signature, calling and entering
it, binding the graph it makes, and the ``ServerRuntime`` it gets. Reading ``langgraph.json``
and importing its graphs is :mod:`threadline.agent.registry`'s.

A graph ``langgraph.json`` names may be a factory, as langgraph-api accepts them: a callable
taking nothing, a ``RunnableConfig``, a ``ServerRuntime`` (``langgraph_sdk.runtime``, told apart
by its annotation), or both (by keyword), sync or async, returning a graph or being a (sync or
async) context manager that yields one. A factory is called for every run, with the run's
config (:class:`GraphFactory`, entered and exited around the run by the executor), and for the
assistant's schema and drawing. At start-up each factory is called once, with
``{"configurable": {}}`` and a read runtime (``assistants.read``, no user, an empty store), and
its context exited at once: a factory that fails or makes no graph stops start-up, and the
graph it made serves what needs only the graph's shape (input keys, thread state reads and
updates).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import inspect
import typing
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel
from langgraph.store.memory import InMemoryStore
from langgraph_sdk.runtime import ServerRuntime, _ExecutionRuntime, _ReadRuntime

from threadline.config import ConfigError

AccessContext = Literal["threads.create_run", "threads.update", "threads.read", "assistants.read"]
"""Why a factory is called (``ServerRuntime.access_context``), as langgraph-api names it."""

# The config a factory gets at start-up (langgraph-api hands factories a RunnableConfig).
START_CONFIG: dict[str, Any] = {"configurable": {}}


def server_runtime(
    access_context: AccessContext, store: Any, user: Any = None, context: Any = None
) -> ServerRuntime:
    """The ``ServerRuntime`` a factory gets, as langgraph-api builds it: the execution variant
    (with the run's ``context``) for a run, the read variant for anything else."""
    if access_context == "threads.create_run":
        # copy.copy, as langgraph-api: a dict is not shared with the run, a dataclass kept.
        kept = copy.copy(context) if context is not None else None
        return _ExecutionRuntime(access_context=access_context, user=user, store=store, context=kept)
    return _ReadRuntime(access_context=access_context, user=user, store=store)


@dataclass(frozen=True)
class GraphFactory:
    """A graph factory of ``langgraph.json``, called for every run and schema read (:meth:`open`)."""

    graph_id: str
    make: Callable[..., Any]
    arguments: Callable[[dict[str, Any], ServerRuntime], dict[str, Any]]
    """The keyword arguments ``make`` takes, of a config and a runtime (:func:`classified`)."""
    graph: Pregel | StateGraph | None = None
    """What it made at start-up: the graph's shape (input keys, state reads and updates)."""
    checkpointer: BaseCheckpointSaver | None = None
    """Attached by :func:`bind_factories` to every graph :meth:`open` yields."""

    @contextlib.asynccontextmanager
    async def open(self, config: dict[str, Any], runtime: ServerRuntime) -> AsyncIterator[Pregel]:
        """Call the factory with ``config`` and ``runtime``; yield its graph bound to the
        checkpointer. A context it returns is entered here and exited when this exits,
        whichever way (the run ended, failed, was cancelled, lost its lease, the replica
        stops), as ``async with`` does."""
        async with _entered(self.make(**self.arguments(config, runtime))) as made:
            if not isinstance(made, (Pregel, StateGraph)):
                raise TypeError(f"graph factory {self.graph_id!r} made a {type(made).__name__}, not a graph")
            yield bound_graph(self.graph_id, made, self.checkpointer)


@contextlib.asynccontextmanager
async def _entered(value: Any) -> AsyncIterator[Any]:
    """A factory's result as a graph: an async or sync context manager entered, a coroutine
    awaited, anything else as is (langgraph-api's ``as_asynccontextmanager``)."""
    if hasattr(value, "__aenter__") and hasattr(value, "__aexit__"):
        async with value as made:
            yield made
    elif hasattr(value, "__enter__") and hasattr(value, "__exit__"):
        with value as made:
            yield made
    elif inspect.isawaitable(value):
        yield await value
    else:
        yield value


async def made_at_start(factory: GraphFactory) -> object:
    """What ``factory`` makes with the start-up config and a read runtime (its context exited)."""
    runtime = server_runtime("assistants.read", InMemoryStore())
    async with _entered(factory.make(**factory.arguments(copy.deepcopy(START_CONFIG), runtime))) as made:
        return made


def bound_graph(
    graph_id: str, graph: Pregel | StateGraph, checkpointer: BaseCheckpointSaver | None
) -> Pregel:
    """``graph`` compiled (a ``StateGraph``) or copied with ``checkpointer``, named."""
    if isinstance(graph, StateGraph):
        return graph.compile(checkpointer=checkpointer, name=graph_id)
    # A graph compiled without a name is called "LangGraph": name it after its id, as
    # langgraph-api does, so runs and traces say which graph they are.
    name = graph_id if graph.name == "LangGraph" else graph.name
    return graph.copy(update={"checkpointer": checkpointer, "name": name})


def is_factory(value: object) -> bool:
    return callable(value) and not isinstance(value, (Pregel, StateGraph))


# How a factory's annotations are resolved: ServerRuntime may be imported under TYPE_CHECKING.
_HINT_NAMES: dict[str, Any] = {"ServerRuntime": ServerRuntime, "RunnableConfig": dict, "Config": dict}


def classified(factory: Callable[..., Any]) -> Callable[[dict[str, Any], ServerRuntime], dict[str, Any]]:
    """How to call ``factory``, decided by its parameters as langgraph-api decides it: none;
    one (a ``ServerRuntime`` if annotated so, else the config); or two, one annotated
    ``ServerRuntime`` and the other the config, by keyword.

    Raises:
        ConfigError: more than two parameters, or two without exactly one ``ServerRuntime``.
    """
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: call it bare
        return lambda config, runtime: {}
    try:
        hints = typing.get_type_hints(factory, localns=_HINT_NAMES)
    except Exception:  # an annotation that does not resolve: taken for a config
        hints = {}
    runtime_at = [i for i, p in enumerate(parameters) if _is_runtime(hints.get(p.name, p.annotation))]
    if not parameters:
        return lambda config, runtime: {}
    if len(parameters) == 1:
        name = parameters[0].name
        if runtime_at:
            return lambda config, runtime: {name: runtime}
        return lambda config, runtime: {name: config}
    if len(parameters) == 2 and len(runtime_at) == 1:
        runtime_name = parameters[runtime_at[0]].name
        config_name = parameters[1 - runtime_at[0]].name
        return lambda config, runtime: {runtime_name: runtime, config_name: config}
    raise ConfigError(
        "a graph factory takes nothing, a RunnableConfig, a ServerRuntime, or a RunnableConfig "
        f"and a ServerRuntime (annotated so); this one takes {[p.name for p in parameters]}"
    )


def _is_runtime(annotation: Any) -> bool:
    """Whether an annotation is ``ServerRuntime`` (also parameterised, ``Annotated``, or one
    of its two classes)."""
    if annotation is inspect.Parameter.empty:
        return False
    if annotation is ServerRuntime:
        return True
    if isinstance(annotation, type):
        return issubclass(annotation, (_ExecutionRuntime, _ReadRuntime))
    if typing.get_origin(annotation) is not None:
        if typing.get_origin(annotation) is ServerRuntime:
            return True
        arguments = typing.get_args(annotation)
        return bool(arguments) and _is_runtime(arguments[0])
    return False


def run_sync(awaitable: Awaitable[Any]) -> Any:
    """Await an async factory's result from sync code, inside a running loop or not."""

    async def wait() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    # Called from the app's loop (start-up): run the factory on a loop of its own in a thread.
    # The graph it returns is loop-independent; a client it opens and keeps is bound to that
    # short-lived loop (runs call the factory again, on the app's loop).
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="graph-factory") as pool:
        return pool.submit(asyncio.run, wait()).result()
