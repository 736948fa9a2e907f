"""skaffold.yaml parses, names paths that exist, and every profile deploys something that renders
(skaffold itself is not needed: the same helm/kubectl commands it would run are run here)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from chart.bundle import REPO, helm, kubectl, load_docs, service_container

pytestmark = pytest.mark.chart

SKAFFOLD = yaml.safe_load((REPO / "skaffold.yaml").read_text())


def effective(profile: str | None) -> dict[str, Any]:
    """The config a profile produces: its sections replace the top-level ones."""
    config = {k: v for k, v in SKAFFOLD.items() if k != "profiles"}
    if profile:
        (chosen,) = [p for p in SKAFFOLD["profiles"] if p["name"] == profile]
        config.update({k: v for k, v in chosen.items() if k != "name"})
    return config


def test_api_version() -> None:
    assert SKAFFOLD["kind"] == "Config"
    match = re.fullmatch(r"skaffold/v(\d+)beta(\d+)", SKAFFOLD["apiVersion"])
    assert match and (int(match[1]), int(match[2])) >= (4, 13)
    assert {p["name"] for p in SKAFFOLD["profiles"]} == {"dev", "kind", "example"}


@pytest.mark.parametrize("profile", [None, "dev", "kind", "example"])
def test_profile_builds_and_renders(profile: str | None) -> None:
    config = effective(profile)
    artifacts = config["build"]["artifacts"]
    built = [a["image"] for a in artifacts]
    for artifact in artifacts:
        context = REPO / artifact["context"]
        assert (context / artifact["docker"]["dockerfile"]).is_file()
        for required in artifact.get("requires", []):
            assert required["image"] in built[: built.index(artifact["image"])], "built before"
        for rule in artifact.get("sync", {}).get("manual", []):
            assert list(context.glob(rule["src"])), rule["src"]
            assert rule["src"].startswith(rule["strip"])
    image = built[-1]  # the image deployed: the last one built
    if len(artifacts) > 1:
        # The example's `FROM` is the base artifact, handed over as the build argument its
        # alias names (skaffold sets it to the image it built).
        example = artifacts[-1]
        dockerfile = (REPO / example["context"] / example["docker"]["dockerfile"]).read_text()
        (required,) = example["requires"]
        assert required["image"] == built[0]
        assert f"FROM ${{{required['alias']}}}\n" in dockerfile
        assert f"ARG {required['alias']}=" in dockerfile
    for release in config["deploy"].get("helm", {}).get("releases", []):
        key = image.replace("-", "_")
        assert release["setValueTemplates"]["image.repository"] == f"{{{{.IMAGE_REPO_{key}}}}}"
    docs: list[dict[str, Any]] = []
    if "helm" in config["deploy"]:
        for release in config["deploy"]["helm"]["releases"]:
            chart = REPO / release["chartPath"]
            args = ["template", release["name"], str(chart)]
            for values in release.get("valuesFiles", []):
                assert (REPO / values).is_file(), values
                args += ["-f", str(REPO / values)]
            # what skaffold substitutes for the templates
            for key in release.get("setValueTemplates", {}):
                args += ["--set", f"{key}=placeholder"]
            docs += load_docs(helm(*args).stdout)
    for path in config.get("manifests", {}).get("kustomize", {}).get("paths", []):
        assert (REPO / path / "kustomization.yaml").is_file(), path
        docs += load_docs(kubectl("kustomize", str(REPO / path)).stdout)
    assert docs, "the profile deploys nothing"
    container = service_container(docs)
    if "kustomize" in config.get("manifests", {}):
        # skaffold rewrites images by name: the artifact must be the overlay's image
        assert container["image"].split(":")[0] == image
    else:
        assert container["image"] == "placeholder:placeholder"
    for forward in config["portForward"]:
        services = [
            d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == forward["resourceName"]
        ]
        assert services, forward
        assert forward["port"] in [p["port"] for p in services[0]["spec"]["ports"]]
    if profile == "dev":
        assert "--reload" in " ".join(container["command"])
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        (rule,) = config["build"]["artifacts"][0]["sync"]["manual"]
        assert rule["dest"].startswith("/src") and "/src" in mounts
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
