"""A real model in the chart: the provider's API key from the service Secret (the chart's own,
an existing one or the ExternalSecret), the NetworkPolicy's egress to the provider, and the
metrics port open only to the monitoring namespace."""

from __future__ import annotations

import pytest

from chart.bundle import container_env, helm_template, one, rendered, service_container

pytestmark = pytest.mark.chart

PUBLIC = {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"]}
OPENAI = ["config.model=openai:gpt-4o-mini", "secret.modelApiKeyEnv=OPENAI_API_KEY"]
ES = [
    "externalSecret.enabled=true",
    "externalSecret.secretStoreName=s",
    "externalSecret.remoteRefs.apiKeys.key=k",
]
ES += ["externalSecret.remoteRefs.redisPassword.key=r"]


def policy(docs) -> dict:
    return one(docs, "NetworkPolicy", "t-threadline")["spec"]


def model_rules(docs) -> list[dict]:
    return [
        r
        for r in policy(docs)["egress"]
        if {"port": 53, "protocol": "UDP"} not in r["ports"]
        and not any(p["port"] in (6379, 5432) for p in r["ports"])
    ]


def env_source(docs, name: str) -> dict:
    (entry,) = [e for e in service_container(docs)["env"] if e["name"] == name]
    return entry["valueFrom"]["secretKeyRef"]


def test_the_provider_key_comes_from_an_existing_secret() -> None:
    docs = rendered("provider-values.yaml")
    assert env_source(docs, "OPENAI_API_KEY") == {"name": "threadline-secrets", "key": "OPENAI_API_KEY"}
    assert container_env(docs, service_container(docs))["MODEL"] == "openai:gpt-4o-mini"
    assert service_container(docs)["image"] == "ghcr.io/threadline/threadline:0.1.0-providers"


def test_the_provider_key_in_the_charts_own_secret() -> None:
    docs = helm_template(sets=[*OPENAI, "secret.modelApiKey=sk-raw-key"])
    secret = one(docs, "Secret", "t-threadline")
    assert secret["stringData"]["OPENAI_API_KEY"] == "sk-raw-key"
    assert env_source(docs, "OPENAI_API_KEY") == {"name": "t-threadline", "key": "OPENAI_API_KEY"}
    # only the Secret holds it
    for doc in docs:
        if doc is not secret:
            assert "sk-raw-key" not in str(doc), doc["kind"]


def test_the_provider_key_from_external_secrets() -> None:
    docs = helm_template(sets=[*ES, *OPENAI, "externalSecret.remoteRefs.modelApiKey.key=openai-key"])
    spec = one(docs, "ExternalSecret", "t-threadline")["spec"]
    assert spec["target"]["template"]["data"]["OPENAI_API_KEY"] == "{{ .modelApiKey }}"
    (item,) = [d for d in spec["data"] if d["secretKey"] == "modelApiKey"]
    assert item["remoteRef"] == {"key": "openai-key"}
    assert env_source(docs, "OPENAI_API_KEY")["key"] == "OPENAI_API_KEY"


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (OPENAI, "secret.modelApiKey is required when secret.modelApiKeyEnv is set"),
        ([*ES, *OPENAI], "externalSecret.remoteRefs.modelApiKey.key is required"),
        (["secret.modelApiKeyEnv=API_KEYS", "secret.modelApiKey=x"], "one of the service's own variables"),
        (["secret.modelApiKey=sk-x"], "secret.modelApiKeyEnv is required with secret.modelApiKey"),
        (["secret.modelApiKeyEnv=openai-key"], "/secret/modelApiKeyEnv"),
        (["networkPolicy.modelEgress.ports={}"], "/networkPolicy/modelEgress/ports"),
    ],
)
def test_a_provider_key_that_cannot_work_stops_the_render(sets: list[str], message: str) -> None:
    proc = helm_template(sets=sets, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "sk-x" not in proc.stderr


def test_no_provider_egress_for_the_builtin_model() -> None:
    assert model_rules(rendered(None)) == []


def test_a_provider_model_may_reach_public_https_only() -> None:
    (rule,) = model_rules(rendered("provider-values.yaml"))
    assert rule == {"ports": [{"port": 443, "protocol": "TCP"}], "to": [{"ipBlock": PUBLIC}]}


def test_provider_egress_can_be_aimed_or_turned_off() -> None:
    ollama = [
        "config.model=ollama:llama3.2",
        "networkPolicy.modelEgress.ports={11434}",
        "networkPolicy.modelEgress.to[0].podSelector.matchLabels.app=ollama",
    ]
    (rule,) = model_rules(helm_template(sets=ollama))
    assert rule == {
        "ports": [{"port": 11434, "protocol": "TCP"}],
        "to": [{"podSelector": {"matchLabels": {"app": "ollama"}}}],
    }
    off = ["config.model=openai:gpt-4o-mini", "networkPolicy.modelEgress.enabled=false"]
    assert model_rules(helm_template(sets=off)) == []
    on = ["networkPolicy.modelEgress.enabled=true"]
    assert len(model_rules(helm_template(sets=on))) == 1


def test_metrics_only_from_the_monitoring_namespace_by_default() -> None:
    _, metrics = policy(rendered(None))["ingress"]
    assert metrics["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    _, metrics = policy(helm_template(sets=["networkPolicy.metricsFrom=null"]))["ingress"]
    assert metrics["from"] == [{"podSelector": {}}]  # the release's namespace only
    sets = ["networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=obs"]
    _, metrics = policy(helm_template(sets=sets))["ingress"]
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"team": "obs"}}}]


def test_skaffolds_dev_values_carry_a_key_so_requests_are_not_all_refused() -> None:
    import hashlib

    secret = one(rendered("dev-values.yaml"), "Secret", "t-threadline")
    digest = hashlib.sha256(b"threadline-dev-key").hexdigest()
    assert secret["stringData"]["API_KEYS"] == f"dev:{digest}"
