"""``/threads``: create (with ``ttl`` and ``supersteps``), read (``include=ttl``), update,
delete, prune, search, count, copy; storage; state and history."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from threadline import access
from threadline.api.deps import Authorize, CronsDep, Principal, ThreadId, ThreadsDep, ThreadUpkeepDep
from threadline.api.langgraph.bodies import (
    HistoryQuery,
    StateAt,
    StateUpdate,
    ThreadCount,
    ThreadCreate,
    ThreadPatch,
    ThreadPrune,
    ThreadSearch,
    paging_headers,
)
from threadline.api.openapi import error_responses
from threadline.runs import wire

router = APIRouter(prefix="/threads", tags=["threads"])


async def _json_array(items: AsyncIterator[dict[str, Any]], select: list[str] | None = None) -> Response:
    """``items`` as one JSON array, encoded and sent one item at a time, so a request holds one
    thread's state at once however long its page (``limit`` up to 1000). The first item is read
    before the status is sent: a store that fails at once is a 503, not a cut 200."""
    first = await anext(items, None)

    def encoded(item: dict[str, Any]) -> bytes:
        return wire.dumps({k: item[k] for k in select if k in item} if select else item)

    async def body() -> AsyncIterator[bytes]:
        if first is None:
            yield b"[]"
            return
        yield b"[" + encoded(first)
        async for item in items:
            yield b"," + encoded(item)
        yield b"]"

    return StreamingResponse(body(), media_type="application/json")


async def _search_query(authorize: Authorize, body: ThreadSearch | ThreadCount) -> dict[str, Any]:
    """The search, once the custom auth ``threads.search`` handler saw it (and maybe narrowed it)."""
    query = body.model_dump(exclude={"select"})
    query.update(metadata=query["metadata"] or {}, values=query["values"] or {})
    value = await authorize("threads", "search", dict(query))
    return {key: value.get(key, query[key]) for key in query}


class PruneResult(BaseModel):
    pruned_count: int


@router.post("", responses=error_responses(400, 404, 409, 413, 429))  # 400: supersteps, no graph_id
async def create(
    body: ThreadCreate, principal: Principal, authorize: Authorize, threads: ThreadsDep
) -> dict[str, Any]:
    thread_id = body.thread_id or str(uuid.uuid4())
    if body.supersteps:
        # Applying them is an update of the thread, as on langgraph-api: asked first, so a
        # refusal stores nothing.
        await authorize("threads", "update", {"thread_id": thread_id, "metadata": dict(body.metadata or {})})
    value = {"thread_id": body.thread_id, "metadata": dict(body.metadata or {}), "if_exists": body.if_exists}
    value = await authorize("threads", "create", value)
    return await threads.create(
        principal,
        thread_id,
        value.get("metadata"),
        body.if_exists,
        ttl=body.ttl.model_dump() if body.ttl else None,
        supersteps=[s.model_dump(exclude_none=True) for s in body.supersteps or []] or None,
    )


@router.post("/prune", responses=error_responses(404, 409))  # 409: a run holds a thread
async def prune(
    body: ThreadPrune, principal: Principal, authorize: Authorize, upkeep: ThreadUpkeepDep
) -> PruneResult:
    """Delete the caller's threads among ``thread_ids`` (``delete``), or drop all but their
    latest checkpoint (``keep_latest``, where the checkpointer can: else 422). Unknown threads
    and other principals' are skipped; with a custom auth filter, one the filter excludes is a
    404 and nothing is pruned (as langgraph-api)."""
    await authorize("threads", "delete", {"thread_ids": list(body.thread_ids)})
    strict = access.current() is not None
    return PruneResult(pruned_count=await upkeep.prune(principal, body.thread_ids, body.strategy, strict))


@router.post("/search", response_model=list[dict[str, Any]])
async def search(
    body: ThreadSearch, principal: Principal, authorize: Authorize, threads: ThreadsDep
) -> Response:
    page = await threads.search(principal, **await _search_query(authorize, body))
    response = await _json_array(page.threads, body.select)
    response.headers.update(paging_headers(body.offset, page.size, page.next_offset))
    return response


@router.post("/count")
async def count(body: ThreadCount, principal: Principal, authorize: Authorize, threads: ThreadsDep) -> int:
    return await threads.count(principal, **await _search_query(authorize, body))


@router.get("/{thread_id}", responses=error_responses(404))
async def get(
    thread_id: ThreadId,
    principal: Principal,
    authorize: Authorize,
    threads: ThreadsDep,
    include: Annotated[
        str | None,
        Query(max_length=256, description="comma-separated extra fields; supported: `ttl`"),
    ] = None,
) -> dict[str, Any]:
    # Other names are ignored, as langgraph-api ignores them.
    fields = {f.strip() for f in (include or "").split(",")}
    await authorize("threads", "read", {"thread_id": thread_id})
    return await threads.get(principal, thread_id, include_ttl="ttl" in fields)


@router.patch("/{thread_id}", responses=error_responses(404, 413, 429))
async def patch(
    thread_id: ThreadId, body: ThreadPatch, principal: Principal, authorize: Authorize, threads: ThreadsDep
) -> dict[str, Any]:
    value = {"thread_id": thread_id, "metadata": dict(body.metadata or {})}
    value = await authorize("threads", "update", value)
    ttl = body.ttl.model_dump() if body.ttl else None
    return await threads.update(principal, thread_id, value.get("metadata"), ttl)


@router.get("/{thread_id}/storage", responses=error_responses(404))
async def storage(
    thread_id: ThreadId, principal: Principal, authorize: Authorize, upkeep: ThreadUpkeepDep
) -> dict[str, Any]:
    """Bytes the thread's checkpoints occupy: checkpoints, channel values (per channel) and
    pending writes, as the checkpointer's serializer encodes them."""
    await authorize("threads", "read", {"thread_id": thread_id})
    return await upkeep.storage(principal, thread_id)


