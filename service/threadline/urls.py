"""Redis URL repair and redaction.

A Redis URL's password often arrives raw from a secret store: ``/``, ``+``, ``=``, ``@``, ``#``,
``?`` and spaces in it either break parsing (redis-py: "Port could not be cast to integer
value") or silently change the password (a literal ``+`` is not a space, ``%2B`` is ``+``).
:func:`repair_redis_url` percent-encodes the userinfo so redis-py decodes exactly the password
that was meant; :func:`redact` is used wherever a URL could reach a log line or an error.

The ``%XX`` ambiguity: a password containing ``%`` followed by two hex digits could be raw or
already encoded. We read it as already encoded and leave it, because a correctly encoded URL
(what External Secrets' ``urlquery`` produces, e.g. ``%2F``) must come through unchanged, and
that is by far the common case. A raw password that really contains such a sequence must be
encoded by whoever builds the URL (``%`` → ``%25``), or given as ``REDIS_PASSWORD`` on its own,
which needs no encoding at all. A ``%`` not followed by two hex digits is encoded as ``%25``.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote, urlsplit

SCHEMES = ("redis://", "rediss://")

# RFC 3986 unreserved characters: the only ones left as they are inside userinfo.
_SAFE = "-._~"
_PERCENT_TRIPLET = re.compile(r"%[0-9A-Fa-f]{2}")


class RedisURLError(ValueError):
    """A Redis URL cannot be used. The message never contains the URL or its password."""


def _encode_part(raw: str) -> str:
    """Percent-encode ``raw``, keeping existing ``%XX`` sequences (see module docstring)."""
    out: list[str] = []
    pos = 0
    for match in _PERCENT_TRIPLET.finditer(raw):
        out.append(quote(raw[pos : match.start()], safe=_SAFE))
        out.append(match.group(0))  # verbatim: an encoded URL must come back unchanged
        pos = match.end()
    out.append(quote(raw[pos:], safe=_SAFE))
    return "".join(out)


def _split(url: str) -> tuple[str, str | None, str]:
    """Split into (scheme://, userinfo or None, host-and-rest).

    The userinfo ends at the last ``@``: a password may contain ``@ / ? #``, a host cannot.
    """
    scheme = next((s for s in SCHEMES if url.startswith(s)), None)
    if scheme is None:
        raise RedisURLError("must start with redis:// or rediss://")
    rest = url[len(scheme) :]
    userinfo, at, hostpart = rest.rpartition("@")
    return scheme, (userinfo if at else None), (hostpart if at else rest)


def repair_redis_url(url: str) -> str:
    """Return ``url`` with its username and password percent-encoded.

    A correctly encoded URL comes back unchanged. Supports ``redis://`` and ``rediss://``,
    ``user:password@`` and password-only ``:password@`` forms.

    Raises:
        RedisURLError: not a redis URL, or the host, port or db cannot be parsed.
    """
    scheme, userinfo, hostpart = _split(url.strip())
    if userinfo is not None:
        user, colon, password = userinfo.partition(":")
        userinfo = _encode_part(user) + (colon + _encode_part(password) if colon else "")
        repaired = f"{scheme}{userinfo}@{hostpart}"
    else:
        repaired = f"{scheme}{hostpart}"
    _check_host_port_db(repaired)
    return repaired


def _check_host_port_db(url: str) -> None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise RedisURLError("the port is not a number") from None
    if not parts.hostname:
        raise RedisURLError("has no host")
    db = parts.path.lstrip("/")
    if db and not db.isdigit():
        raise RedisURLError("the path must be a db number, e.g. /1")


def redis_db(url: str) -> int:
    """The db number of a (repaired) Redis URL; 0 when it names none."""
    db = urlsplit(url).path.lstrip("/")
    return int(db) if db else 0


def with_password(url: str, password: str) -> str:
    """Put ``password`` (raw, any characters) into ``url``, replacing any password there."""
    scheme, userinfo, hostpart = _split(url)
    user = (userinfo or "").partition(":")[0]
    return f"{scheme}{user}:{quote(password, safe=_SAFE)}@{hostpart}"


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``; safe for logs and error messages."""
    try:
        scheme, userinfo, hostpart = _split(url)
    except RedisURLError:
        return "<not a redis url>"
    if userinfo is None:
        return url
    user, colon, _password = userinfo.partition(":")
    if not colon:  # a lone userinfo is a password to redis-py only with a colon; hide it anyway
        return f"{scheme}***@{hostpart}"
    return f"{scheme}{user}:***@{hostpart}"


def password_of(url: str) -> str | None:
    """The decoded password in ``url`` (as redis-py reads it), or None."""
    _scheme, userinfo, _hostpart = _split(url)
    if userinfo is None or ":" not in userinfo:
        return None
    return unquote(userinfo.partition(":")[2])
