"""CORS options from ``CORS_ALLOW_ORIGINS`` and ``http.cors`` (over a real server, every route:
tests/integration/test_cors.py)."""

from __future__ import annotations

import re

import pytest

from threadline.api.cors import ALLOW_HEADERS, EXPOSE_HEADERS, cors_options
from threadline.config import ConfigError, ServerSettings, load

pytestmark = pytest.mark.unit


def test_no_origin_no_cors_layer() -> None:
    assert cors_options("", None) is None
    assert cors_options("", {"max_age": 5}) is None


def test_the_default_allows_no_origin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CORS_ALLOW_ORIGINS", raising=False)
    assert load(ServerSettings).cors_allow_origins == ""


def test_origins_and_port_wildcards() -> None:
    options = cors_options("https://app.example.com, http://localhost:*,http://127.0.0.1:*", None)
    assert options is not None
    assert options["allow_origins"] == ["https://app.example.com"]
    regex = re.compile(options["allow_origin_regex"])
    assert regex.fullmatch("http://localhost:3000") and regex.fullmatch("http://127.0.0.1:5173")
    assert not regex.fullmatch("http://localhost.evil.com:3000")
    assert not regex.fullmatch("https://localhost:3000")
    assert set(ALLOW_HEADERS) <= set(options["allow_headers"])
    assert set(EXPOSE_HEADERS) <= set(options["expose_headers"])
    assert {"GET", "POST", "PATCH", "DELETE", "PUT"} <= set(options["allow_methods"])
    assert options["allow_credentials"] is True  # as langgraph-api, unless `*`
    assert cors_options("*", None)["allow_credentials"] is False  # type: ignore[index]


def test_star_is_allowed_when_asked() -> None:
    assert cors_options("*", None)["allow_origins"] == ["*"]  # type: ignore[index]


def test_http_cors_in_langgraph_format_and_the_setting_wins_on_origins() -> None:
    http_cors = {
        "allow_origins": ["https://ui.example.com"],
        "allow_methods": ["GET", "POST"],
        "allow_headers": ["X-Custom"],
        "allow_credentials": True,
        "expose_headers": ["X-Trace"],
        "max_age": 60,
    }
    options = cors_options("", http_cors)
    assert options is not None
    assert options["allow_origins"] == ["https://ui.example.com"]
    assert options["allow_methods"] == ["GET", "POST"]
    assert "x-custom" in options["allow_headers"] and "x-api-key" in options["allow_headers"]
    assert "x-trace" in options["expose_headers"] and "x-replica" in options["expose_headers"]
    assert options["allow_credentials"] is True and options["max_age"] == 60
    overridden = cors_options("https://other.example.com", http_cors)
    assert overridden is not None and overridden["allow_origins"] == ["https://other.example.com"]
    assert overridden["max_age"] == 60


@pytest.mark.parametrize(
    ("http_cors", "expected"),
    [
        ([], "must be an object"),
        ({"allow_origin": ["x"]}, "unknown key 'allow_origin'"),
        ({"allow_origins": "https://a.example"}, "allow_origins: must be a list of strings"),
        ({"max_age": "60"}, "max_age: must be an int"),
        ({"allow_origins": ["not an origin"]}, "allow_origins: every entry is `*` or an origin"),
    ],
)
def test_a_malformed_http_cors_stops_start_up_naming_the_key(http_cors: object, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        cors_options("", http_cors)
    assert str(caught.value).startswith("LANGGRAPH_CONFIG: http.cors") and expected in str(caught.value)


@pytest.mark.parametrize(
    "value", ["localhost:4000", "http://a.example/path", "ftp://a.example", "http://*.x"]
)
def test_a_malformed_origin_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CORS_ALLOW_ORIGINS", value)
    with pytest.raises(ConfigError) as caught:
        load(ServerSettings)
    assert str(caught.value).startswith("CORS_ALLOW_ORIGINS: every entry is") and value not in str(
        caught.value
    )
