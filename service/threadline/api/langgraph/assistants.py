"""``/assistants``: one assistant per served graph (read-only: they come from the config)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from threadline.api.deps import AssistantsDep, Principal
from threadline.api.errors import ApiError
from threadline.api.langgraph.bodies import AssistantCount, AssistantSearch, selected
from threadline.api.openapi import error_responses

router = APIRouter(prefix="/assistants", tags=["assistants"])

READ_ONLY = (
    "assistants are the graphs of the deployment's langgraph.json; they cannot be changed through the API"
)


@router.post("/search")
async def search(body: AssistantSearch, _: Principal, assistants: AssistantsDep) -> list[dict[str, Any]]:
    found = [assistants.as_dict(a) for a in assistants.search(body.graph_id, body.name, body.metadata)]
    # Every assistant has the same times: ties keep the graphs' order (langgraph.json's).
    found.sort(key=lambda a: a[body.sort_by], reverse=body.sort_order == "desc")
    return selected(found[body.offset : body.offset + body.limit], body.select)


@router.post("/count")
async def count(body: AssistantCount, _: Principal, assistants: AssistantsDep) -> int:
    return len(assistants.search(body.graph_id, body.name, body.metadata))


@router.get("/{assistant_id}", responses=error_responses(404))
async def get(assistant_id: str, _: Principal, assistants: AssistantsDep) -> dict[str, Any]:
    return assistants.as_dict(assistants.get(assistant_id))


@router.get("/{assistant_id}/graph", responses=error_responses(404))
async def graph(
    assistant_id: str,
    _: Principal,
    assistants: AssistantsDep,
    xray: Annotated[str, Query(pattern=r"^(true|false|True|False|[1-9][0-9]{0,2})$")] = "false",
) -> dict[str, Any]:
    depth: bool | int = xray.lower() == "true" if not xray.isdigit() else int(xray)
    return await assistants.graph_json(assistants.get(assistant_id), depth)


@router.get("/{assistant_id}/schemas", responses=error_responses(404))
async def schemas(assistant_id: str, _: Principal, assistants: AssistantsDep) -> dict[str, Any]:
    return assistants.schemas(assistants.get(assistant_id))


@router.get("/{assistant_id}/subgraphs", responses=error_responses(404))
@router.get("/{assistant_id}/subgraphs/{namespace}", responses=error_responses(404))
async def subgraphs(
    assistant_id: str,
    _: Principal,
    assistants: AssistantsDep,
    namespace: str | None = None,
    recurse: bool = False,
) -> dict[str, Any]:
    return assistants.subgraphs(assistants.get(assistant_id), namespace, recurse)


@router.post("", responses=error_responses(405))
async def create(_: Principal) -> None:
    raise ApiError(405, "read_only", READ_ONLY)


@router.patch("/{assistant_id}", responses=error_responses(405))
@router.delete("/{assistant_id}", responses=error_responses(405))
@router.post("/{assistant_id}/versions", responses=error_responses(405))
@router.post("/{assistant_id}/latest", responses=error_responses(405))
async def change(assistant_id: str, _: Principal) -> None:
    raise ApiError(405, "read_only", READ_ONLY)
