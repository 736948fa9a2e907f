"""Webhooks (ADR 0020): a run created with ``webhook`` (a URL) has its end POSTed there by the
replica that records the end, once, in the background.

* **Which addresses** (:class:`WebhookPolicy`): the URL's host is resolved and *every* address
  it resolves to is checked; loopback, link-local (cloud metadata endpoints included), private,
  multicast, unspecified and reserved addresses are refused unless ``WEBHOOK_ALLOWED_HOSTS``
  names the host or a network holding the address. The check runs when the run is created (a
  refusal is a 422, nothing stored) and again at each delivery, which then connects to the
  address it checked (the request's ``Host`` and TLS name stay the URL's), so a DNS answer that
  changes in between (rebinding) cannot send the POST elsewhere. Redirects are not followed.
* **Once**: the executor calls :meth:`Webhooks.finished` only after the record store accepted
  the run's end (``finish_run`` ends a run once, whichever replica or attempt gets there), so a
  run taken over after its replica died is delivered by the replica that finishes it. A
  delivery lives in this process: one whose replica dies before it is sent is lost (at most
  once); its retries reuse one ``webhook-id`` so a receiver can drop duplicates.
* **Bounded**: ``WEBHOOK_MAX_IN_FLIGHT`` POSTs at once per replica, ``WEBHOOK_MAX_PENDING``
  deliveries held (each with its payload) before new ones are dropped and counted; each attempt
  ends within ``WEBHOOK_TIMEOUT_SECONDS``; ``WEBHOOK_RETRIES`` more after a network error, a
  timeout, a 408, 429 or 5xx, with :func:`threadline.retry.delays` back-off from
  ``WEBHOOK_RETRY_SECONDS``.
* **Signed** with ``WEBHOOK_SECRET`` as Standard Webhooks does (``webhook-id``,
  ``webhook-timestamp``, ``webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">``).

The payload is langgraph-api's: the run (as ``GET …/runs/{id}`` shows it) with its final
``status``, ``run_started_at``, ``run_ended_at``, ``webhook_sent_at``, the thread's ``values``
and, when the run failed, its ``error``. Nothing here logs a URL (it may hold a token) or the
secret.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import ipaddress
import logging
import os
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from threadline import __version__, metrics
from threadline.config import ConfigError, WebhookSettings
from threadline.hosts import HostList, IPAddress
from threadline.retry import delays
from threadline.runs import wire
from threadline.runs.errors import Invalid
from threadline.runs.records import RunRecord, now_iso
from threadline.runs.runs import run_dict

log = logging.getLogger(__name__)


# langgraph-api's default (webhooks.url.max_url_length).
MAX_URL_LENGTH = 2048
# Longest back-off between two attempts.
RETRY_CAP_SECONDS = 60.0
# A host that does not resolve within this is refused (creation) or a failed attempt.
RESOLVE_TIMEOUT_SECONDS = 5.0
# At shutdown, deliveries under way get this long before they are cancelled.
CLOSE_GRACE_SECONDS = 5.0
# Statuses worth another attempt: the receiver is busy or failing, not refusing.
RETRY_STATUSES = frozenset({408, 429})
# The payload's fields (langgraph-api's VALID_WEBHOOK_ALLOWED_FIELDS), for `allowed_fields`.
PAYLOAD_FIELDS = frozenset(
    {
        "run_id", "thread_id", "assistant_id", "created_at", "updated_at", "metadata", "kwargs",
        "multitask_strategy", "status", "run_started_at", "run_ended_at", "webhook_sent_at",
        "values", "error",
    }
)  # fmt: skip
# Shared address space (RFC 6598) and the private ranges Python's ipaddress has no one flag
# for; cloud metadata endpoints outside link-local (Alibaba's, AWS's IPv6 one).
_PRIVATE = tuple(
    ipaddress.ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7", "fec0::/10")
)
_METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_TEMPLATE = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")


class Unresolved(Invalid):
    """The webhook's host does not resolve (now: at delivery, worth another attempt)."""

    def __init__(self) -> None:
        super().__init__("webhook: the host does not resolve")


