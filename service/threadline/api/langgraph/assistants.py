"""``/assistants``: the built-in assistant of each served graph and the ones clients create;
their versions, graphs and schemas. Custom auth's ``@auth.on.assistants`` handlers see each
request and may narrow what it reaches by the assistants' metadata (ADR 0013)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from threadline.api.deps import AssistantsDep, Authorize, CallerDep, CronsDep, Principal, StoreDep, ThreadsDep
from threadline.api.langgraph.bodies import (
    AssistantCount,
    AssistantCreate,
    AssistantLatest,
    AssistantPatch,
    AssistantSearch,
    AssistantVersions,
    page_of,
    selected,
)
from threadline.api.openapi import error_responses
from threadline.runs.assistants import Assistant, Assistants
from threadline.runs.errors import NotFound

router = APIRouter(prefix="/assistants", tags=["assistants"])

# Threads of a deleted assistant (``delete_threads``) are found this many at a time.
_DELETE_PAGE = 100


async def _read(authorize: Authorize, assistants: Assistants, principal: str, assistant_id: str) -> Assistant:
    """The assistant, once the custom auth ``assistants.read`` handler let the caller see it.

    Raises:
        NotFound: no such assistant, or one the handler's filter excludes.
    """
    filters = await authorize.check("assistants", "read", {"assistant_id": assistant_id, "metadata": {}})
    return await assistants.get(principal, assistant_id, filters)


async def _searched(
    authorize: Authorize, assistants: Assistants, principal: str, body: AssistantSearch | AssistantCount
) -> list[Assistant]:
    value = {"graph_id": body.graph_id, "metadata": dict(body.metadata or {}), "limit": 0, "offset": 0}
    if isinstance(body, AssistantSearch):
        value.update(limit=body.limit, offset=body.offset)
    filters = await authorize.check("assistants", "search", value)
    return await assistants.search(
        principal, value.get("graph_id"), body.name, value.get("metadata") or None, filters
    )


@router.post("", responses=error_responses(400, 404, 409, 413, 429))
async def create(
    body: AssistantCreate, principal: Principal, authorize: Authorize, assistants: AssistantsDep
) -> dict[str, Any]:
    value = body.model_dump(exclude={"if_exists"})
    value.update(assistant_id=str(body.assistant_id) if body.assistant_id else None)
    value["metadata"] = value["metadata"] or {}
    await authorize.check("assistants", "create", value)
    fields = {k: value.get(k) for k in ("graph_id", "config", "context", "metadata", "name", "description")}
    found = await assistants.create(principal, fields, body.if_exists, value.get("assistant_id"))
    return found.as_dict()


@router.post("/search", responses=error_responses(404))
async def search(
    body: AssistantSearch,
    principal: Principal,
    authorize: Authorize,
    assistants: AssistantsDep,
    response: Response,
) -> list[dict[str, Any]]:
    found = [a.as_dict() for a in await _searched(authorize, assistants, principal, body)]
    key, reverse = body.sort_by or "created_at", body.sort_by is None or body.sort_order == "desc"
    if key in ("name", "graph_id"):  # case-insensitive, as langgraph-api sorts them
        found.sort(key=lambda a: str(a[key] or "").lower(), reverse=reverse)
    else:  # ties keep the graphs' order (langgraph.json's), then creation
        found.sort(key=lambda a: a[key], reverse=reverse)
    return selected(page_of(found, body.offset, body.limit, response.headers), body.select)


@router.post("/count", responses=error_responses(404))
async def count(
    body: AssistantCount, principal: Principal, authorize: Authorize, assistants: AssistantsDep
) -> int:
    return len(await _searched(authorize, assistants, principal, body))


@router.get("/{assistant_id}", responses=error_responses(404))
async def get(
    assistant_id: str, principal: Principal, authorize: Authorize, assistants: AssistantsDep
) -> dict[str, Any]:
    return (await _read(authorize, assistants, principal, assistant_id)).as_dict()


@router.patch("/{assistant_id}", responses=error_responses(400, 404, 409, 413))
async def patch(
    assistant_id: str,
    body: AssistantPatch,
    principal: Principal,
    authorize: Authorize,
    assistants: AssistantsDep,
) -> dict[str, Any]:
    value = {"assistant_id": assistant_id, **body.model_dump()}
    filters = await authorize.check("assistants", "update", value)
    changes = {k: value.get(k) for k in ("graph_id", "config", "context", "metadata", "name", "description")}
    return (await assistants.patch(principal, assistant_id, changes, filters)).as_dict()


@router.delete("/{assistant_id}", status_code=204, responses=error_responses(404, 409))
async def delete(
    assistant_id: str,
    principal: Principal,
    authorize: Authorize,
    assistants: AssistantsDep,
    threads: ThreadsDep,
    crons: CronsDep,
    delete_threads: bool = False,
) -> Response:
    filters = await authorize.check("assistants", "delete", {"assistant_id": assistant_id})
    await assistants.delete(principal, assistant_id, filters)
    await crons.forget(principal, assistant_id=assistant_id)  # as langgraph-api: its crons go too
    if delete_threads:
        # The caller's threads made for it (at most QUOTA_THREADS_PER_PRINCIPAL), a page at a time.
        while page := [
            t["thread_id"]
            async for t in (
                await threads.search(principal, metadata={"assistant_id": assistant_id}, limit=_DELETE_PAGE)
            ).threads
        ]:
            for thread_id in page:
                await threads.delete(principal, thread_id)
    return Response(status_code=204)


@router.post("/{assistant_id}/versions", responses=error_responses(404))
async def versions(
    assistant_id: str,
    body: AssistantVersions,
    principal: Principal,
    authorize: Authorize,
    assistants: AssistantsDep,
) -> list[dict[str, Any]]:
    filters = await authorize.check("assistants", "read", {"assistant_id": assistant_id, "metadata": {}})
    found = await assistants.versions(principal, assistant_id, body.metadata, filters)
    page = found[body.offset : body.offset + body.limit]
    if not page:
        raise NotFound("assistant")  # as langgraph-api answers an empty page
    return page


@router.post("/{assistant_id}/latest", responses=error_responses(404, 409))
async def latest(
    assistant_id: str,
    body: AssistantLatest,
    principal: Principal,
    authorize: Authorize,
    assistants: AssistantsDep,
) -> dict[str, Any]:
    value = {"assistant_id": assistant_id, "version": body.version}
    filters = await authorize.check("assistants", "update", value)
    return (await assistants.set_latest(principal, assistant_id, body.version, filters)).as_dict()


@router.get("/{assistant_id}/graph", responses=error_responses(404))
async def graph(
    assistant_id: str,
    caller: CallerDep,
    authorize: Authorize,
    assistants: AssistantsDep,
    store: StoreDep,
    xray: Annotated[str, Query(pattern=r"^(true|false|True|False|[1-9][0-9]{0,2})$")] = "false",
) -> dict[str, Any]:
    depth: bool | int = xray.lower() == "true" if not xray.isdigit() else int(xray)
    found = await _read(authorize, assistants, caller.identity, assistant_id)
    return await assistants.graph_json(found, depth, caller.user, store)


@router.get("/{assistant_id}/schemas", responses=error_responses(404))
async def schemas(
    assistant_id: str, caller: CallerDep, authorize: Authorize, assistants: AssistantsDep, store: StoreDep
) -> dict[str, Any]:
    found = await _read(authorize, assistants, caller.identity, assistant_id)
    return await assistants.schemas(found, caller.user, store)


@router.get("/{assistant_id}/subgraphs", responses=error_responses(404))
@router.get("/{assistant_id}/subgraphs/{namespace}", responses=error_responses(404))
async def subgraphs(
    assistant_id: str,
    caller: CallerDep,
    authorize: Authorize,
    assistants: AssistantsDep,
    store: StoreDep,
    namespace: str | None = None,
    recurse: bool = False,
) -> dict[str, Any]:
    found = await _read(authorize, assistants, caller.identity, assistant_id)
    return await assistants.subgraphs(found, namespace, recurse, caller.user, store)
