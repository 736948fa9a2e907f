"""Webhooks without I/O beyond the process: which addresses and URLs are refused and why, the
allow-list, ``langgraph.json`` ``webhooks``, the settings, and the signature (a Standard
Webhooks test vector)."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from threadline.config import ConfigError, WebhookSettings, load
from threadline.hosts import HostList
from threadline.runs.errors import Invalid
from threadline.webhooks import WebhookPolicy, address_range, sign, webhook_policy

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("8.8.8.8", None),
        ("1.1.1.1", None),
        ("2606:4700:4700::1111", None),
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "cloud metadata"),
        ("169.254.170.2", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("169.254.0.1", "link-local"),
        ("fe80::1", "link-local"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),  # carrier-grade NAT
        ("fd12:3456::1", "private"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("192.0.2.1", "reserved"),  # documentation
        ("198.18.0.1", "reserved"),  # benchmarking
        ("0.1.2.3", "reserved"),
        # IPv6 forms that carry an IPv4 address are judged by it.
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:8.8.8.8", None),
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
    ],
)
def test_address_ranges(address: str, kind: str | None) -> None:
    assert address_range(ipaddress.ip_address(address)) == kind


def test_the_allow_list_exempts_names_suffixes_and_networks() -> None:
    allowed = HostList.parse(["hooks.internal", "*.corp.example", "10.1.0.0/16", "127.0.0.1", " "], "x")
    policy = WebhookPolicy(allowed=allowed)
    loopback, private, metadata = (
        ipaddress.ip_address(a) for a in ("127.0.0.1", "10.1.2.3", "169.254.169.254")
    )
    assert policy.refusal("hooks.internal", metadata) is None  # a named host: any address
    assert policy.refusal("HOOKS.internal.", private) is None
    assert policy.refusal("a.b.corp.example", private) is None
    elsewhere = ipaddress.ip_address("10.2.0.1")
    assert policy.refusal("corp.example", elsewhere) is not None  # the suffix, not the domain itself
    assert policy.refusal("x.example", private) is None  # in 10.1.0.0/16
    assert policy.refusal("x.example", elsewhere) is not None
    assert policy.refusal("x.example", loopback) is None
    assert policy.refusal("x.example", ipaddress.ip_address("127.0.0.2")) is not None
    refused = policy.refusal("x.example", metadata)
    assert refused is not None and "cloud metadata" in refused and "WEBHOOK_ALLOWED_HOSTS" in refused


def test_loopback_and_private_opened_by_langgraph_json_only_those() -> None:
    policy = WebhookPolicy(loopback=True, private=True)
    assert policy.refusal("h", ipaddress.ip_address("127.0.0.1")) is None
    assert policy.refusal("h", ipaddress.ip_address("192.168.0.1")) is None
    assert policy.refusal("h", ipaddress.ip_address("169.254.169.254")) is not None
    assert policy.refusal("h", ipaddress.ip_address("169.254.0.9")) is not None


@pytest.mark.parametrize("entry", ["*", "a.*.b", "*example.com", "host/path"])
def test_malformed_allow_list_entries_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="WEBHOOK_ALLOWED_HOSTS"):
        HostList.parse([entry], "WEBHOOK_ALLOWED_HOSTS")


def test_a_bad_allow_list_stops_start_up_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBHOOK_ALLOWED_HOSTS", "ok.example,*bad")
    with pytest.raises(ConfigError, match="WEBHOOK_ALLOWED_HOSTS"):
        load(WebhookSettings)


def test_the_secret_is_not_in_the_settings_repr() -> None:
    settings = WebhookSettings(secret="s3cret-value")
    assert "s3cret-value" not in repr(settings)


@pytest.mark.parametrize(
    ("policy", "url", "reason"),
    [
        (WebhookPolicy(), "not a url", "absolute http(s)"),
        (WebhookPolicy(), "http://xn--/", "not a URL"),  # a malformed IDNA label
        (WebhookPolicy(), "http://[::1/", "not a URL"),
        (WebhookPolicy(), "/relative/hook", "absolute http(s)"),
        (WebhookPolicy(), "file:///etc/passwd", "absolute http(s)"),
        (WebhookPolicy(), "http://" + "a" * 2100 + ".example/", "longer than 2048"),
        (WebhookPolicy(require_https=True), "http://hooks.example/", "https"),
        (WebhookPolicy(ports=frozenset({443})), "http://hooks.example/", "port 80"),
        (
            WebhookPolicy(domains=HostList.parse(["*.ok.example"], "d")),
            "https://bad.example/",
            "allowed_domains",
        ),
    ],
)
def test_url_forms_refused_before_any_lookup(policy: WebhookPolicy, url: str, reason: str) -> None:
    with pytest.raises(Invalid) as refused:
        policy.check_url(url)
    assert refused.value.message.startswith("webhook:") and reason in refused.value.message


def test_accepted_url_forms() -> None:
    policy = WebhookPolicy(
        require_https=True, ports=frozenset({443, 8443}), domains=HostList.parse(["*.ok.example"], "d")
    )
    assert policy.check_url("https://a.ok.example/hook?x=1").host == "a.ok.example"
    assert policy.check_url("https://a.b.ok.example:8443/").port == 8443


def test_literal_addresses_are_checked_without_dns() -> None:
    policy = WebhookPolicy(allowed=HostList.parse(["127.0.0.1"], "x"))
    asyncio.run(policy.check("http://127.0.0.1:9/hook"))
    asyncio.run(policy.check("http://8.8.8.8/hook"))
    with pytest.raises(Invalid, match="loopback address ::1"):
        asyncio.run(policy.check("http://[::1]:9/hook"))
    with pytest.raises(Invalid, match="cloud metadata"):
        asyncio.run(policy.check("http://169.254.169.254/latest/meta-data/"))


def test_langgraph_json_webhooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LG_WEBHOOK_TOKEN", "t0ken")
    section = {
        "url": {
            "allowed_domains": ["hooks.example", "*.corp.example"],
            "allowed_ports": [443],
            "require_https": True,
            "max_url_length": 100,
            "disable_loopback": False,
        },
        "headers": {"authorization": "Bearer ${{ env.LG_WEBHOOK_TOKEN }}", "x-static": "yes"},
        "allowed_fields": ["run_id", "status"],
    }
    policy = webhook_policy(WebhookSettings(allowed_hosts="10.0.0.0/8"), section)
    assert policy.headers == {"authorization": "Bearer t0ken", "x-static": "yes"}
    assert policy.fields == {"run_id", "status"} and policy.ports == {443} and policy.max_url_length == 100
    assert policy.require_https and policy.loopback and not policy.private
    assert policy.domains is not None and policy.domains.has_name("a.corp.example")
    assert policy.allowed.has_address(ipaddress.ip_address("10.9.9.9"))
    assert webhook_policy(WebhookSettings(require_https=True)).require_https


@pytest.mark.parametrize(
    ("section", "reason"),
    [
        ("nope", "must be an object"),
        ({"url": {"allowed_domains": "x"}}, "allowed_domains"),
        ({"url": {"allowed_domains": ["a*.b"]}}, "allowed_domains"),
        ({"url": {"allowed_ports": [0]}}, "allowed_ports"),
        ({"url": {"max_url_length": 0}}, "max_url_length"),
        ({"allowed_fields": ["password"]}, "allowed_fields"),
        ({"headers": {"x": "${{ env.HOME }}"}}, "LG_WEBHOOK_"),  # not under the prefix
        ({"headers": {"x": "${{ env.LG_WEBHOOK_UNSET_ONE }}"}}, "LG_WEBHOOK_UNSET_ONE is not set"),
        ({"headers": {"x": 1}}, "headers"),
    ],
)
def test_bad_langgraph_json_webhooks_stop_start_up(section: object, reason: str) -> None:
    with pytest.raises(ConfigError, match="webhooks") as refused:
        webhook_policy(WebhookSettings(), section)
    assert reason in str(refused.value)


def test_the_signature_is_standard_webhooks_v1() -> None:
    # The test vector of the Standard Webhooks specification's reference libraries.
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    assert sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == (
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    )
    # A plain secret is its UTF-8 bytes; the id, the time and the body are all signed.
    signature = sign("plain", "run-1", 1, b"{}")
    assert signature.startswith("v1,") and signature != sign("plain", "run-2", 1, b"{}")
    assert signature != sign("plain", "run-1", 2, b"{}") and signature != sign("plain", "run-1", 1, b"[]")
