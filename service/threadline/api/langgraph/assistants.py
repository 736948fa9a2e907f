"""``/assistants``: one assistant per served graph (read-only: they come from the config)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from threadline import access
from threadline.api.deps import AssistantsDep, Authorize, Principal
from threadline.api.errors import ApiError
from threadline.api.langgraph.bodies import AssistantCount, AssistantSearch, selected
from threadline.api.openapi import error_responses
from threadline.runs.assistants import Assistant, Assistants
from threadline.runs.errors import NotFound

router = APIRouter(prefix="/assistants", tags=["assistants"])

READ_ONLY = (
    "assistants are the graphs of the deployment's langgraph.json; they cannot be changed through the API"
)


# What the served graphs' assistants carry as metadata, which custom auth filters read.
SYSTEM_METADATA = {"created_by": "system"}


async def _read(authorize: Authorize, assistants: Assistants, assistant_id: str) -> Assistant:
    """The assistant, once the custom auth ``assistants.read`` handler let the caller see it.

    Raises:
        NotFound: no such assistant, or one the handler's filter excludes.
    """
    filters = await authorize.check("assistants", "read", {"assistant_id": assistant_id, "metadata": {}})
    assistant = assistants.get(assistant_id)
    if not access.matches(SYSTEM_METADATA, filters):
        raise NotFound("assistant")
    return assistant


async def _searched(
    authorize: Authorize, assistants: Assistants, body: AssistantSearch | AssistantCount
) -> list[Assistant]:
    value = {"graph_id": body.graph_id, "metadata": dict(body.metadata or {}), "limit": 0, "offset": 0}
    if isinstance(body, AssistantSearch):
        value.update(limit=body.limit, offset=body.offset)
    filters = await authorize.check("assistants", "search", value)
    if not access.matches(SYSTEM_METADATA, filters):
        return []
    return assistants.search(value.get("graph_id"), body.name, value.get("metadata") or None)


@router.post("/search")
async def search(
    body: AssistantSearch, authorize: Authorize, assistants: AssistantsDep
) -> list[dict[str, Any]]:
    found = [assistants.as_dict(a) for a in await _searched(authorize, assistants, body)]
    # Every assistant has the same times: ties keep the graphs' order (langgraph.json's).
    found.sort(key=lambda a: a[body.sort_by], reverse=body.sort_order == "desc")
    return selected(found[body.offset : body.offset + body.limit], body.select)


@router.post("/count")
async def count(body: AssistantCount, authorize: Authorize, assistants: AssistantsDep) -> int:
    return len(await _searched(authorize, assistants, body))


@router.get("/{assistant_id}", responses=error_responses(404))
async def get(assistant_id: str, authorize: Authorize, assistants: AssistantsDep) -> dict[str, Any]:
    return assistants.as_dict(await _read(authorize, assistants, assistant_id))


@router.get("/{assistant_id}/graph", responses=error_responses(404))
async def graph(
    assistant_id: str,
    authorize: Authorize,
    assistants: AssistantsDep,
    xray: Annotated[str, Query(pattern=r"^(true|false|True|False|[1-9][0-9]{0,2})$")] = "false",
) -> dict[str, Any]:
    depth: bool | int = xray.lower() == "true" if not xray.isdigit() else int(xray)
    return await assistants.graph_json(await _read(authorize, assistants, assistant_id), depth)


@router.get("/{assistant_id}/schemas", responses=error_responses(404))
async def schemas(assistant_id: str, authorize: Authorize, assistants: AssistantsDep) -> dict[str, Any]:
    return assistants.schemas(await _read(authorize, assistants, assistant_id))


@router.get("/{assistant_id}/subgraphs", responses=error_responses(404))
@router.get("/{assistant_id}/subgraphs/{namespace}", responses=error_responses(404))
async def subgraphs(
    assistant_id: str,
    authorize: Authorize,
    assistants: AssistantsDep,
    namespace: str | None = None,
    recurse: bool = False,
) -> dict[str, Any]:
    return assistants.subgraphs(await _read(authorize, assistants, assistant_id), namespace, recurse)


@router.post("", responses=error_responses(405))
async def create(_: Principal) -> None:
    raise ApiError(405, "read_only", READ_ONLY)


@router.patch("/{assistant_id}", responses=error_responses(405))
@router.delete("/{assistant_id}", responses=error_responses(405))
@router.post("/{assistant_id}/versions", responses=error_responses(405))
@router.post("/{assistant_id}/latest", responses=error_responses(405))
async def change(assistant_id: str, _: Principal) -> None:
    raise ApiError(405, "read_only", READ_ONLY)
