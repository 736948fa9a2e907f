"""A graph's JSON schemas (input, output, state, config, context) and its drawing, as the
assistants routes, MCP and A2A describe a graph; and the keys a graph's input may have."""

from __future__ import annotations

from typing import Any

from langgraph.graph.state import CompiledStateGraph


async def graph_drawing(graph: Any, xray: bool | int) -> dict[str, Any]:
    """A graph's drawing as JSON, without the node ids LangGraph adds to each node's data."""
    drawable = await graph.aget_graph(xray=xray)
    found = drawable.to_json()
    for node in found.get("nodes", []):
        if isinstance(node.get("data"), dict):
            node["data"].pop("id", None)
    return found


def graph_schemas(graph_id: str, graph: Any) -> dict[str, Any]:
    """A graph's input, output, state, config and context JSON schemas."""

    def attempt(make):
        try:
            return make()
        except Exception:  # a schema LangGraph cannot render is reported as absent
            return None

    # pydantic cannot render some state types (typing.TypedDict on Python < 3.12): then the
    # schema still lists the graph's keys, without their types.
    return {
        "graph_id": graph_id,
        "input_schema": attempt(graph.get_input_jsonschema) or _keys_schema("Input", input_keys(graph)),
        "output_schema": attempt(graph.get_output_jsonschema)
        or _keys_schema("Output", graph.output_channels),
        "state_schema": attempt(lambda: _state_schema(graph)) or _keys_schema("State", graph.stream_channels),
        "config_schema": attempt(lambda: graph.get_config_jsonschema()),
        "context_schema": attempt(graph.get_context_jsonschema),
    }


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
