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

Three topologies, one URL each (the userinfo is repaired and redacted the same way in all):

- ``redis[s]://[[user]:password@]host[:port][/db]``: one Redis;
- ``redis[s]+sentinel://[[user]:password@]host[:port][,host[:port]…]/service_name[/db]``: the
  hosts are sentinels (default port 26379), the password is the Redis nodes' (the sentinels'
  own comes from ``REDIS_SENTINEL_PASSWORD``);
- ``redis[s]+cluster://[[user]:password@]host[:port][,host[:port]…]``: seed nodes of a Redis
  Cluster, which has only db 0 (a ``/N`` other than ``/0`` is refused).

:func:`parse_redis_url` turns any of them into a :class:`RedisTarget` for
:mod:`threadline.redis_client`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, unquote, urlsplit

SCHEMES = (
    "redis://",
    "rediss://",
    "redis+sentinel://",
    "rediss+sentinel://",
    "redis+cluster://",
    "rediss+cluster://",
)
Mode = Literal["standalone", "sentinel", "cluster"]
SENTINEL_PORT = 26379
REDIS_PORT = 6379
# One host of a host list: a name or IPv4 address, or a bracketed IPv6 one, and a port.
_HOST = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[^\[\]:/]+))(?::(?P<port>[^:]*))?$")

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
        raise RedisURLError(
            "must start with redis://, rediss://, redis+sentinel://, redis+cluster:// "
            "(or rediss+sentinel://, rediss+cluster://)"
        )
    rest = url[len(scheme) :]
    userinfo, at, hostpart = rest.rpartition("@")
    return scheme, (userinfo if at else None), (hostpart if at else rest)


def repair_redis_url(url: str) -> str:
    """Return ``url`` with its username and password percent-encoded.

    A correctly encoded URL comes back unchanged. Supports every scheme in :data:`SCHEMES`,
    ``user:password@`` and password-only ``:password@`` forms.

    Raises:
        RedisURLError: not a redis URL, or the host, port, db or service name cannot be
            parsed, or a cluster URL names a db other than 0.
    """
    scheme, userinfo, hostpart = _split(url.strip())
    if userinfo is not None:
        user, colon, password = userinfo.partition(":")
        userinfo = _encode_part(user) + (colon + _encode_part(password) if colon else "")
        repaired = f"{scheme}{userinfo}@{hostpart}"
    else:
        repaired = f"{scheme}{hostpart}"
    parse_redis_url(repaired)  # checks hosts, ports, db and service name
    return repaired


@dataclass(frozen=True)
class RedisTarget:
    """What a Redis URL points at, as :mod:`threadline.redis_client` needs it.

    Attributes:
        mode: ``standalone``, ``sentinel`` or ``cluster``.
        url: for ``standalone`` the (repaired) URL itself, for redis-py's ``from_url``.
        hosts: ``(host, port)`` pairs: the one Redis, the sentinels, or the cluster seeds.
        tls: ``rediss`` schemes.
        username, password: decoded, or None.
        db: the db number (always 0 for a cluster).
        service_name: the Sentinel service (master group) name; None unless ``sentinel``.
    """

    mode: Mode
    url: str
    hosts: tuple[tuple[str, int], ...]
    tls: bool
    username: str | None
    password: str | None
    db: int
    service_name: str | None = None

    def __repr__(self) -> str:  # never the password, even in a traceback's locals
        return f"RedisTarget({redact(self.url)})"


def parse_redis_url(url: str) -> RedisTarget:
    """Parse a (repaired, see :func:`repair_redis_url`) Redis URL of any of the three forms.

    Raises:
        RedisURLError: a host, port, db or service name cannot be parsed, a cluster URL names
            a db other than 0, or a sentinel or cluster URL has a query string. The message
            never holds the URL.
    """
    scheme, userinfo, hostpart = _split(url)
    kind = scheme[: -len("://")]
    tls = kind.startswith("rediss")
    mode: Mode = (
        "sentinel" if kind.endswith("+sentinel") else "cluster" if kind.endswith("+cluster") else "standalone"
    )
    user = password = None
    if userinfo is not None:
        raw_user, colon, raw_password = userinfo.partition(":")
        user = unquote(raw_user) or None
        password = unquote(raw_password) if colon else None
    if mode == "standalone":
        try:
            parts = urlsplit(url)
            port = parts.port  # raises ValueError on a bad port
        except ValueError:
            raise RedisURLError("the port is not a number") from None
        if not parts.hostname:
            raise RedisURLError("has no host")
        db = parts.path.lstrip("/")
        if db and not db.isdigit():
            raise RedisURLError("the path must be a db number, e.g. /1")
        hosts = ((parts.hostname, port or REDIS_PORT),)
        return RedisTarget(mode, url, hosts, tls, user, password, int(db) if db else 0)
    hostlist, _slash, path = hostpart.partition("/")
    if "?" in hostpart or "#" in hostpart:
        raise RedisURLError(f"a {mode} URL takes no query string or fragment")
    hosts = tuple(
        _host_port(h, SENTINEL_PORT if mode == "sentinel" else REDIS_PORT) for h in hostlist.split(",")
    )
    segments = path.split("/") if path else []
    if mode == "cluster":
        if segments not in ([], [""], ["0"]):
            raise RedisURLError(
                "a Redis Cluster has only db 0: remove the /db from the URL "
                "(sessions and checkpoints share db 0 under their key prefixes)"
            )
        return RedisTarget(mode, url, hosts, tls, user, password, 0)
    if not segments or not segments[0] or len(segments) > 2:
        raise RedisURLError("a sentinel URL needs the service name after the hosts: /service_name[/db]")
    db = segments[1] if len(segments) == 2 else ""
    if db and not db.isdigit():
        raise RedisURLError("the path must be /service_name or /service_name/<db number>")
    return RedisTarget(mode, url, hosts, tls, user, password, int(db) if db else 0, unquote(segments[0]))


def _host_port(text: str, default_port: int) -> tuple[str, int]:
    match = _HOST.match(text)
    if match is None:
        raise RedisURLError("has an empty or malformed host in its host list")
    port = match["port"]
    if port is not None and not port.isdigit():
        raise RedisURLError("the port is not a number")
    return match["v6"] or match["name"], int(port) if port else default_port


def redis_db(url: str) -> int:
    """The db number of a (repaired) Redis URL of any form; 0 when it names none."""
    return parse_redis_url(url).db


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
