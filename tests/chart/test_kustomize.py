"""Kustomize overlays render, are valid, and stay equal to the chart where users depend on it."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from test_render import check_crd, validate

from chart.bundle import (
    OVERLAYS,
    REPO,
    Obj,
    container_env,
    helm_template,
    kubectl,
    kustomized,
    load_docs,
    objects,
    one,
    pod_specs,
    rendered,
    run,
    service_container,
)

pytestmark = pytest.mark.chart

# Set by the chart for the helm test key only (Kustomize has no test hook).
HELM_ONLY_ENV = {"THREADLINE_USER_API_KEYS"}
# How Redis credentials arrive differs by overlay (raw password vs ESO-built URLs).
CREDENTIAL_ENV = {"REDIS_PASSWORD"}


def chart_for(overlay: str) -> list[Obj]:
    return list(rendered("kind-values.yaml" if overlay == "kind" else None))


def env_names(docs: list[Obj]) -> set[str]:
    return set(container_env(docs, service_container(docs)))


def test_generated_files_are_fresh() -> None:
    proc = run(
        sys.executable,
        str(REPO / "scripts" / "render_kustomize.py"),
        "--check",
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_valid_objects(overlay: str) -> None:
    docs = list(kustomized(overlay))
    assert docs
    for doc in docs:
        validate(doc)
    assert len(objects(docs, "Deployment")) == 1


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_parity_with_chart(overlay: str) -> None:
    ours, chart = list(kustomized(overlay)), chart_for(overlay)
    mine, theirs = service_container(ours), service_container(chart)
    # same environment contract
    assert env_names(ours) - CREDENTIAL_ENV == env_names(chart) - HELM_ONLY_ENV - CREDENTIAL_ENV
    # same port, probes, security context, preStop
    for key in (
        "ports",
        "startupProbe",
        "readinessProbe",
        "livenessProbe",
        "securityContext",
        "lifecycle",
        "args",
    ):
        assert mine[key] == theirs[key], key
    (_, pod_ours), (_, pod_chart) = (
        next((w, s) for w, s in pod_specs(d) if w["kind"] == "Deployment") for d in (ours, chart)
    )
    assert pod_ours["securityContext"] == pod_chart["securityContext"]
    assert pod_ours["automountServiceAccountToken"] is False
    env = container_env(ours, mine)
    grace = pod_ours["terminationGracePeriodSeconds"]
    assert grace >= mine["lifecycle"]["preStop"]["sleep"]["seconds"] + float(env["DRAIN_SECONDS"]) + 5
    service = one(ours, "Service", "threadline")["spec"]
    assert service["ports"][0]["targetPort"] == "http"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_redis_dbs(overlay: str) -> None:
    docs = list(kustomized(overlay))
    env = container_env(docs, service_container(docs))
    for name, db in (("REDIS_URL", 0), ("CHECKPOINT_REDIS_URL", 1)):
        value = env[name]
        if isinstance(value, str):
            assert value.endswith(f"/{db}")
            assert "@" not in value, "no password in a ConfigMap"
        else:
            (es,) = objects(docs, "ExternalSecret")
            assert es["spec"]["target"]["template"]["data"][name].endswith(f"/{db}")


def test_production() -> None:
    docs = list(kustomized("production"))
    hpa = one(docs, "HorizontalPodAutoscaler")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 10)
    assert "replicas" not in one(docs, "Deployment")["spec"]
    pdb = one(docs, "PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    chart = list(rendered(None))
    assert hpa == one(chart, "HorizontalPodAutoscaler")["spec"] | {"scaleTargetRef": hpa["scaleTargetRef"]}
    resources = service_container(docs)["resources"]
    assert resources["requests"] and resources["limits"]["memory"]
    assert not objects(docs, "Secret") and not objects(docs, "StatefulSet")


def test_preview_gke() -> None:
    docs = list(kustomized("preview-gke"))
    es = one(docs, "ExternalSecret")
    check_crd(es)
    data = es["spec"]["target"]["template"]["data"]
    assert 'urlquery | replace "+" "%20"' in data["REDIS_URL"]
    assert es["spec"]["target"]["name"] == "threadline"
    assert not objects(docs, "Secret") and not objects(docs, "StatefulSet")
    env = container_env(docs, service_container(docs))
    assert "REDIS_PASSWORD" not in env
    # the same ExternalSecret the chart renders for the same values
    chart = helm_template(
        sets=[
            "fullnameOverride=threadline",
            "externalSecret.enabled=true",
            "externalSecret.secretStoreName=gcp-secret-manager",
            "externalSecret.remoteRefs.apiKeys.key=threadline-preview-api-keys",
            "externalSecret.remoteRefs.redisPassword.key=threadline-preview-redis-password",
            "redis.host=10.10.0.3",
        ]
    )
    assert one(chart, "ExternalSecret")["spec"]["target"]["template"]["data"] == data


def test_kind() -> None:
    docs = list(kustomized("kind"))
    container = service_container(docs)
    assert container["image"] == "threadline:dev"
    assert container["imagePullPolicy"] in ("Never", "IfNotPresent")
    service = one(docs, "Service", "threadline")["spec"]
    chart_service = one(list(rendered("kind-values.yaml")), "Service", "t-threadline")["spec"]
    assert service["type"] == chart_service["type"] == "NodePort"
    assert service["ports"][0]["nodePort"] == chart_service["ports"][0]["nodePort"]
    env = container_env(docs, container)
    assert float(env["TURN_LEASE_SECONDS"]) <= 5
    assert one(docs, "Deployment")["spec"]["replicas"] == 3
    sts = one(docs, "StatefulSet")
    (redis,) = sts["spec"]["template"]["spec"]["containers"]
    assert "--appendonly yes" in redis["args"][0] and "--databases 16" in redis["args"][0]
    # the service and Redis read the same password
    (svc_secret,) = [
        s
        for s in objects(docs, "Secret")
        if s["metadata"]["name"].startswith("threadline-") and "API_KEYS" in s["data"]
    ]
    (redis_secret,) = [s for s in objects(docs, "Secret") if "redis-password" in s["data"]]
    assert svc_secret["data"]["REDIS_PASSWORD"] == redis_secret["data"]["redis-password"]
    assert env["REDIS_PASSWORD"]["secretKeyRef"]["name"] == svc_secret["metadata"]["name"]
    assert redis["env"][0]["valueFrom"]["secretKeyRef"]["name"] == redis_secret["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_config_is_generated_so_a_change_rolls_the_pods(overlay: str) -> None:
    """The ConfigMap's name carries a hash of its data and the Deployment refers to it by that
    name: a changed value is a new name, hence a new pod template (kubectl rolls the pods)."""
    docs = list(kustomized(overlay))
    (config,) = objects(docs, "ConfigMap")
    (ref,) = [s["configMapRef"]["name"] for s in service_container(docs)["envFrom"] if "configMapRef" in s]
    assert ref == config["metadata"]["name"] and ref.startswith("threadline-")


def test_an_overlay_config_change_renames_the_configmap(tmp_path: Path) -> None:
    tree = tmp_path / "deployments"
    shutil.copytree(REPO / "deployments", tree)
    kustomization = tree / "overlays" / "dev" / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace("LOG_LEVEL=DEBUG", "LOG_LEVEL=INFO"))
    before = one(kustomized("dev"), "ConfigMap")["metadata"]["name"]
    after = load_docs(kubectl("kustomize", str(tree / "overlays" / "dev")).stdout)
    (config,) = objects(after, "ConfigMap")
    assert config["data"]["LOG_LEVEL"] == "INFO"
    assert config["metadata"]["name"] != before
    assert service_container(after)["envFrom"][0]["configMapRef"]["name"] == config["metadata"]["name"]


def test_no_positional_patches() -> None:
    """A JSON patch path with a list index (``env/2``) ties an overlay to the chart's render
    order; patches address list items by name (strategic merge) instead."""
    for path in (REPO / "deployments").rglob("*.yaml"):
        for line in path.read_text().splitlines():
            assert not re.search(r"path:\s*/\S*/\d+(/|\s|$)", line), f"{path}: {line.strip()}"


def test_every_generated_file_has_its_values_beside_it() -> None:
    """Overlay data lives in the overlays: each generated file renders from a sibling
    ``*.values.yaml``, not from values written into the script."""
    for generated in (REPO / "deployments").rglob("*.generated.yaml"):
        name = generated.name.removesuffix(".generated.yaml")
        assert (generated.parent / f"{name}.values.yaml").exists(), generated
