"""Host allow-lists: names, ``*.`` name suffixes and networks, as the ``WEBHOOK_ALLOWED_HOSTS``
setting and ``langgraph.json``'s ``webhooks.url.allowed_domains`` name them. No I/O: the
settings validate with it, and :mod:`threadline.webhooks` checks addresses against it."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class HostList:
    """Host names (``hooks.example.com``), name suffixes (``*.example.com``) and networks
    (``10.0.0.0/8``, ``127.0.0.1``)."""

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str], what: str) -> HostList:
        """Raises ValueError naming ``what``: an entry is empty or has a ``*`` not at its start."""
        names, suffixes, networks = set(), [], []
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            if entry.startswith("*.") and "*" not in entry[2:] and len(entry) > 2:
                suffixes.append(entry[1:])  # ".example.com"
            elif "*" in entry or "/" in entry:
                raise ValueError(f"{what}: {raw.strip()!r} is not a host, `*.domain` or a network")
            else:
                names.add(entry)
        return cls(frozenset(names), tuple(suffixes), tuple(networks))

    def __bool__(self) -> bool:
        return bool(self.names or self.suffixes or self.networks)

    def has_name(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return host in self.names or any(host.endswith(s) for s in self.suffixes)

    def has_address(self, address: IPAddress) -> bool:
        return any(address.version == n.version and address in n for n in self.networks)
