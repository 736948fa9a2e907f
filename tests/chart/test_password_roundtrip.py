"""Passwords survive the trip: remote secret -> ESO template -> URL -> redis-py -> Redis.

The URL expression is taken from the rendered ExternalSecret (so this test cannot drift from
the chart) and evaluated by helm's own Go template engine (``urlquery`` is Go's, ``replace`` is
Sprig's — the functions External Secrets' v2 engine has). redis-py must parse back exactly the
password and db, and a real Redis with that ``requirepass`` must accept the connection.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
import yaml
from redis.connection import parse_url

from chart.bundle import helm_template, one, run, tool
from servers import RedisServer

pytestmark = pytest.mark.chart

PASSWORDS = [
    "Du0PmDvmqDWqDTgfGnmi6/SKyuQydi3z7cPTgEQoE+s=",
    "correct horse battery staple",
    "user@host",
    "a:b:c",
    "slash/and/more",
    "what?now",
    "hash#tag",
    "100%sure",
    "%41%2F",  # looks encoded already: must still arrive verbatim
    "plus+plus",
    "equals=end==",
    " @:/?#%+= all of them ",
]
DBS = {"REDIS_URL": 0, "CHECKPOINT_REDIS_URL": 1}


def eso_url_templates(host: str, port: int) -> dict[str, str]:
    docs = helm_template(
        sets=[
            "externalSecret.enabled=true",
            "externalSecret.secretStoreName=store",
            "externalSecret.remoteRefs.apiKeys.key=api-keys",
            "externalSecret.remoteRefs.redisPassword.key=redis-password",
            f"redis.host={host}",
            f"redis.port={port}",
        ]
    )
    data = one(docs, "ExternalSecret")["spec"]["target"]["template"]["data"]
    return {name: data[name] for name in DBS}


def evaluate(tmp_path: Path, templates: dict[str, str], password: str) -> dict[str, str]:
    """Evaluate ESO template strings with helm's engine, ``.redisPassword`` = ``password``."""
    chart = tmp_path / "eso-eval"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: eso-eval\nversion: 0.0.1\n")
    (chart / "values.yaml").write_text(yaml.safe_dump({"redisPassword": password}))
    body = []
    for name, template in templates.items():
        # ESO's template context is the fetched data itself: `with .Values` gives the same `.`.
        body.append(
            f'{{{{- define "eso.{name}" }}}}{{{{- with .Values }}}}{template}{{{{- end }}}}{{{{- end }}}}'
        )
    body.append("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: out\ndata:")
    body += [f'  {name}: {{{{ include "eso.{name}" . | toJson }}}}' for name in templates]
    (chart / "templates" / "out.yaml").write_text("\n".join(body) + "\n")
    out = run(tool("helm"), "template", "x", str(chart)).stdout
    (doc,) = [d for d in yaml.safe_load_all(out) if d]
    return doc["data"]


def test_template_comes_from_the_chart() -> None:
    templates = eso_url_templates("redis.example", 6380)
    for name, db in DBS.items():
        assert templates[name] == (
            'redis://:{{ .redisPassword | urlquery | replace "+" "%20" }}@redis.example:6380/' + str(db)
        )


@pytest.mark.parametrize("password", PASSWORDS)
def test_password_round_trip(tmp_path: Path, password: str) -> None:
    server = RedisServer(password=password).start()
    try:
        urls = evaluate(tmp_path, eso_url_templates("127.0.0.1", server.port), password)
        for name, db in DBS.items():
            parsed = parse_url(urls[name])
            assert parsed["password"] == password, (name, json.dumps(urls[name]))
            assert parsed.get("db", 0) == db
            assert parsed["port"] == server.port
            client = redis.Redis.from_url(urls[name], socket_timeout=5)
            try:
                client.set(f"roundtrip:{name}", "ok")
                assert client.get(f"roundtrip:{name}") == b"ok"
                assert client.connection_pool.connection_kwargs["db"] == db
            finally:
                client.close()
    finally:
        server.close()


def test_without_replace_a_space_breaks(tmp_path: Path) -> None:
    """Why the chart follows urlquery with replace: urlquery alone turns a space into "+",
    which redis-py keeps as a literal "+" (it decodes userinfo with unquote)."""
    templates = {"REDIS_URL": "redis://:{{ .redisPassword | urlquery }}@127.0.0.1:6379/0"}
    url = evaluate(tmp_path, templates, "a b")["REDIS_URL"]
    assert parse_url(url)["password"] == "a+b"


@pytest.mark.parametrize("password", ["Du0PmDvmqDWqDTgfGnmi6/SKyuQydi3z7cPTgEQoE+s=", "a b@c#d"])
def test_redis_password_env_path(monkeypatch: pytest.MonkeyPatch, password: str) -> None:
    """The simpler path: passwordless URLs from the ConfigMap plus raw REDIS_PASSWORD; the
    service's settings put the password in, encoded, on the right db."""
    from threadline.config import CheckpointSettings, SessionSettings

    cm = one(helm_template(sets=["secret.redisPassword=x"]), "ConfigMap")["data"]
    monkeypatch.setenv("REDIS_URL", cm["REDIS_URL"])
    monkeypatch.setenv("CHECKPOINT_REDIS_URL", cm["CHECKPOINT_REDIS_URL"])
    monkeypatch.setenv("REDIS_PASSWORD", password)
    for url, db in (
        (SessionSettings().redis_url, 0),
        (CheckpointSettings().redis_url, 1),
    ):
        parsed = parse_url(url)
        assert parsed["password"] == password
        assert parsed["db"] == db


def eso_ha_templates(mode: str) -> dict[str, str]:
    hosts = "{s1:26379,s2:26379}" if mode == "sentinel" else "{c1:6379,c2:6379}"
    docs = helm_template(
        sets=[
            "externalSecret.enabled=true",
            "externalSecret.secretStoreName=store",
            "externalSecret.remoteRefs.apiKeys.key=api-keys",
            "externalSecret.remoteRefs.redisPassword.key=redis-password",
            f"redis.mode={mode}",
            f"redis.{mode}.hosts={hosts}",
        ]
    )
    data = one(docs, "ExternalSecret")["spec"]["target"]["template"]["data"]
    return {name: data[name] for name in DBS}


@pytest.mark.parametrize("mode", ["sentinel", "cluster"])
def test_sentinel_and_cluster_url_templates_keep_every_password(tmp_path: Path, mode: str) -> None:
    """The same ``urlquery | replace`` safety in ``redis+sentinel://`` and ``redis+cluster://``
    URLs, read back by the service's own parser (threadline.urls)."""
    from threadline import urls

    templates = eso_ha_templates(mode)
    for password in PASSWORDS:
        built = evaluate(tmp_path / str(PASSWORDS.index(password)), templates, password)
        for name, db in DBS.items():
            target = urls.parse_redis_url(built[name])
            assert urls.repair_redis_url(built[name]) == built[name]  # already well encoded
            assert target.mode == mode and target.password == password, (name, json.dumps(built[name]))
            assert target.db == (db if mode == "sentinel" else 0)
            assert [h for h, _ in target.hosts] == (["s1", "s2"] if mode == "sentinel" else ["c1", "c2"])
