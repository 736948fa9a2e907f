"""Every rendered object is valid Kubernetes, and the chart keeps the promises users rely on."""

from __future__ import annotations

import base64
import re

import kubernetes_validate
import pytest

from threadline import urls

from chart.bundle import (
    CI_VALUES,
    CRD_KINDS,
    KUBE_VERSIONS,
    Obj,
    container_env,
    helm_template,
    objects,
    one,
    pod_specs,
    rendered,
    service_container,
)

pytestmark = pytest.mark.chart

CONFIGS = [None, *(p.name for p in CI_VALUES)]
# ci files that pin the replica count (no HPA, so no metrics-server needed)
FIXED_REPLICAS = {
    "kind-values.yaml": 3,
    "dev-values.yaml": 1,
    "postgres-values.yaml": 1,
}
# ci files whose Redis is not the default redis:6379
REDIS_PORTS = {"external-secrets-values.yaml": {6378}, "sentinel-values.yaml": {6379, 26379}}


def ids(name: str | None) -> str:
    return name or "defaults"


def validate(doc: Obj) -> None:
    """Strict schema validation for built-in kinds; the fields that matter for CRDs."""
    if doc["kind"] in CRD_KINDS:
        check_crd(doc)
        return
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(
                f"{doc['kind']}/{doc['metadata']['name']} invalid for {version}: {exc.message} "
                f"at {'.'.join(map(str, exc.path))}"
            ) from None


def check_crd(doc: Obj) -> None:
    kind, spec = doc["kind"], doc["spec"]
    if kind == "ExternalSecret":
        assert doc["apiVersion"] == "external-secrets.io/v1"
        assert spec["secretStoreRef"]["kind"] in ("ClusterSecretStore", "SecretStore")
        assert spec["secretStoreRef"]["name"]
        assert re.fullmatch(r"(\d+(ms|s|m|h))+", spec["refreshInterval"])
        template = spec["target"]["template"]
        assert template["engineVersion"] == "v2"
        assert "API_KEYS" in template["data"]
        secret_keys = {d["secretKey"] for d in spec["data"]}
        for value in template["data"].values():
            # every variable the template uses is fetched
            assert set(re.findall(r"\{\{ \.(\w+)", value)) <= secret_keys, value
        for item in spec["data"]:
            assert item["remoteRef"]["key"]
    elif kind == "ServiceMonitor":
        assert doc["apiVersion"] == "monitoring.coreos.com/v1"
        (endpoint,) = spec["endpoints"]
        assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
        assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == "server"
    elif kind == "PrometheusRule":
        assert doc["apiVersion"] == "monitoring.coreos.com/v1"
        rules = {r["alert"]: r for g in spec["groups"] for r in g["rules"]}
        read = rules["ThreadlineCheckpointReadLatencyHigh"]["expr"]
        assert "histogram_quantile(0.95" in read
        assert "threadline_checkpoint_read_duration_seconds_bucket" in read
        assert read.strip().endswith("> 0.1")
        errors = rules["ThreadlineCheckpointErrors"]["expr"]
        assert "rate(threadline_checkpoint_errors_total" in errors
        assert errors.strip().endswith("> 0.01")
        for rule in rules.values():
            assert rule["for"] and rule["labels"]["severity"]
    else:  # pragma: no cover
        raise AssertionError(kind)


@pytest.mark.parametrize("config", CONFIGS, ids=ids)
def test_every_object_is_valid(config: str | None) -> None:
    docs = rendered(config)
    assert docs
    for doc in docs:
        assert "namespace" not in doc["metadata"], "leave the namespace to the release"
        validate(doc)


