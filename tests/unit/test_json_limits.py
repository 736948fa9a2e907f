"""The JSON limits the middleware holds bodies to (api/json_limits.py): nesting depth, 64-bit
integers and Unicode strings, decided on the raw body; anything else is left to the route."""

from __future__ import annotations

import json

import orjson
import pytest

from threadline.api.json_limits import MAX_DEPTH, problem


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 256, 999, 5000, 200_000])
def test_too_deep(depth: int) -> None:
    assert problem(_nested(depth)) == f"body: nested deeper than {MAX_DEPTH} levels"


@pytest.mark.parametrize("number", [b"18446744073709551616", b"-9223372036854775809", b"9" * 5000])
def test_integers_past_64_bits(number: bytes) -> None:
    assert problem(b'{"a": [' + number + b"]}") == "body: an integer does not fit 64 bits"


@pytest.mark.parametrize(
    "body",
    [rb'{"a": "\ud800"}', rb'{"a": ["x\uDFFFy"]}', rb'{"\udc00key": 1}', rb'["\ude0d\ud83d"]'],
)
def test_lone_surrogates(body: bytes) -> None:
    assert problem(body) == "body: a string holds a lone surrogate (\\ud800-\\udfff), which is not Unicode"
    with pytest.raises(orjson.JSONEncodeError):  # why: no store could encode it
        orjson.dumps(json.loads(body))


@pytest.mark.parametrize(
    "body",
    [
        rb'{"emoji": "\ud83d\ude0d", "plain": "\u00e9"}',  # a surrogate pair is one character
        _nested(MAX_DEPTH),
        b'{"a": 18446744073709551615, "b": -9223372036854775808}',
        b'{"text": "12345678901234567890123 in a string", "n": 1.5e300}',
        b"[" + b"[1]," * 5000 + b"[1]]",  # many brackets, shallow
        b"not json [[[[[[[[" + b"[" * 100,  # the route answers that
        b"",
    ],
)
def test_within_the_limits(body: bytes) -> None:
    assert problem(body) is None


def test_what_passes_orjson_can_store() -> None:
    """The limits are inside orjson's (255 levels, [-2**63, 2**64)), with room for wrapping."""
    wrapped: object = orjson.loads(_nested(MAX_DEPTH))
    for _ in range(100):
        wrapped = {"wrapper": wrapped}
    orjson.dumps(wrapped)
