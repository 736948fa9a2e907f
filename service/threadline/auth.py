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

    def principal(self, raw_key: str) -> str | None:
        """The principal whose key this is, or None."""
        presented = hash_key(raw_key)
        found = None
        for digest, principal in self._hashes.items():  # no early exit: constant time
            if hmac.compare_digest(presented, digest):
                found = principal
        return found
