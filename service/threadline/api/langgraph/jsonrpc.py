"""JSON-RPC 2.0 pieces shared by ``/mcp`` and ``/a2a``: the error codes, an error object, and
the mapping of the runs layer's refusals to one (a refusal is an answer, never a 5xx)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from threadline.api.errors import ApiError, described, quota_error
from threadline.quotas import QuotaExceeded
from threadline.runs.errors import Conflict, Invalid, NotFound

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# What a request's run can be refused with, answered as a JSON-RPC error (INVALID_PARAMS, as
# langgraph-api answers a failed run creation). A store that is away is not among them: that
# stays a 503 with Retry-After, which clients retry.
REFUSALS = (NotFound, Conflict, Invalid, QuotaExceeded, ApiError, ValidationError)


def body_doc(description: str, example: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of a JSON-RPC route (its body is read by hand, not a model)."""
    schema = {"type": "object", "description": description}
    content = {"application/json": {"schema": schema, "example": example}}
    return {"requestBody": {"required": True, "content": content}}


def reraise_unavailable(exc: Exception) -> None:
    """Re-raise one of :data:`REFUSALS` that is no refusal: an ``ApiError`` of 5xx (a custom auth
    handler that timed out) stays an HTTP 503 with ``Retry-After``, which clients retry."""
    if isinstance(exc, ApiError) and exc.status >= 500:
        raise exc


def error(code: int, message: str, data: Any = None) -> dict[str, Any]:
    """``{"error": {...}}``, merged into a response beside ``jsonrpc`` and ``id``."""
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"error": body}


def refusal(exc: Exception) -> dict[str, Any]:
    """The JSON-RPC error for one of :data:`REFUSALS` (its message is ours, never the text of
    an arbitrary exception)."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return error(INVALID_PARAMS, f"{where}: {first.get('msg', 'invalid')}")
    if isinstance(exc, QuotaExceeded):
        exc = quota_error(exc)
    if isinstance(exc, ApiError):
        return error(INVALID_PARAMS, exc.message, {"status": exc.status, "code": exc.code})
    status, code, message = described(exc) or (422, "invalid_request", "invalid request")
    return error(INVALID_PARAMS, message, {"status": status, "code": code})
