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


# --- Sentinel and Cluster URLs (issue 13) ----------------------------------------------------

SENTINEL_AND_CLUSTER = [
    ("redis+sentinel", "s1:26379,s2,[::1]:26380/mymaster/2"),
    ("rediss+sentinel", "s1/mymaster"),
    ("redis+cluster", "c1:7000,c2:7001,c3:7002"),
    ("rediss+cluster", "c1:6379"),
]


@pytest.mark.parametrize("password", RAW_PASSWORDS)
@pytest.mark.parametrize(("scheme", "rest"), SENTINEL_AND_CLUSTER)
def test_sentinel_and_cluster_passwords_are_repaired_and_redacted(
    scheme: str, rest: str, password: str
) -> None:
    raw = f"{scheme}://app:{password}@{rest}"
    repaired = urls.repair_redis_url(raw)
    assert urls.repair_redis_url(repaired) == repaired  # idempotent
    target = urls.parse_redis_url(repaired)
    assert (target.password, target.username) == (password, "app")
    for url in (raw, repaired):
        assert urls.redact(url) == f"{scheme}://app:***@{rest}"
    assert password.strip() not in repr(target).replace(f"{scheme}://app:***@{rest}", "")


def test_parse_a_sentinel_url() -> None:
    target = urls.parse_redis_url("redis+sentinel://:pw@s1:26379,s2,[::1]:26380/mymaster/2")
    assert target.mode == "sentinel" and not target.tls
    assert target.hosts == (("s1", 26379), ("s2", 26379), ("::1", 26380))  # sentinels default to 26379
    assert (target.service_name, target.db, target.password, target.username) == ("mymaster", 2, "pw", None)
    assert urls.parse_redis_url("rediss+sentinel://s1/mymaster").db == 0


def test_parse_a_cluster_url() -> None:
    target = urls.parse_redis_url("rediss+cluster://u:p@c1,c2:7001")
    assert (target.mode, target.tls, target.db) == ("cluster", True, 0)
    assert target.hosts == (("c1", 6379), ("c2", 7001))
    assert urls.parse_redis_url("redis+cluster://c1:7000/0").db == 0
    assert urls.redis_db("redis+cluster://c1:7000") == 0


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"redis+cluster://:{INCIDENT}@c1:7000/1", "only db 0"),
        (f"redis+cluster://:{INCIDENT}@c1:7000,c2:70x1", "port"),
        (f"redis+cluster://:{INCIDENT}@c1:7000,,c2:7001", "malformed host"),
        (f"redis+cluster://:{INCIDENT}@c1:7000?ssl_cert_reqs=none", "query string"),
        (f"redis+sentinel://:{INCIDENT}@s1:26379", "service name"),
        (f"redis+sentinel://:{INCIDENT}@s1:26379/", "service name"),
        (f"redis+sentinel://:{INCIDENT}@s1:26379/m/x", "db number"),
        (f"redis+sentinel://:{INCIDENT}@s1:26379/m/1/2", "service name"),
        (f"redis+sentinal://:{INCIDENT}@s1:26379/m", "must start with"),
    ],
)
def test_sentinel_and_cluster_errors_never_contain_the_password(url: str, message: str) -> None:
    with pytest.raises(RedisURLError, match=message) as caught:
        urls.repair_redis_url(url)
    assert "SKyuQydi3z7" not in str(caught.value)
