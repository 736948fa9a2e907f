"""API keys and who is calling.

API keys arrive hashed (``API_KEYS=principal:sha256hex``); a presented key is hashed and
compared with every configured hash in constant time, so timing reveals neither which key
nor how much of it matched.
"""

from __future__ import annotations

import hashlib
import hmac


def hash_key(raw_key: str) -> str:
    """The hex SHA-256 that ``API_KEYS`` holds for ``raw_key``."""
    return hashlib.sha256(raw_key.encode()).hexdigest()


class ApiKeys:
    def __init__(self, hashes: dict[str, str]) -> None:
        self._hashes = hashes

    @property
    def configured(self) -> bool:
        """Whether ``API_KEYS`` holds any key."""
        return bool(self._hashes)

    def principal(self, raw_key: str) -> str | None:
        """The principal whose key this is, or None."""
        return self.owner(hash_key(raw_key))

    def owner(self, digest: str) -> str | None:
        """The principal of the configured key whose SHA-256 hex is ``digest``, or None (the key
        is not, or no longer, in ``API_KEYS``)."""
        found = None
        for configured, principal in self._hashes.items():  # no early exit: constant time
            if hmac.compare_digest(digest, configured):
                found = principal
        return found