def address_range(address: IPAddress) -> str | None:
    """The refused range ``address`` is in — ``cloud metadata``, ``unspecified``, ``loopback``,
    ``link-local``, ``multicast``, ``private`` or ``reserved`` (anything else not globally
    routable) — or None for a public address. An IPv6 address that carries an IPv4 one
    (mapped, NAT64, 6to4) is judged by the IPv4 one."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is None and address in _NAT64:
            inner = ipaddress.IPv4Address(address.packed[-4:])
        if inner is not None:
            return address_range(inner)
    if address in _METADATA:
        return "cloud metadata"
    for name in ("unspecified", "loopback", "link_local", "multicast"):
        if getattr(address, f"is_{name}"):
            return name.replace("_", "-")
    if any(address in network for network in _PRIVATE):
        return "private"
    if address.is_reserved or not address.is_global:
        return "reserved"
    return None


@dataclass(frozen=True)
class WebhookPolicy:
    """Which URLs a run may name as its webhook, and what each POST carries besides the payload.

    From the settings (``WEBHOOK_ALLOWED_HOSTS``, ``WEBHOOK_REQUIRE_HTTPS``) and ``langgraph.json``
    ``webhooks`` (:func:`webhook_policy`)."""

    allowed: HostList = field(default_factory=HostList)
    """Exempt from the address checks: names (any address) and networks."""
    domains: HostList | None = None
    """When set, the only hosts accepted (``webhooks.url.allowed_domains``)."""
    require_https: bool = False
    ports: frozenset[int] = frozenset()
    max_url_length: int = MAX_URL_LENGTH
    loopback: bool = False
    """``webhooks.url.disable_loopback: false``: loopback addresses are accepted."""
    private: bool = False
    """``webhooks.url.disable_private_ips: false``: private addresses are accepted."""
    headers: dict[str, str] = field(default_factory=dict)
    fields: frozenset[str] | None = None

    def check_url(self, url: str) -> httpx.URL:
        """The URL, parsed, if its form is acceptable (no DNS yet).

        Raises:
            Invalid: why not (naming ``webhook``).
        """
        if len(url) > self.max_url_length:
            raise Invalid(f"webhook: longer than {self.max_url_length} characters")
        try:
            parsed = httpx.URL(url)
            host = parsed.host  # decoded here: a malformed IDNA label raises
        except (httpx.InvalidURL, ValueError, TypeError):  # UnicodeError is a ValueError
            raise Invalid("webhook: not a URL") from None
        if parsed.scheme not in ("http", "https") or not host:
            raise Invalid("webhook: must be an absolute http(s) URL")
        if self.require_https and parsed.scheme != "https":
            raise Invalid("webhook: must use https (WEBHOOK_REQUIRE_HTTPS)")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        if self.ports and port not in self.ports:
            raise Invalid(f"webhook: port {port} not allowed (webhooks.url.allowed_ports)")
        if self.domains is not None and not self.domains.has_name(host):
            raise Invalid("webhook: host not allowed (webhooks.url.allowed_domains)")
        return parsed

    def refusal(self, host: str, address: IPAddress) -> str | None:
        """Why ``address`` (one that ``host`` resolved to) is refused; None if it is not."""
        if self.allowed.has_name(host) or self.allowed.has_address(address):
            return None
        kind = address_range(address)
        if kind is None or (kind == "loopback" and self.loopback) or (kind == "private" and self.private):
            return None
        return f"{kind} address {address} refused (WEBHOOK_ALLOWED_HOSTS allows hosts and networks)"

    async def resolve(self, url: httpx.URL) -> list[IPAddress]:
        """Every address the URL's host resolves to, each checked.

        Raises:
            Invalid: the host does not resolve, or one of its addresses is refused.
        """
        host = url.host
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            found = [literal]
        else:
            loop = asyncio.get_running_loop()
            try:
                infos = await asyncio.wait_for(
                    loop.getaddrinfo(host, url.port or 443, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_SECONDS
                )
            except (OSError, TimeoutError, UnicodeError):
                raise Unresolved from None
            found = list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos))
            if not found:
                raise Unresolved
        for address in found:
            if (reason := self.refusal(host, address)) is not None:
                raise Invalid(f"webhook: {reason}")
        return found

    async def check(self, url: str) -> None:
        """Raises Invalid (a 422 naming the reason): the URL is not one to deliver to."""
        await self.resolve(self.check_url(url))


def webhook_policy(settings: WebhookSettings, section: object = None) -> WebhookPolicy:
    """The policy of the settings and of ``langgraph.json``'s ``webhooks`` (``section``):
    ``url`` (``allowed_domains``, ``allowed_ports``, ``require_https``, ``max_url_length``,
    ``disable_loopback``, ``disable_private_ips``), ``headers`` (``${{ env.VAR }}`` templates of
    variables starting with ``env_prefix``, default ``LG_WEBHOOK_``) and ``allowed_fields``.

    Raises:
        ConfigError: naming the key or variable.
    """
    try:
        allowed = HostList.parse(settings.allowed_hosts.split(","), "WEBHOOK_ALLOWED_HOSTS")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if section is None:
        return WebhookPolicy(allowed=allowed, require_https=settings.require_https)
    where = "LANGGRAPH_CONFIG: webhooks"
    if not isinstance(section, dict):
        raise ConfigError(f"{where} must be an object")
    for key in sorted(set(section) - {"url", "headers", "allowed_fields", "env_prefix"}):
        log.warning("langgraph.json key 'webhooks.%s' is not served by threadline and is ignored", key)
    url = section.get("url") or {}
    if not isinstance(url, dict):
        raise ConfigError(f"{where}.url must be an object")
    for key in sorted(
        set(url)
        - {
            "allowed_domains",
            "allowed_ports",
            "require_https",
            "max_url_length",
            "disable_loopback",
            "disable_private_ips",
        }
    ):
        log.warning("langgraph.json key 'webhooks.url.%s' is not served by threadline and is ignored", key)
    domains = url.get("allowed_domains")
    ports = url.get("allowed_ports") or []
    fields = section.get("allowed_fields")
    if domains is not None and (
        not isinstance(domains, list) or not all(isinstance(d, str) and d for d in domains)
    ):
        raise ConfigError(f"{where}.url.allowed_domains must be a list of non-empty strings")
    if not isinstance(ports, list) or not all(type(p) is int and 0 < p < 65536 for p in ports):
        raise ConfigError(f"{where}.url.allowed_ports must be a list of port numbers")
    length = url.get("max_url_length", MAX_URL_LENGTH)
    if type(length) is not int or length < 1:
        raise ConfigError(f"{where}.url.max_url_length must be a positive integer")
    if fields is not None and (not isinstance(fields, list) or not set(fields) <= PAYLOAD_FIELDS):
        raise ConfigError(f"{where}.allowed_fields must be a list of {sorted(PAYLOAD_FIELDS)}")
    try:
        domain_list = HostList.parse(domains, f"{where}.url.allowed_domains") if domains else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return WebhookPolicy(
        allowed=allowed,
        domains=domain_list,
        require_https=settings.require_https or url.get("require_https") is True,
        ports=frozenset(ports),
        max_url_length=length,
        loopback=url.get("disable_loopback") is False,
        private=url.get("disable_private_ips") is False,
        headers=_headers(section.get("headers"), section.get("env_prefix", "LG_WEBHOOK_"), where),
        fields=frozenset(fields) if fields is not None else None,
    )


def _headers(headers: object, prefix: object, where: str) -> dict[str, str]:
    """``webhooks.headers`` with their ``${{ env.VAR }}`` templates filled in (VAR must start
    with ``prefix``, so a config cannot send just any variable of the process)."""
    if headers is None:
        return {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise ConfigError(f"{where}.headers must map header names to strings")
    if not isinstance(prefix, str):
        raise ConfigError(f"{where}.env_prefix must be a string")

    def fill(match: re.Match[str]) -> str:
        expr = match.group(1).strip()
        name = expr.removeprefix("env.")
        if name == expr or not name or "." in name or not name.startswith(prefix):
            raise ConfigError(f"{where}.headers: only ${{{{ env.{prefix}NAME }}}} templates are allowed")
        value = os.environ.get(name)
        if value is None:
            raise ConfigError(f"{where}.headers: {name} is not set")
        return value

    return {str(k): _TEMPLATE.sub(fill, v) for k, v in headers.items()}


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header (Standard Webhooks ``v1``): base64 HMAC-SHA256 of
    ``"{id}.{timestamp}.{body}"``. A ``whsec_``-prefixed secret is base64 (as Standard Webhooks
    libraries make them); any other is used as its UTF-8 bytes."""
    key = base64.b64decode(secret[6:]) if secret.startswith("whsec_") else secret.encode()
    digest = hmac.new(key, f"{message_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


class _Failed(Exception):
    """One attempt failed; ``reason`` is a metric label, ``again`` whether to retry."""

    def __init__(self, reason: str, again: bool) -> None:
        super().__init__(reason)
        self.reason, self.again = reason, again


class Webhooks:
    """This replica's deliveries (see the module docstring).

    Args:
        settings: ``WEBHOOK_*``.
        policy: which URLs, which headers and fields.
        state_of: the thread's values for a run that ended (None when they cannot be read).
        verify: whose TLS certificates are trusted (httpx's ``verify``: certifi's by default).
    """

    def __init__(
        self,
        settings: WebhookSettings,
        policy: WebhookPolicy,
        state_of: Callable[[RunRecord], Awaitable[Any]],
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.state_of = state_of
        self._slots = asyncio.Semaphore(settings.max_in_flight)
        self._tasks: set[asyncio.Task] = set()
        self._client = httpx.AsyncClient(
            follow_redirects=False,
            verify=verify,
            trust_env=False,  # no proxy from the environment: it would connect, not us
            limits=httpx.Limits(max_connections=settings.max_in_flight, max_keepalive_connections=10),
        )

    async def check(self, url: str) -> None:
        """Raises Invalid (422): ``url`` is not one to deliver to (see :class:`WebhookPolicy`)."""
        await self.policy.check(url)

    def finished(self, run: RunRecord, status: str, result: bytes, started_at: str | None) -> None:
        """The run's end was recorded here: deliver its webhook, if it has one, in the
        background (never raises, never waits)."""
        url = run.kwargs.get("webhook")
        if not url:
            return
        if len(self._tasks) >= self.settings.max_pending:
            metrics.WEBHOOK_DELIVERIES.labels("dropped").inc()
            log.warning(
                "webhook dropped: WEBHOOK_MAX_PENDING deliveries are pending", extra={"run_id": run.run_id}
            )
            return
        ended_at = now_iso()
        task = asyncio.create_task(
            self._deliver(run, url, status, result, started_at, ended_at), name=f"webhook-{run.run_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _payload(
        self, run: RunRecord, status: str, result: bytes, started_at: str | None, ended_at: str
    ) -> dict[str, Any]:
        payload: dict[str, Any] = run_dict(run) | {
            "status": status,
            "updated_at": ended_at,
            "run_started_at": started_at or run.created_at,
            "run_ended_at": ended_at,
        }
        try:
            payload["values"] = await self.state_of(run)
        except Exception as exc:  # deleted with its thread, store away: the end is still news
            log.warning("webhook without values", extra={"run_id": run.run_id, "error": type(exc).__name__})
            payload["values"] = None
        with contextlib.suppress(orjson.JSONDecodeError, AttributeError):
            if (error := orjson.loads(result).get("__error__")) is not None:
                payload["error"] = error
        return payload

    async def _deliver(
        self, run: RunRecord, url: str, status: str, result: bytes, started_at: str | None, ended_at: str
    ) -> None:
        try:
            await self._attempts(run, url, await self._payload(run, status, result, started_at, ended_at))
        except Exception as exc:  # a bug: said once, by type (its text could hold the URL)
            metrics.WEBHOOK_DELIVERIES.labels("failed").inc()
            log.error("webhook not delivered", extra={"run_id": run.run_id, "error": type(exc).__name__})

    async def _attempts(self, run: RunRecord, url: str, payload: dict[str, Any]) -> None:
        """POST ``payload`` until an attempt succeeds, one fails for good, or none is left."""
        waits = delays(self.settings.retry_seconds, RETRY_CAP_SECONDS, jitter=0.2)
        for attempt in range(self.settings.retries + 1):
            try:
                async with self._slots:
                    metrics.WEBHOOKS_IN_FLIGHT.inc()
                    try:
                        await self._post(run.run_id, url, payload)
                    finally:
                        metrics.WEBHOOKS_IN_FLIGHT.dec()
            except _Failed as failed:
                metrics.WEBHOOK_ATTEMPT_FAILURES.labels(failed.reason).inc()
                log.warning(
                    "webhook attempt failed",
                    extra={"run_id": run.run_id, "attempt": attempt + 1, "reason": failed.reason},
                )
                if failed.again and attempt < self.settings.retries:
                    await asyncio.sleep(next(waits))
                    continue
                metrics.WEBHOOK_DELIVERIES.labels("failed").inc()
                log.warning("webhook not delivered", extra={"run_id": run.run_id, "attempts": attempt + 1})
                return
            metrics.WEBHOOK_DELIVERIES.labels("delivered").inc()
            log.info("webhook delivered", extra={"run_id": run.run_id, "attempts": attempt + 1})
            return

    async def _post(self, run_id: str, url: str, payload: dict[str, Any]) -> None:
        """One attempt: check the URL and its addresses again, POST to the first that connects.

        Raises:
            _Failed: why, and whether another attempt may do better.
        """
        try:
            parsed = self.policy.check_url(url)
            addresses = await self.policy.resolve(parsed)
        except Unresolved:
            raise _Failed("unresolved", True) from None  # DNS away for a while: try again
        except Invalid:
            raise _Failed("refused", False) from None
        fields = self.policy.fields
        sent = payload | {"webhook_sent_at": now_iso()}
        body = wire.dumps({k: v for k, v in sent.items() if fields is None or k in fields})
        timestamp = int(time.time())
        headers = {
            **self.policy.headers,
            "content-type": "application/json",
            "user-agent": f"threadline/{__version__}",
            "host": parsed.netloc.decode("ascii").rpartition("@")[2],
            "webhook-id": run_id,
            "webhook-timestamp": str(timestamp),
        }
        if self.settings.secret:
            headers["webhook-signature"] = sign(self.settings.secret, run_id, timestamp, body)
        extensions = {"sni_hostname": parsed.host} if parsed.scheme == "https" else {}
        try:
            async with asyncio.timeout(self.settings.timeout_seconds):
                # The checked addresses in turn, until one accepts the connection (a name with
                # an IPv6 address this host cannot reach, say), within the one timeout.
                for i, address in enumerate(addresses):
                    pinned = parsed.copy_with(host=str(address))
                    try:
                        # Streamed and closed unread: only the status matters, a receiver's
                        # body of any size costs nothing.
                        async with self._client.stream(
                            "POST", pinned, content=body, headers=headers, extensions=extensions
                        ) as response:
                            code = response.status_code
                        break
                    except httpx.ConnectError:
                        if i == len(addresses) - 1:
                            raise
        except TimeoutError:
            raise _Failed("timeout", True) from None
        except httpx.HTTPError:
            raise _Failed("network", True) from None
        if 200 <= code < 300:
            return
        raise _Failed(f"{code // 100}xx", code >= 500 or code in RETRY_STATUSES)

    async def aclose(self) -> None:
        """Give the deliveries under way :data:`CLOSE_GRACE_SECONDS`, cancel the rest, close
        the client (at shutdown, after the runs stopped)."""
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=CLOSE_GRACE_SECONDS)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        await self._client.aclose()
