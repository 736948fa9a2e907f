"""Redis URL repair and redaction, checked against redis-py's own URL parser (no I/O)."""

from __future__ import annotations

import pytest
from redis.connection import parse_url

from threadline import urls
from threadline.urls import RedisURLError

pytestmark = pytest.mark.unit

INCIDENT = "Du0PmDvmqDWqDTgfGnmi6/SKyuQydi3z7cPTgEQoE+s="
RAW_PASSWORDS = [
    "a/b",
    "a+b",
    "a=b",
    "a@b",
    "a:b",
    "a#b",
    "a?b",
    "100%",
    "%zz",
    "with space",
    " leading and trailing ",
    "/+=@:#?% all",
    INCIDENT,
]


@pytest.mark.parametrize("password", RAW_PASSWORDS)
@pytest.mark.parametrize("scheme", ["redis", "rediss"])
@pytest.mark.parametrize("user", ["", "default", "app+user@corp"])
def test_repair_makes_redis_py_read_the_raw_password(scheme: str, user: str, password: str) -> None:
    raw = f"{scheme}://{user}:{password}@redis.internal:6380/1"
    repaired = urls.repair_redis_url(raw)
    parsed = parse_url(repaired)
    assert parsed["password"] == password
    assert parsed.get("username") == (user or None)
    assert (parsed["host"], parsed["port"], parsed["db"]) == ("redis.internal", 6380, 1)
    assert urls.password_of(repaired) == password
    assert urls.repair_redis_url(repaired) == repaired  # idempotent


def test_the_incident_url_breaks_redis_py_without_repair() -> None:
    raw = f"redis://:{INCIDENT}@redis:6379/1"
    with pytest.raises(ValueError, match="Port could not be cast"):
        parse_url(raw)
    assert urls.repair_redis_url(raw) == (
        "redis://:Du0PmDvmqDWqDTgfGnmi6%2FSKyuQydi3z7cPTgEQoE%2Bs%3D@redis:6379/1"
    )


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost:6379/1",
        "redis://localhost",
        "rediss://default:Du0PmDvmqDWqDTgfGnmi6%2FSKyuQydi3z7cPTgEQoE%2Bs%3D@redis:6380/0",
        "redis://:a%20b%2Bc%40d%3Ae%23f%3Fg%25h@redis:6379/2",  # urlquery + replace "+" "%20"
        "redis://:lower%2fcase%2bhex@redis:6379/1",  # unchanged, hex case included
        "redis://user@redis:6379/0",
        "redis://[::1]:6379/0",
    ],
)
def test_a_correctly_encoded_url_comes_back_unchanged(url: str) -> None:
    assert urls.repair_redis_url(url) == url


@pytest.mark.parametrize(
    ("raw_password", "repaired_password", "redis_py_reads"),
    [
        ("pa%2Fss", "pa%2Fss", "pa/ss"),  # %XX is read as already encoded (see urls.py)
        ("100%", "100%25", "100%"),  # a % without two hex digits is literal
        ("%zz%4", "%25zz%254", "%zz%4"),
        ("50%+", "50%25%2B", "50%+"),
    ],
)
def test_the_percent_rule(raw_password: str, repaired_password: str, redis_py_reads: str) -> None:
    repaired = urls.repair_redis_url(f"redis://:{raw_password}@h:6379/1")
    assert repaired == f"redis://:{repaired_password}@h:6379/1"
    assert parse_url(repaired)["password"] == redis_py_reads


def test_with_password_takes_any_characters_and_keeps_the_user() -> None:
    url = urls.with_password("rediss://default:old@redis:6380/1", INCIDENT)
    assert parse_url(url)["password"] == INCIDENT
    assert parse_url(url)["username"] == "default"
    assert urls.with_password("redis://redis:6379/0", "p w") == "redis://:p%20w@redis:6379/0"


@pytest.mark.parametrize("password", RAW_PASSWORDS)
def test_redact_hides_raw_and_encoded_passwords(password: str) -> None:
    raw = f"redis://app:{password}@redis:6379/1"
    for url in (raw, urls.repair_redis_url(raw)):
        redacted = urls.redact(url)
        assert redacted == "redis://app:***@redis:6379/1"
        assert password.strip() not in redacted.replace("redis://app:***@redis:6379/1", "")


def test_redact_other_forms() -> None:
    assert urls.redact("redis://redis:6379/1") == "redis://redis:6379/1"
    assert urls.redact(f"rediss://:{INCIDENT}@redis:6380/0") == "rediss://:***@redis:6380/0"
    assert urls.redact("redis://lonesecret@redis:6379/0") == "redis://***@redis:6379/0"
    assert urls.redact(f"http://:{INCIDENT}@x") == "<not a redis url>"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"http://:{INCIDENT}@redis:6379/1", "must start with"),
        (f"redis://:{INCIDENT}@redis:63a9/1", "port"),
        (f"redis://:{INCIDENT}@redis:6379/x", "db number"),
        (f"redis://:{INCIDENT}@:6379/1", "no host"),
    ],
)
def test_errors_never_contain_the_password(url: str, message: str) -> None:
    with pytest.raises(RedisURLError, match=message) as caught:
        urls.repair_redis_url(url)
    assert INCIDENT not in str(caught.value)
    assert "SKyuQydi3z7" not in str(caught.value)


def test_redis_db() -> None:
    assert urls.redis_db("redis://h:6379/7") == 7
    assert urls.redis_db("redis://h:6379") == 0
    assert urls.redis_db("redis://h:6379/") == 0
