"""API keys: hashed at rest, looked up by the hash of the presented key."""

from __future__ import annotations

import hashlib

import pytest

from threadline.auth import ApiKeys, hash_key

pytestmark = pytest.mark.unit


def test_hash_key_is_the_hex_sha256_api_keys_holds() -> None:
    assert hash_key("secret") == hashlib.sha256(b"secret").hexdigest()


def test_a_key_finds_its_principal_and_nothing_else_does() -> None:
    keys = ApiKeys({hash_key("alice-key"): "alice", hash_key("bob-key"): "bob"})
    assert keys.principal("alice-key") == "alice"
    assert keys.principal("bob-key") == "bob"
    assert keys.principal("alice-key ") is None
    assert keys.principal("") is None
    assert keys.principal(hash_key("alice-key")) is None  # the hash itself is not a key


def test_owner_of_a_digest() -> None:
    keys = ApiKeys({hash_key("alice-key"): "alice"})
    assert keys.owner(hash_key("alice-key")) == "alice"
    assert keys.owner(hash_key("removed-key")) is None


def test_no_keys_admit_nobody() -> None:
    assert ApiKeys({}).principal("anything") is None
