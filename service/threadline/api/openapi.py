"""The OpenAPI document: every status an operation can answer, each error with the one error
schema (``{"detail", "error": {"code", "message"}}``, :mod:`threadline.api.errors`).

Routes declare the statuses of their own logic (``responses=error_responses(404, 409)``).
What the shared layers add is filled in here for every operation, so routes added later get it
too:

* an operation with a request body: 408 (body too slow), 413 (too large), 422 (invalid);
* an operation that reads credentials (an ``Authorization`` or ``X-API-Key`` header): 401,
  and 503 (session store away); under ``/v1`` also 503 (stores not open, draining);
* every error response of every operation, FastAPI's own 422 included, gets the error schema.

A schemathesis run against a real server holds this true (``tests/integration/test_openapi.py``).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

_DESCRIPTIONS = {
    202: "Accepted (the run is asked to stop)",
    400: "Invalid identifier (/v1), a thread with no graph to write its state through, or both "
    "config.configurable and context",
    401: "Missing or bad credentials",
    403: "Refused by a custom auth handler",
    404: "Not found (or another principal's)",
    408: "The request body did not arrive in time",
    409: "Conflict (thread or assistant exists, thread busy, lease lost, message id reused, no "
    "interrupt, run active, a built-in assistant)",
    413: "Body or content too large, or content empty; a store item past QUOTA_STORE_ITEM_BYTES, "
    "an assistant past QUOTA_ASSISTANT_BYTES",
    422: "Invalid request (the message says why)",
    429: "A quota is exhausted (the message names it)",
    503: "A store is unreachable, the replica is draining or at a limit; retry (Retry-After)",
    504: "The turn took longer than TURN_TIMEOUT_SECONDS",
}
_SCHEMA_REF = {"$ref": "#/components/schemas/ErrorBody"}


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    """Every error answer."""

    detail: str
    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route (``/v1`` and the LangGraph API alike): the statuses its own
    logic answers; every 4xx/5xx gets :class:`ErrorBody` when the document is completed."""
    return {status: {"description": _DESCRIPTIONS[status]} for status in statuses}


# Body models of the routes that read their body themselves (read_by_route): their schemas
# go into the document's components, as FastAPI puts those of body parameters.
_READ_BY_ROUTE: dict[str, type[BaseModel]] = {}


def _header(name: str, title: str) -> dict[str, Any]:
    schema = {"anyOf": [{"type": "string"}, {"type": "null"}], "title": title}
    return {"name": name, "in": "header", "required": False, "schema": schema}


def read_by_route(body: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra=`` of a route that reads its credentials and its ``body`` itself
    (:func:`threadline.api.deps.run_start`): the entries FastAPI would have made of them as
    parameters."""
    _READ_BY_ROUTE[body.__name__] = body
    return {
        "parameters": [_header("authorization", "Authorization"), _header("x-api-key", "X-Api-Key")],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body.__name__}"}}},
        },
        "responses": {"422": {"description": "Validation Error"}},
    }


def _add(responses: dict[str, Any], status: int) -> None:
    responses.setdefault(str(status), {"description": _DESCRIPTIONS[status]})


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` the completed document (built once, then cached)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            routes=app.routes,
        )
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        for model in (ErrorBody, *_READ_BY_ROUTE.values()):
            schemas[model.__name__] = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, schema in schemas[model.__name__].pop("$defs", {}).items():
                schemas.setdefault(name, schema)  # FastAPI's own, where a parameter uses it too
        for path, item in spec.get("paths", {}).items():
            for operation in item.values():
                _complete(path, operation)
        # FastAPI's validation schemas are no longer referenced: our 422 is an ErrorBody.
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def _complete(path: str, operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    headers = {p["name"].lower() for p in operation.get("parameters", []) if p.get("in") == "header"}
    if "requestBody" in operation:
        for status in (408, 413, 422):
            _add(responses, status)
    if headers & {"authorization", "x-api-key"}:
        _add(responses, 401)
        _add(responses, 503)
    if path.startswith("/v1/"):
        _add(responses, 503)
    if any(p.get("in") in ("query", "path") for p in operation.get("parameters", [])):
        _add(responses, 422)
    for status, response in responses.items():
        if status[0] in "45":
            response["content"] = {"application/json": {"schema": _SCHEMA_REF}}
