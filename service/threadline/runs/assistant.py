"""One assistant as a run or a read sees it: a graph with its configuration at one version,
how its graph is opened (ADR 0018), how its config and context apply to a run, and the ids
and times of the built-ins. :class:`~threadline.runs.assistants.Assistants` keeps them.
"""

from __future__ import annotations

import contextlib
import uuid
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from langgraph.graph.state import CompiledStateGraph

from threadline.agent.factories import AccessContext, GraphFactory, server_runtime
from threadline.runs.errors import Invalid

NAMESPACE_GRAPH = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")
# What built-in assistants carry as metadata, which custom auth filters read.
SYSTEM_METADATA = {"created_by": "system"}
# The same on every replica and across restarts: a built-in is the graph, not a record. The
# n-th graph of langgraph.json is n seconds past it, so built-ins sort by time in the order
# langgraph-api gives them (it makes them at start-up, one after another).
BUILTIN_TIME = datetime(1970, 1, 1, tzinfo=UTC)


def synced(
    config: dict[str, Any], context: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Config and context kept in step, as langgraph-api keeps them for an assistant and a
    run: ``configurable`` is the context. Raises Invalid (400, as there) when both are given."""
    config = dict(config)
    if config.get("configurable") and context:
        raise Invalid("config.configurable and context: give context alone (LangGraph 0.6+)", 400)
    if config.get("configurable"):
        context = dict(config["configurable"])
    elif context:
        config["configurable"] = dict(context)
    return config, context


def assistant_id_of(graph_id: str) -> str:
    return str(uuid.uuid5(NAMESPACE_GRAPH, graph_id))


@dataclass(frozen=True)
class Assistant:
    assistant_id: str
    graph_id: str
    graph: CompiledStateGraph
    name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=lambda: dict(SYSTEM_METADATA))
    description: str | None = None
    version: int = 1
    created_at: str = BUILTIN_TIME.isoformat()
    updated_at: str = BUILTIN_TIME.isoformat()
    factory: GraphFactory | None = field(default=None, compare=False, repr=False)
    """The graph's factory, when ``langgraph.json`` names one (``graph`` is then what it made
    at start-up: the graph's shape)."""

    @property
    def builtin(self) -> bool:
        return self.assistant_id == assistant_id_of(self.graph_id)

    def opened(
        self,
        access_context: AccessContext,
        config: dict[str, Any],
        *,
        user: Any = None,
        store: Any = None,
        context: Any = None,
    ) -> AbstractAsyncContextManager[CompiledStateGraph]:
        """The graph to run or read (``async with``): a plain graph as is, with no work per
        call; a factory's made for this call with ``config`` and a ``ServerRuntime`` of
        ``access_context``, ``user``, ``store`` and (a run's) ``context``, its context exited
        when the ``async with`` is."""
        if self.factory is None:
            return contextlib.nullcontext(self.graph)
        runtime = server_runtime(access_context, store, user, context)
        # A copy: what the factory changes in it stays out of the run's own config.
        return self.factory.open({**config, "configurable": dict(config.get("configurable") or {})}, runtime)

    def read_config(self, user: Any = None) -> dict[str, Any]:
        """The config a schema or drawing calls a factory with: the assistant's, with the
        caller's user (as langgraph-api merges the request's auth into it)."""
        configurable = dict(self.config.get("configurable") or {})
        if user is not None:
            configurable.update(langgraph_auth_user=user, langgraph_auth_user_id=user.identity)
        return {**self.config, "configurable": configurable}

    def applied(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A run's kwargs as its graph gets them: the run's config and context in step
        (:func:`synced`; a run that gave both was refused), this assistant's under them (a
        shallow merge, and of ``configurable``, as langgraph-api merges them)."""
        config, context = synced(kwargs.get("config") or {}, kwargs.get("context"))
        configurable = {**(self.config.get("configurable") or {}), **(config.get("configurable") or {})}
        return {
            **kwargs,
            "config": {**self.config, **config, "configurable": configurable},
            "context": {**self.context, **(context or {})},
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "assistant_id": self.assistant_id,
            "graph_id": self.graph_id,
            "name": self.name or self.graph_id,
            "description": self.description,
            "config": self.config,
            "context": self.context,
            "metadata": self.metadata,
            "version": self.version,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