@router.delete("/{thread_id}", status_code=204, responses=error_responses(404, 409))
async def delete(
    thread_id: ThreadId, principal: Principal, authorize: Authorize, threads: ThreadsDep, crons: CronsDep
) -> Response:
    await authorize("threads", "delete", {"thread_id": thread_id})
    await threads.delete(principal, thread_id)
    await crons.forget(principal, thread_id=thread_id)  # as langgraph-api: its crons go with it
    return Response(status_code=204)


@router.post("/{thread_id}/copy", responses=error_responses(404, 409, 429))
async def copy(
    thread_id: ThreadId, principal: Principal, authorize: Authorize, threads: ThreadsDep
) -> dict[str, Any]:
    await authorize("threads", "read", {"thread_id": thread_id})
    return await threads.copy(principal, thread_id)


@router.get("/{thread_id}/state", responses=error_responses(404))
async def state(
    thread_id: ThreadId,
    principal: Principal,
    authorize: Authorize,
    threads: ThreadsDep,
    subgraphs: bool = False,
) -> dict[str, Any]:
    await authorize("threads", "read", {"thread_id": thread_id})
    return await threads.state(principal, thread_id, subgraphs=subgraphs)


@router.post("/{thread_id}/state", responses=error_responses(400, 404, 409, 429))  # 400: no graph yet
async def update_state(
    thread_id: ThreadId, body: StateUpdate, principal: Principal, authorize: Authorize, threads: ThreadsDep
) -> dict[str, Any]:
    await authorize("threads", "update", {"thread_id": thread_id})
    checkpoint = body.checkpoint.model_dump() if body.checkpoint else {}
    if body.checkpoint_id:
        checkpoint["checkpoint_id"] = body.checkpoint_id
    return await threads.update_state(principal, thread_id, body.values, body.as_node, checkpoint or None)


@router.post("/{thread_id}/state/checkpoint", responses=error_responses(404))
async def state_at(
    thread_id: ThreadId, body: StateAt, principal: Principal, authorize: Authorize, threads: ThreadsDep
) -> dict[str, Any]:
    await authorize("threads", "read", {"thread_id": thread_id})
    return await threads.state(principal, thread_id, body.checkpoint.model_dump(), body.subgraphs)


@router.get("/{thread_id}/state/{checkpoint_id}", responses=error_responses(404))
async def state_at_id(
    thread_id: ThreadId,
    checkpoint_id: Annotated[str, Path(max_length=128)],
    principal: Principal,
    authorize: Authorize,
    threads: ThreadsDep,
    subgraphs: bool = False,
) -> dict[str, Any]:
    await authorize("threads", "read", {"thread_id": thread_id})
    return await threads.state(principal, thread_id, {"checkpoint_id": checkpoint_id}, subgraphs)


@router.post("/{thread_id}/history", response_model=list[dict[str, Any]], responses=error_responses(404))
async def history(
    thread_id: ThreadId, body: HistoryQuery, principal: Principal, authorize: Authorize, threads: ThreadsDep
) -> Response:
    await authorize("threads", "read", {"thread_id": thread_id})
    states = await threads.history(
        principal,
        thread_id,
        body.limit,
        body.before.model_dump() if body.before else None,
        body.metadata,
        body.checkpoint.model_dump() if body.checkpoint else None,
    )
    return await _json_array(states)


@router.get("/{thread_id}/history", response_model=list[dict[str, Any]], responses=error_responses(404))
async def history_get(
    thread_id: ThreadId,
    principal: Principal,
    authorize: Authorize,
    threads: ThreadsDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1,  # 1, as langgraph-api answers
    before: str | None = None,
) -> Response:
    await authorize("threads", "read", {"thread_id": thread_id})
    states = await threads.history(principal, thread_id, limit, {"checkpoint_id": before} if before else None)
    return await _json_array(states)