@pytest.mark.parametrize("config", CONFIGS, ids=ids)
def test_service_wiring(config: str | None) -> None:
    """CHECKPOINT_* and REDIS_URL reach the container, sessions on db 0, checkpoints on db 1,
    whichever way the Redis password arrives."""
    docs = rendered(config)
    env = container_env(docs, service_container(docs))
    backend = env["CHECKPOINT_BACKEND"]
    assert backend in ("redis", "postgres")
    assert env["SESSION_BACKEND"] == "redis"
    for name in (
        "CHECKPOINT_REDIS_TTL",
        "CHECKPOINT_REDIS_CACHE_MB",
        "REDIS_URL",
        "CHECKPOINT_REDIS_URL",
        "API_KEYS",
    ):
        assert name in env, name
    assert env["REPLICA_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    if backend == "postgres":
        assert env["CHECKPOINT_POSTGRES_URL"]["secretKeyRef"]["key"] == "CHECKPOINT_POSTGRES_URL"
    for name, db in (("REDIS_URL", 0), ("CHECKPOINT_REDIS_URL", 1)):
        value = env[name]
        url = None
        if isinstance(value, str):
            # In the ConfigMap without a password; REDIS_PASSWORD (if any) comes from a Secret.
            url = value
            assert urls.parse_redis_url(url).password is None, value
        else:
            ref = value["secretKeyRef"]
            assert ref["key"] == name
            externals = objects(docs, "ExternalSecret")
            if externals:  # built by ESO: the template carries the db
                (es,) = externals
                assert es["spec"]["target"]["name"] == ref["name"]
                url = re.sub(r"\{\{.*?\}\}", "pw", es["spec"]["target"]["template"]["data"][name])
        if url is not None:  # the service's own parser: Sentinel and Cluster URLs too
            target = urls.parse_redis_url(urls.repair_redis_url(url))
            assert target.db == (0 if target.mode == "cluster" else db), url
    if "REDIS_PASSWORD" in env:
        assert "secretKeyRef" in env["REDIS_PASSWORD"]


def test_defaults_redis_without_password_in_configmap() -> None:
    docs = rendered(None)
    cm = one(docs, "ConfigMap")["data"]
    assert cm["CHECKPOINT_BACKEND"] == "redis" and cm["SESSION_BACKEND"] == "redis"
    assert cm["REDIS_URL"] == "redis://redis:6379/0"
    assert cm["CHECKPOINT_REDIS_URL"] == "redis://redis:6379/1"


@pytest.mark.parametrize("config", CONFIGS, ids=ids)
def test_hpa_and_replicas(config: str | None) -> None:
    docs = rendered(config)
    deployment = one(docs, "Deployment")
    hpas = objects(docs, "HorizontalPodAutoscaler")
    if config in FIXED_REPLICAS:
        assert not hpas and deployment["spec"]["replicas"] == FIXED_REPLICAS[config]
        return
    (hpa,) = hpas
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 10)
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 60
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"


