"""The image installs from service/requirements.lock: it must pin every runtime dependency of
pyproject, with hashes, and be what `make lock` would write today."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.unit

SERVICE = Path(__file__).resolve().parents[2] / "service"
LOCK = SERVICE / "requirements.lock"
MAKEFILE = SERVICE.parent / "Makefile"


def locked() -> dict[str, str]:
    """``{name: version}`` of every pinned line of the lock."""
    pins = {}
    for line in LOCK.read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            requirement = Requirement(line.rstrip(" \\"))
            (spec,) = requirement.specifier
            assert spec.operator == "==", line
            pins[requirement.name.lower()] = spec.version
    return pins


def test_every_direct_dependency_is_locked_at_its_pin() -> None:
    pins = locked()
    direct = tomllib.loads((SERVICE / "pyproject.toml").read_text())["project"]["dependencies"]
    for entry in direct:
        requirement = Requirement(entry)
        (spec,) = requirement.specifier
        assert pins.get(requirement.name.lower()) == spec.version, f"{entry} is not locked as pinned"


def test_every_locked_package_carries_a_hash() -> None:
    lines = LOCK.read_text().splitlines()
    for line, following in itertools.pairwise(lines):
        if line and not line.startswith((" ", "#")):
            assert following.lstrip().startswith("--hash=sha256:"), f"no hash for {line}"


def test_the_dockerfile_installs_from_the_lock_with_hashes() -> None:
    dockerfile = (SERVICE / "Dockerfile").read_text()
    assert "--require-hashes -r /src/service/requirements.lock" in dockerfile


def test_lock_is_what_make_lock_writes(tmp_path: Path) -> None:
    """Re-resolve with the committed lock as the starting point (uv keeps pins that still fit):
    any change means pyproject moved without `make lock`. Needs the package index."""
    out = tmp_path / "requirements.lock"
    shutil.copy(LOCK, out)
    subprocess.run(["make", "-s", "lock", f"LOCK_OUT={out}"], cwd=MAKEFILE.parent, check=True, timeout=300)
    assert out.read_text() == LOCK.read_text(), "service/requirements.lock is stale: run `make lock`"
