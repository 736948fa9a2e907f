"""``/store``: the long-term memory items of the caller (put, get, delete, search, namespaces),
as langgraph-api serves them and both SDKs call them.

Each request sees the caller's :class:`~threadline.store.tenant.TenantStore` (isolation,
quotas); a custom auth ``@auth.on.store`` handler sees the request's value first and may change
its namespace, as on langgraph-api. ``limit`` is at most ``MAX_STORE_RESULTS`` and ``offset`` at
most ``MAX_STORE_SCAN``: what one response holds is bounded by settings, not by the data.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from threadline.api.deps import Authorize, RuntimeDep, StoreDep
from threadline.api.errors import ApiError
from threadline.api.langgraph.bodies import StoreDelete, StoreNamespaces, StorePut, StoreSearch
from threadline.api.openapi import error_responses
from threadline.config import ServerSettings, env_name

router = APIRouter(prefix="/store", tags=["store"])

MAX_RESULTS = env_name(ServerSettings, "max_store_results")
MAX_SCAN = env_name(ServerSettings, "max_store_scan")
# What a search filter may use besides equality (LangGraph's stores).
FILTER_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def _namespace(value: Any, field: str = "namespace") -> tuple[str, ...]:
    """A namespace as a handler left it, checked as the body's was (422 otherwise)."""
    if not isinstance(value, list | tuple) or not all(
        isinstance(label, str) and label and "." not in label and "\x00" not in label for label in value
    ):
        raise ApiError(422, "invalid_request", f"{field}: a list of non-empty labels without periods or NULs")
    return tuple(value)


def _bounded(runtime: RuntimeDep, limit: int, offset: int) -> None:
    server = runtime.settings.server
    if limit > server.max_store_results:
        raise ApiError(422, "invalid_request", f"limit: at most {MAX_RESULTS}={server.max_store_results}")
    if offset > server.max_store_scan:
        raise ApiError(422, "invalid_request", f"offset: at most {MAX_SCAN}={server.max_store_scan}")


def _and(first: dict[str, Any] | None, second: dict[str, Any] | None) -> dict[str, Any] | None:
    """Both equality filters at once; None when they contradict each other (nothing matches)."""
    merged = dict(first or {})
    for key, value in (second or {}).items():
        if key in merged and merged[key] != value:
            return None
        merged[key] = value
    return merged


@router.put("/items", status_code=204, responses=error_responses(403, 413, 422, 429))
async def put_item(body: StorePut, store: StoreDep, authorize: Authorize) -> Response:
    value = {"namespace": tuple(body.namespace), "key": body.key, "value": body.value}
    value |= {"index": body.index, "ttl": body.ttl}
    await authorize.check("store", "put", value)
    await store.aput(
        _namespace(value["namespace"]), value["key"], value["value"], value["index"], ttl=value["ttl"]
    )
    return Response(status_code=204)


@router.get("/items", responses=error_responses(403, 422))
async def get_item(
    store: StoreDep,
    authorize: Authorize,
    key: Annotated[str, Query(min_length=1, max_length=1024)],
    namespace: Annotated[str, Query(max_length=32 * 257)] = "",
    refresh_ttl: bool | None = None,
) -> dict[str, Any] | None:
    """The item, or null (as langgraph-api) when there is none. ``namespace`` is its labels
    joined by ``.``."""
    value = {"namespace": tuple(namespace.split(".")), "key": key, "refresh_ttl": refresh_ttl}
    await authorize.check("store", "get", value)
    item = await store.aget(_namespace(value["namespace"]), value["key"], refresh_ttl=value["refresh_ttl"])
    return None if item is None else item.dict()


@router.delete("/items", status_code=204, responses=error_responses(403, 422))
async def delete_item(body: StoreDelete, store: StoreDep, authorize: Authorize) -> Response:
    value = {"namespace": tuple(body.namespace), "key": body.key}
    await authorize.check("store", "delete", value)
    await store.adelete(_namespace(value["namespace"]), value["key"])
    return Response(status_code=204)


@router.post("/items/search", responses=error_responses(403, 422))
async def search_items(
    body: StoreSearch, store: StoreDep, authorize: Authorize, runtime: RuntimeDep
) -> dict[str, list[dict[str, Any]]]:
    _bounded(runtime, body.limit, body.offset)
    value = body.model_dump()
    value["namespace"] = tuple(value.pop("namespace_prefix") or ())
    only = await authorize.check("store", "search", value)
    filter_ = _and(value["filter"], only)  # type: ignore[arg-type]
    if filter_ is None:
        return {"items": []}
    _bounded(runtime, value["limit"], value["offset"])  # as the handler may have left them
    try:
        items = await store.asearch(
            _namespace(value["namespace"], "namespace_prefix"),
            query=value["query"],
            filter=filter_ or None,
            limit=value["limit"],
            offset=value["offset"],
            refresh_ttl=value["refresh_ttl"],
        )
    except ValueError:  # LangGraph's filter check; its text quotes the client's operator
        raise ApiError(
            422, "invalid_request", f"filter: the operators are {', '.join(FILTER_OPERATORS)}"
        ) from None
    return {"items": [item.dict() for item in items]}


@router.post("/namespaces", responses=error_responses(403, 422))
async def list_namespaces(
    body: StoreNamespaces, store: StoreDep, authorize: Authorize, runtime: RuntimeDep
) -> dict[str, list[list[str]]]:
    _bounded(runtime, body.limit, body.offset)
    value = {"namespace": body.prefix, "suffix": body.suffix, "max_depth": body.max_depth}
    value |= {"limit": body.limit, "offset": body.offset}
    await authorize.check("store", "list_namespaces", value)
    _bounded(runtime, value["limit"], value["offset"])
    prefix, suffix = value["namespace"], value["suffix"]
    found = await store.alist_namespaces(
        prefix=None if prefix is None else _namespace(prefix, "prefix"),
        suffix=None if suffix is None else _namespace(suffix, "suffix"),
        max_depth=value["max_depth"],
        limit=value["limit"],
        offset=value["offset"],
    )
    return {"namespaces": [list(ns) for ns in found]}