@pytest.mark.parametrize("config", CONFIGS, ids=ids)
def test_pdb(config: str | None) -> None:
    docs = rendered(config)
    if config == "dev-values.yaml":  # one replica: a PDB would block every node drain
        assert not objects(docs, "PodDisruptionBudget")
        return
    pdb = one(docs, "PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1
    assert pdb["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize("config", CONFIGS, ids=ids)
def test_probes_and_termination(config: str | None) -> None:
    docs = rendered(config)
    deployment = one(docs, "Deployment")
    container = service_container(docs)
    port = container["ports"][0]
    assert port == {"name": "http", "containerPort": 8080, "protocol": "TCP"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    env = container_env(docs, container)
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    # preStop, then SIGTERM and DRAIN_SECONDS, then a margin before SIGKILL
    assert grace >= pre_stop + float(env["DRAIN_SECONDS"]) + 5


def test_termination_grace_follows_values() -> None:
    docs = helm_template(
        sets=[
            "config.drainSeconds=45",
            "lifecycle.preStopSleepSeconds=7",
            "lifecycle.terminationMarginSeconds=3",
        ]
    )
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 55
    assert one(docs, "ConfigMap")["data"]["DRAIN_SECONDS"] == "45"


# The idle timeout of the upstream connections that ingress-nginx (`upstream-keepalive-timeout`)
# and AWS's ALB keep open to reuse.
PROXY_IDLE_SECONDS = 60


def test_pods_keep_idle_connections_longer_than_the_proxy_in_front() -> None:
    """A pod closing an idle connection just as the proxy reuses it is a 502 for that request:
    the chart's keep-alive outlasts the common proxies' idle timeout, and a value sets it."""
    assert int(one(rendered(None), "ConfigMap")["data"]["HTTP_KEEPALIVE_SECONDS"]) > PROXY_IDLE_SECONDS
    docs = helm_template(sets=["config.httpKeepaliveSeconds=620"])
    assert one(docs, "ConfigMap")["data"]["HTTP_KEEPALIVE_SECONDS"] == "620"


@pytest.mark.parametrize("config", CONFIGS, ids=ids)
def test_security_context(config: str | None) -> None:
    docs = rendered(config)
    for workload, spec in pod_specs(docs):
        assert spec["automountServiceAccountToken"] is False
        pod_sc = spec["securityContext"]
        assert pod_sc["runAsNonRoot"] is True
        assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["runAsNonRoot"] is True
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            if container["name"] in ("threadline", "smoke"):
                assert sc["runAsUser"] == 10001 and sc["runAsGroup"] == 10001
            assert "resources" in container, workload["metadata"]["name"]
    account = objects(docs, "ServiceAccount")
    assert account and account[0]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("config", CONFIGS, ids=ids)
def test_network_policy(config: str | None) -> None:
    docs = rendered(config)
    env = container_env(docs, service_container(docs))
    policy = [p for p in objects(docs, "NetworkPolicy") if p["metadata"]["name"] == "t-threadline"]
    (policy,) = policy
    spec = policy["spec"]
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"}
    api, metrics = spec["ingress"]
    assert api["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert metrics["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    ports = {(p["port"], p["protocol"]) for rule in spec["egress"] for p in rule["ports"]}
    wanted = {(53, "UDP"), (53, "TCP"), *((p, "TCP") for p in REDIS_PORTS.get(config, {6379}))}
    if env["CHECKPOINT_BACKEND"] == "postgres":
        wanted.add((5432, "TCP"))
    if env["MODEL"] != "builtin":  # the provider's API (networkPolicy.modelEgress)
        wanted.add((443, "TCP"))
    assert ports == wanted
    assert all("ports" in rule for rule in spec["egress"]), "egress only to named ports"


def test_no_default_password_rendered() -> None:
    """No Secret of the defaults (or of the in-chart Redis) carries a password from values
    defaults; the in-chart Redis password is generated per install."""
    docs = rendered(None)
    for secret in objects(docs, "Secret"):
        data = dict(secret.get("stringData", {}))
        data.update({k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()})
        assert "REDIS_PASSWORD" not in data
        assert not any("redis://" in v and "@" in v for v in data.values())
    first = helm_template(CI_VALUES[0].parent / "inchart-redis-values.yaml")
    second = helm_template(CI_VALUES[0].parent / "inchart-redis-values.yaml")
    passwords = [
        base64.b64decode(one(docs_, "Secret", "t-threadline-redis")["data"]["redis-password"])
        for docs_ in (first, second)
    ]
    assert passwords[0] != passwords[1], "a generated password, not a default"
    assert all(len(p) >= 32 for p in passwords)


def test_by_default_the_helm_test_has_no_key_in_the_service() -> None:
    """adr/0006: no test key in the running service's API_KEYS and no raw key in any Secret
    unless asked; the default test checks readiness and a 401 through the Service."""
    docs = rendered(None)
    assert "t-threadline-test" not in {s["metadata"]["name"] for s in objects(docs, "Secret")}
    env = container_env(docs, service_container(docs))
    assert env["API_KEYS"] == {"secretKeyRef": {"name": "t-threadline", "key": "API_KEYS"}}
    assert "THREADLINE_USER_API_KEYS" not in env
    (smoke,) = one(docs, "Pod")["spec"]["containers"]
    assert smoke["args"] == ["smoke", "--url", "http://t-threadline:8080", "--no-key"]
    assert "env" not in smoke


def test_helm_test_with_an_existing_key_secret() -> None:
    docs = helm_template(sets=["tests.existingSecret=my-test-key"])
    assert "t-threadline-test" not in {s["metadata"]["name"] for s in objects(docs, "Secret")}
    (smoke,) = one(docs, "Pod")["spec"]["containers"]
    assert smoke["args"][:3] == ["smoke", "--url", "http://t-threadline:8080"]
    assert "--run-assistant" in smoke["args"] and "--no-key" not in smoke["args"]
    assert smoke["env"][0]["valueFrom"]["secretKeyRef"] == {
        "name": "my-test-key",
        "key": "THREADLINE_API_KEY",
    }
    env = container_env(docs, service_container(docs))
    assert env["API_KEYS"] == {"secretKeyRef": {"name": "t-threadline", "key": "API_KEYS"}}


def test_test_key_hash_matches_its_secret() -> None:
    """Asked for (tests.generateKey), the helm test pod's raw key and the sha256 in API_KEYS
    come from the same render."""
    import hashlib

    docs = helm_template(sets=["tests.generateKey=true"])
    key = base64.b64decode(one(docs, "Secret", "t-threadline-test")["data"]["THREADLINE_API_KEY"])
    env = container_env(docs, service_container(docs))
    assert env["API_KEYS"] == f"$(THREADLINE_USER_API_KEYS),helm-test:{hashlib.sha256(key).hexdigest()}"
    assert env["THREADLINE_USER_API_KEYS"]["secretKeyRef"]["key"] == "API_KEYS"
    names = [e["name"] for e in service_container(docs)["env"]]
    assert names.index("THREADLINE_USER_API_KEYS") < names.index("API_KEYS"), "$(VAR) needs order"
    pod = one(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (smoke,) = pod["spec"]["containers"]
    assert smoke["args"][:3] == ["smoke", "--url", "http://t-threadline:8080"]
    assert smoke["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "t-threadline-test"


def test_tests_disabled_renders_no_key() -> None:
    docs = rendered("existing-secret-values.yaml")
    assert not objects(docs, "Pod")
    assert "t-threadline-test" not in {s["metadata"]["name"] for s in objects(docs, "Secret")}
    env = container_env(docs, service_container(docs))
    assert env["API_KEYS"] == {"secretKeyRef": {"name": "threadline-secrets", "key": "API_KEYS"}}


def test_inchart_redis() -> None:
    docs = rendered("inchart-redis-values.yaml")
    sts = one(docs, "StatefulSet")
    (redis,) = sts["spec"]["template"]["spec"]["containers"]
    command = " ".join(redis["command"] + redis["args"])
    assert "--appendonly yes" in command and "--databases 16" in command
    assert '--requirepass "$REDIS_PASSWORD"' in command
    # Full is an error for writers, never an eviction (adr/0006).
    assert "--maxmemory 160mb --maxmemory-policy noeviction" in command
    assert redis["env"][0]["valueFrom"]["secretKeyRef"] == {
        "name": "t-threadline-redis",
        "key": "redis-password",
    }
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "2Gi"
    cm = one(docs, "ConfigMap")["data"]
    assert cm["REDIS_URL"] == "redis://t-threadline-redis:6379/0"
    assert cm["CHECKPOINT_REDIS_URL"] == "redis://t-threadline-redis:6379/1"
    env = container_env(docs, service_container(docs))
    assert env["REDIS_PASSWORD"]["secretKeyRef"] == {
        "name": "t-threadline-redis",
        "key": "redis-password",
    }
    assert one(docs, "Service", "t-threadline-redis")["spec"]["ports"][0]["port"] == 6379


def test_kind_values() -> None:
    docs = rendered("kind-values.yaml")
    container = service_container(docs)
    assert container["image"] == "threadline:dev"
    assert container["imagePullPolicy"] in ("Never", "IfNotPresent")
    service = one(docs, "Service", "t-threadline")
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["ports"][0]["nodePort"] == 30080
    env = container_env(docs, container)
    assert float(env["TURN_LEASE_SECONDS"]) <= 5
    assert objects(docs, "StatefulSet")


def test_monitoring_selects_the_service() -> None:
    docs = rendered("monitoring-ingress-values.yaml")
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service", "t-threadline")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [p["name"] for p in service["spec"]["ports"]] == ["http", "metrics"]
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]  # its own port
    env = container_env(docs, service_container(docs))
    assert env["METRICS_PORT"] == "9090" and env["DOCS_ENABLED"] == "false"
    ports = {p["name"]: p["containerPort"] for p in service_container(docs)["ports"]}
    assert ports == {"http": 8080, "metrics": 9090}
    ingress = one(docs, "Ingress")
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "t-threadline", "port": {"name": "http"}}
    assert not objects(rendered(None), "ServiceMonitor") and not objects(rendered(None), "PrometheusRule")


@pytest.mark.parametrize(
    ("sets", "to"),
    [
        ([], None),
        (["redis.host=10.20.0.3"], [{"ipBlock": {"cidr": "10.20.0.3/32"}}]),
        (
            ["networkPolicy.redisTo[0].namespaceSelector.matchLabels.team=data"],
            [{"namespaceSelector": {"matchLabels": {"team": "data"}}}],
        ),
    ],
    ids=["hostname: port only", "ip address", "peers given"],
)
def test_redis_egress_limited_to_the_configured_host_where_known(sets: list[str], to: list | None) -> None:
    docs = helm_template(sets=sets)
    policy = one(docs, "NetworkPolicy", "t-threadline")
    (redis_rule,) = [r for r in policy["spec"]["egress"] if {"port": 6379, "protocol": "TCP"} in r["ports"]]
    assert redis_rule.get("to") == to
