"""``/runs/crons`` and ``/threads/{id}/runs/crons``: runs on a schedule (ADR 0019). Custom
auth's ``@auth.on.crons`` handlers see each request and may narrow what it reaches by the
crons' metadata (ADR 0013); creating one also reads its assistant (and thread) as the caller."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Response

from threadline.api.deps import Authorize, CallerDep, CronsDep, Principal, RuntimeDep, ThreadId, ThreadsDep
from threadline.api.errors import ApiError
from threadline.api.langgraph.bodies import (
    CronCount,
    CronCreate,
    CronPatch,
    CronSearch,
    ThreadCronCreate,
    page_of,
    selected,
)
from threadline.api.openapi import error_responses
from threadline.runs.crons import Crons
from threadline.runtime import Runtime

router = APIRouter(tags=["crons"])


def _cron_id(cron_id: str) -> str:
    try:
        return str(uuid.UUID(cron_id))
    except ValueError:
        raise ApiError(422, "invalid_cron_id", "Invalid cron ID: must be a UUID") from None


async def _check_webhook(runtime: Runtime, fields: dict[str, Any]) -> None:
    """A 422 naming why a cron's webhook URL may not be called (as on runs)."""
    if fields.get("webhook") is not None:
        assert runtime.webhooks is not None  # the crons are there: so are the webhooks
        await runtime.webhooks.check(fields["webhook"])


async def _create(
    authorize: Authorize,
    caller: CallerDep,
    crons: Crons,
    thread_id: str | None,
    fields: dict[str, Any],
    runtime: Runtime,
) -> dict[str, Any]:
    await _check_webhook(runtime, fields)
    value = {
        "payload": fields,
        "schedule": fields["schedule"],
        "cron_id": None,
        "thread_id": thread_id,
        "user_id": caller.identity,
        "end_time": fields.get("end_time"),
        "metadata": dict(fields.get("metadata") or {}),
    }
    await authorize.check("crons", "create", value)
    fields["metadata"] = value.get("metadata") or {}
    assistant_filters = await authorize.check(
        "assistants", "read", {"assistant_id": fields["assistant_id"], "metadata": {}}
    )
    return await crons.create(caller.identity, thread_id, fields, caller.as_json(), assistant_filters)


@router.post("/runs/crons", responses=error_responses(404, 429))
async def create(
    body: CronCreate, caller: CallerDep, authorize: Authorize, crons: CronsDep, runtime: RuntimeDep
) -> dict[str, Any]:
    return await _create(authorize, caller, crons, None, body.fields(), runtime)


@router.post("/threads/{thread_id}/runs/crons", responses=error_responses(404, 429))
async def create_for_thread(
    thread_id: ThreadId,
    body: ThreadCronCreate,
    caller: CallerDep,
    authorize: Authorize,
    crons: CronsDep,
    threads: ThreadsDep,
    runtime: RuntimeDep,
) -> dict[str, Any]:
    await authorize("threads", "read", {"thread_id": thread_id})
    await threads.record(caller.identity, thread_id)  # NotFound: not the caller's (or filtered)
    return await _create(authorize, caller, crons, thread_id, body.fields(), runtime)


async def _searched(
    authorize: Authorize, crons: Crons, principal: str, body: CronSearch | CronCount
) -> list[dict[str, Any]]:
    value: dict[str, Any] = {
        "assistant_id": str(body.assistant_id) if body.assistant_id else None,
        "thread_id": str(body.thread_id) if body.thread_id else None,
        "limit": getattr(body, "limit", 0),
        "offset": getattr(body, "offset", 0),
        "metadata": dict(body.metadata or {}),
    }
    filters = await authorize.check("crons", "search", value)
    return await crons.search(
        principal,
        value["assistant_id"],
        value["thread_id"],
        getattr(body, "enabled", None),
        value.get("metadata") or None,
        filters,
    )


@router.post("/runs/crons/search")
async def search(
    body: CronSearch, principal: Principal, authorize: Authorize, crons: CronsDep, response: Response
) -> list[dict[str, Any]]:
    found = await _searched(authorize, crons, principal, body)
    key = body.sort_by
    if key in ("cron_id", "assistant_id", "thread_id"):
        found.sort(key=lambda c: str(c[key] or "").lower(), reverse=body.sort_order == "desc")
    else:  # no date sorts first ascending, as langgraph-api's datetime.min
        found.sort(key=lambda c: (c[key] is not None, _when(c[key])), reverse=body.sort_order == "desc")
    return selected(page_of(found, body.offset, body.limit, response.headers), body.select)


def _when(value: str | None) -> datetime:
    return datetime.fromisoformat(value) if value else datetime.min.replace(tzinfo=UTC)


@router.post("/runs/crons/count")
async def count(body: CronCount, principal: Principal, authorize: Authorize, crons: CronsDep) -> int:
    return len(await _searched(authorize, crons, principal, body))


@router.get("/runs/crons/{cron_id}", responses=error_responses(404))
async def get(cron_id: str, principal: Principal, authorize: Authorize, crons: CronsDep) -> dict[str, Any]:
    cron_id = _cron_id(cron_id)
    filters = await authorize.check("crons", "read", {"cron_id": cron_id})
    return await crons.get(principal, cron_id, filters)


@router.patch("/runs/crons/{cron_id}", responses=error_responses(400, 404, 409))
async def patch(
    cron_id: str,
    body: CronPatch,
    principal: Principal,
    authorize: Authorize,
    crons: CronsDep,
    runtime: RuntimeDep,
) -> dict[str, Any]:
    cron_id = _cron_id(cron_id)
    sent = body.fields()
    await _check_webhook(runtime, sent)
    if not sent:
        raise ApiError(400, "empty_body", "Request body cannot be empty")
    # null is "unchanged", as langgraph-api reads it, but for end_time (null clears it).
    changes = {k: v for k, v in sent.items() if v is not None or k == "end_time"}
    if not changes:
        raise ApiError(400, "no_changes", "No fields to update")
    value = {
        "cron_id": cron_id,
        "schedule": changes.get("schedule"),
        "end_time": changes.get("end_time"),
        "enabled": changes.get("enabled"),
        "on_run_completed": changes.get("on_run_completed"),
        "payload": changes,
    }
    if "metadata" in changes:
        value["metadata"] = changes["metadata"]
    filters = await authorize.check("crons", "update", value)
    return await crons.patch(principal, cron_id, changes, filters)


@router.delete("/runs/crons/{cron_id}", status_code=204, responses=error_responses(404))
async def delete(cron_id: str, principal: Principal, authorize: Authorize, crons: CronsDep) -> Response:
    cron_id = _cron_id(cron_id)
    filters = await authorize.check("crons", "delete", {"cron_id": cron_id})
    await crons.delete(principal, cron_id, filters)
    return Response(status_code=204)
