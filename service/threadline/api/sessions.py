"""``/v1/sessions``: trade an API key for a session token; log out."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Response
from pydantic import BaseModel, StrictStr

from threadline.api.deps import RuntimeDep, SessionsDep, bearer_token, unauthenticated
from threadline.api.errors import ApiError
from threadline.api.openapi import error_responses
from threadline.auth import hash_key

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


class SessionIn(BaseModel):
    api_key: StrictStr


class SessionOut(BaseModel):
    session_token: str
    principal: str
    expires_in: int


@router.post("", status_code=201, responses=error_responses(401))
async def create_session(body: SessionIn, runtime: RuntimeDep, sessions: SessionsDep) -> SessionOut:
    """A session for the API key's principal, bound to that key: removing the key from
    ``API_KEYS`` ends it."""
    _no_sessions_with_custom_auth(runtime)
    digest = hash_key(body.api_key)
    principal = runtime.api_keys.owner(digest)
    if principal is None:
        raise ApiError(401, "unauthenticated", "unknown API key")
    token = await sessions.create(principal, digest)
    settings = runtime.settings.session
    return SessionOut(
        session_token=token,
        principal=principal,
        expires_in=min(settings.ttl_seconds, settings.max_lifetime_seconds),
    )


@router.delete("", status_code=204, responses=error_responses(401))
async def delete_session(
    runtime: RuntimeDep, sessions: SessionsDep, authorization: Annotated[str | None, Header()] = None
) -> Response:
    """Log out: the bearer token stops working at once, on every replica."""
    _no_sessions_with_custom_auth(runtime)
    token = bearer_token(authorization)
    if token is None:
        raise unauthenticated("send Authorization: Bearer <session token>")
    if not await sessions.revoke(token):
        raise unauthenticated("unknown or expired session")
    return Response(status_code=204)


def _no_sessions_with_custom_auth(runtime) -> None:
    """With custom auth a bearer token is the identity provider's, handed to its handler: no
    session is minted or ended here."""
    if runtime.custom_auth is not None:
        raise ApiError(
            404,
            "not_found",
            "custom auth is configured (langgraph.json `auth`): send your identity provider's token",
        )
