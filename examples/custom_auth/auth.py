"""Custom auth for threadline (or ``langgraph dev``): end users sign in with your identity
provider, and each of them sees only their own threads.

``authenticate`` validates the ``Authorization: Bearer <JWT>`` the JS SDK or ``useStream``
sends: signed RS256 by a key of the provider's JWKS, not expired, for this audience and issuer.
The JWT's ``sub`` becomes the user's identity (threadline's principal: thread and run owner,
quota tenant), its ``scope`` the permissions.

The ``@auth.on`` handlers stamp every thread (and run) with ``owner`` metadata and return the
filter ``{"owner": <identity>}``, which the server applies to every read and search.

Settings, from the environment (the chart sets them from a Secret, ``auth.existingSecret``):

* ``AUTH_JWKS`` — the provider's JWKS: an ``https://…/.well-known/jwks.json`` URL (fetched
  when a token names a key not seen yet; keys kept ``AUTH_JWKS_CACHE_SECONDS``, 300 s) or
  the path of a JWKS file;
* ``AUTH_ISSUER`` — the ``iss`` tokens must carry (unset: not checked);
* ``AUTH_AUDIENCE`` — the ``aud`` tokens must carry (unset: not checked).

Needs PyJWT with its crypto extra: ``pip install "pyjwt[crypto]"`` in the image
(``Dockerfile`` here) or ``uv pip install "pyjwt[crypto]"`` next to ``langgraph dev``.
"""

import json
import os
from pathlib import Path

import jwt
from langgraph_sdk import Auth

JWKS = os.environ.get("AUTH_JWKS", "")
ISSUER = os.environ.get("AUTH_ISSUER") or None
AUDIENCE = os.environ.get("AUTH_AUDIENCE") or None
CACHE_SECONDS = int(os.environ.get("AUTH_JWKS_CACHE_SECONDS", "300"))
if not JWKS:
    raise RuntimeError("AUTH_JWKS: set it to your identity provider's JWKS URL or a JWKS file")

auth = Auth()

if JWKS.startswith(("https://", "http://")):
    _client = jwt.PyJWKClient(JWKS, cache_keys=True, lifespan=CACHE_SECONDS, timeout=5)

    def _key(token: str) -> jwt.PyJWK:
        return _client.get_signing_key_from_jwt(token)

else:
    _keys = jwt.PyJWKSet.from_dict(json.loads(Path(JWKS).read_text()))

    def _key(token: str) -> jwt.PyJWK:
        kid = jwt.get_unverified_header(token).get("kid")
        for key in _keys.keys:
            if key.key_id == kid:
                return key
        raise jwt.InvalidKeyError("unknown key id")


# A plain `def`: fetching the JWKS blocks, so the server runs it on a thread of its own.
@auth.authenticate
def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Auth.exceptions.HTTPException(401, "send Authorization: Bearer <token>")
    try:
        claims = jwt.decode(
            token,
            _key(token),
            algorithms=["RS256"],
            audience=AUDIENCE,
            issuer=ISSUER,
            options={"require": ["exp", "sub"], "verify_aud": AUDIENCE is not None},
        )
    except jwt.ExpiredSignatureError:
        raise Auth.exceptions.HTTPException(401, "token expired") from None
    except (jwt.PyJWTError, jwt.PyJWKClientError):
        # Never the token itself, nor the library's text (it may quote the token's parts).
        raise Auth.exceptions.HTTPException(401, "invalid token") from None
    return {
        "identity": claims["sub"],
        "display_name": claims.get("name") or claims["sub"],
        "permissions": claims.get("scope", "").split(),
    }


@auth.on
async def owner_only(ctx: Auth.types.AuthContext, value: dict) -> Auth.types.FilterType:
    """Every thread and run carries its owner; reads and searches see the caller's alone."""
    owner = {"owner": ctx.user.identity}
    metadata = value.setdefault("metadata", {})
    if isinstance(metadata, dict):
        metadata.update(owner)
    return owner


@auth.on.assistants
async def assistants_for_everyone(ctx: Auth.types.AuthContext, value: dict) -> None:
    """The deployment's graphs are everyone's."""
    return None


@auth.on.store
async def own_namespace(ctx: Auth.types.AuthContext, value: dict) -> None:
    """Each user's store items live under a namespace starting with their identity."""
    namespace = tuple(value.get("namespace") or ())
    if namespace[:1] != (ctx.user.identity,):
        value["namespace"] = (ctx.user.identity, *namespace)
