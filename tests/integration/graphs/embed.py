"""A deterministic embedding for the store tests: words hashed into 16 dimensions (nothing
downloads a model). Texts sharing words point the same way."""

from __future__ import annotations

import hashlib
import math

DIMS = 16


def embed(texts: list[str]) -> list[list[float]]:
    vectors = []
    for text in texts:
        vector = [0.0] * DIMS
        for word in text.lower().split():
            vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIMS] += 1.0
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        vectors.append([x / norm for x in vector])
    return vectors
