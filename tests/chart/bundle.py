"""Shared helpers for the chart tests (a module, not a conftest, so they are imported by name
and never confused with another directory's conftest): the real helm and kubectl, rendering,
object lookup.

The binaries come from ``scripts/install-tools.sh`` (``$REPO/.tools/bin``); when they are missing
the session installs them once, so these tests fail rather than skip on a machine without them.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "threadline"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
OVERLAYS = ("dev", "kind", "preview-gke", "production")
TOOLS_BIN = REPO / ".tools" / "bin"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schemas the
# validator bundles: every rendered object must be valid for both.
KUBE_VERSIONS = ("1.30.0", "1.37.0")
CRD_KINDS = {"ExternalSecret", "ServiceMonitor", "PrometheusRule"}
RELEASE = "t"

Obj = dict[str, Any]


@functools.cache
def tool(name: str) -> str:
    """Path of ``helm`` or ``kubectl``: ours, installing them first when absent."""
    ours = TOOLS_BIN / name
    if not os.access(ours, os.X_OK):
        subprocess.run([str(REPO / "scripts" / "install-tools.sh")], check=True)
    if os.access(ours, os.X_OK):
        return str(ours)
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found after scripts/install-tools.sh")
    return found


def run(*args: str, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing text output; on failure the error shows stderr."""
    proc = subprocess.run(args, check=False, capture_output=True, text=True, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(tool("helm"), *args, check=check)


def kubectl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(tool("kubectl"), *args, check=check)


def load_docs(text: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def helm_template(
    *values: Path, sets: Iterable[str] = (), chart: Path = CHART, check: bool = True
) -> list[Obj] | subprocess.CompletedProcess[str]:
    """``helm template`` the chart; the rendered objects, or the process when check=False."""
    args = ["template", RELEASE, str(chart), "--namespace", "threadline"]
    for path in values:
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    proc = helm(*args, check=check)
    return load_docs(proc.stdout) if check else proc


@functools.cache
def rendered(values_name: str | None) -> tuple[Obj, ...]:
    """The chart rendered with the defaults (None) or one ``ci/`` values file (cached)."""
    files = () if values_name is None else (CHART / "ci" / values_name,)
    return tuple(helm_template(*files))


@functools.cache
def kustomized(overlay: str) -> tuple[Obj, ...]:
    """``kubectl kustomize`` of one overlay (cached)."""
    proc = kubectl("kustomize", str(REPO / "deployments" / "overlays" / overlay))
    return tuple(load_docs(proc.stdout))


def objects(docs: Iterable[Obj], kind: str) -> list[Obj]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: Iterable[Obj], kind: str, name: str | None = None) -> Obj:
    found = [d for d in objects(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"want exactly one {kind} {name or ''}, got {len(found)}"
    return found[0]


def pod_specs(docs: Iterable[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """(workload, pod spec) of every Deployment, StatefulSet and bare Pod."""
    for doc in docs:
        if doc.get("kind") in ("Deployment", "StatefulSet"):
            yield doc, doc["spec"]["template"]["spec"]
        elif doc.get("kind") == "Pod":
            yield doc, doc["spec"]


def service_container(docs: Iterable[Obj]) -> Obj:
    """The threadline container of the service Deployment."""
    deployments = [
        d
        for d in objects(docs, "Deployment")
        if d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "server"
    ]
    assert len(deployments) == 1, "want one server Deployment"
    (container,) = [
        c for c in deployments[0]["spec"]["template"]["spec"]["containers"] if c["name"] == "threadline"
    ]
    return container


def container_env(docs: Iterable[Obj], container: Obj) -> dict[str, Any]:
    """The container's environment, resolved: ConfigMap values by name, explicit ``env``
    entries (value, or their valueFrom) on top, the way the kubelet applies them."""
    docs = list(docs)
    env: dict[str, Any] = {}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef")
        if ref:
            env.update(one(docs, "ConfigMap", ref["name"])["data"])
    for entry in container.get("env", []):
        env[entry["name"]] = entry.get("value", entry.get("valueFrom"))
    return env
