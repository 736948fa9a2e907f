"""Assistants: one per served graph, addressable by graph id or by a stable UUID.

The UUID is ``uuid5(NAMESPACE_GRAPH, graph_id)``, the scheme langgraph-api uses for the
assistant it makes of each graph, so a client that stored an assistant id keeps it across
servers and restarts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from langgraph.graph.state import CompiledStateGraph

from threadline.runs.errors import Invalid, NotFound

NAMESPACE_GRAPH = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")


def assistant_id_of(graph_id: str) -> str:
    return str(uuid.uuid5(NAMESPACE_GRAPH, graph_id))


@dataclass(frozen=True)
class Assistant:
    assistant_id: str
    graph_id: str
    graph: CompiledStateGraph

    def as_dict(self, created_at: str) -> dict[str, Any]:
        return {
            "assistant_id": self.assistant_id,
            "graph_id": self.graph_id,
            "name": self.graph_id,
            "description": None,
            "config": {},
            "context": {},
            "metadata": {"created_by": "system"},
            "version": 1,
            "created_at": created_at,
            "updated_at": created_at,
        }


class Assistants:
    """The served graphs as assistants.

    Args:
        graphs: graph id → graph compiled with threadline's checkpointer.
        default_graph_id: the graph whose state a thread without a ``graph_id`` is read with
            (``/v1`` threads are chat threads).
    """

    def __init__(self, graphs: dict[str, CompiledStateGraph], default_graph_id: str = "chat") -> None:
        if not graphs:
            raise ValueError("at least one graph is needed")
        self._by_graph = {gid: Assistant(assistant_id_of(gid), gid, g) for gid, g in graphs.items()}
        self._by_uuid = {a.assistant_id: a for a in self._by_graph.values()}
        self.default_graph_id = default_graph_id if default_graph_id in graphs else next(iter(graphs))
        # The same on every replica and across restarts: an assistant is the graph, not a record.
        self.created_at = datetime(1970, 1, 1, tzinfo=UTC).isoformat()

    def get(self, assistant_id: str) -> Assistant:
        """By UUID or graph id.

        Raises:
            NotFound: a UUID no assistant has.
            Invalid: neither a UUID nor a graph id (langgraph-api answers that 422, naming
                the graphs).
        """
        found = self._by_uuid.get(assistant_id) or self._by_graph.get(assistant_id)
        if found is None:
            try:
                uuid.UUID(assistant_id)
            except ValueError:
                graphs = ", ".join(self._by_graph)
                raise Invalid(f"assistant_id: neither an assistant UUID nor a graph id ({graphs})") from None
            raise NotFound("assistant")
        return found

    def for_thread(self, metadata: dict[str, Any]) -> Assistant:
        """The assistant whose graph reads a thread with ``metadata`` (its ``graph_id``)."""
        return self._by_graph.get(str(metadata.get("graph_id")), self._by_graph[self.default_graph_id])

    def search(
        self, graph_id: str | None, name: str | None, metadata: dict[str, Any] | None
    ) -> list[Assistant]:
        found = []
        for assistant in self._by_graph.values():
            if graph_id is not None and assistant.graph_id != graph_id:
                continue
            if name is not None and name.lower() not in assistant.graph_id.lower():
                continue
            if metadata and any({"created_by": "system"}.get(k) != v for k, v in metadata.items()):
                continue
            found.append(assistant)
        return found

    def as_dict(self, assistant: Assistant) -> dict[str, Any]:
        return assistant.as_dict(self.created_at)

    @staticmethod
    async def graph_json(assistant: Assistant, xray: bool | int) -> dict[str, Any]:
        drawable = await assistant.graph.aget_graph(xray=xray)
        graph = drawable.to_json()
        for node in graph.get("nodes", []):
            if isinstance(node.get("data"), dict):
                node["data"].pop("id", None)
        return graph

    @staticmethod
    def schemas(assistant: Assistant) -> dict[str, Any]:
        graph = assistant.graph

        def attempt(make):
            try:
                return make()
            except Exception:  # a schema LangGraph cannot render is reported as absent
                return None

        # pydantic cannot render some state types (typing.TypedDict on Python < 3.12): then the
        # schema still lists the graph's keys, without their types.
        return {
            "graph_id": assistant.graph_id,
            "input_schema": attempt(graph.get_input_jsonschema) or _keys_schema("Input", input_keys(graph)),
            "output_schema": attempt(graph.get_output_jsonschema)
            or _keys_schema("Output", graph.output_channels),
            "state_schema": attempt(lambda: _state_schema(graph))
            or _keys_schema("State", graph.stream_channels),
            "config_schema": attempt(lambda: graph.get_config_jsonschema()),
            "context_schema": attempt(graph.get_context_jsonschema),
        }

    def subgraphs(self, assistant: Assistant, namespace: str | None, recurse: bool) -> dict[str, Any]:
        found = {}
        for ns, sub in assistant.graph.get_subgraphs(namespace=namespace, recurse=recurse):
            found[ns] = self.schemas(Assistant(assistant.assistant_id, assistant.graph_id, sub))
        return found


def input_keys(graph: Any) -> list[str] | None:
    """The keys a graph's input may have (its input schema's), or None when any value fits."""
    builder = getattr(graph, "builder", None)
    schemas = getattr(builder, "schemas", None)
    if schemas and getattr(builder, "input_schema", None) in schemas:
        return list(schemas[builder.input_schema])
    channels = graph.input_channels
    return None if isinstance(channels, str) else list(channels)


def _keys_schema(title: str, channels: str | list[str] | None) -> dict[str, Any] | None:
    if not channels or isinstance(channels, str):
        return None
    return {
        "title": title,
        "type": "object",
        "properties": {c: {} for c in channels if not c.startswith("__")},
    }


def _state_schema(graph: CompiledStateGraph) -> dict[str, Any]:
    schema = graph.builder.state_schema if hasattr(graph, "builder") else None
    if schema is None:
        return graph.get_output_jsonschema()
    from pydantic import TypeAdapter

    return TypeAdapter(schema).json_schema()
