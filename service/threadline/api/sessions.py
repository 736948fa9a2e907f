"""``/v1/sessions``: trade an API key for a session token."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, StrictStr

from threadline.api.deps import RuntimeDep, SessionsDep
from threadline.api.errors import ApiError

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


class SessionIn(BaseModel):
    api_key: StrictStr


class SessionOut(BaseModel):
    session_token: str
    principal: str
    expires_in: int


@router.post("", status_code=201)
async def create_session(body: SessionIn, runtime: RuntimeDep, sessions: SessionsDep) -> SessionOut:
    principal = runtime.api_keys.principal(body.api_key)
    if principal is None:
        raise ApiError(401, "unauthenticated", "unknown API key")
    token = await sessions.create(principal)
    return SessionOut(
        session_token=token, principal=principal, expires_in=runtime.settings.session.ttl_seconds
    )
