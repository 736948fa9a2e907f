"""The image installs from service/requirements.lock (and requirements-<extra>.lock for each
provider extra its EXTRAS build argument names): each must pin every dependency of pyproject it
covers, with hashes, and be what `make lock` would write today."""

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
EXTRAS = tomllib.loads((SERVICE / "pyproject.toml").read_text())["project"]["optional-dependencies"]
PROVIDERS = sorted(set(EXTRAS) - {"test"})
LOCKS = [LOCK, *(SERVICE / f"requirements-{extra}.lock" for extra in PROVIDERS)]


def locked(lock: Path = LOCK) -> dict[str, str]:
    """``{name: version}`` of every pinned line of ``lock``."""
    pins = {}
    for line in lock.read_text().splitlines():
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


def test_each_provider_lock_is_the_runtime_plus_its_extra() -> None:
    base = locked()
    assert PROVIDERS == ["anthropic", "google-genai", "ollama", "openai"]
    for extra in PROVIDERS:
        pins = locked(SERVICE / f"requirements-{extra}.lock")
        # the whole runtime (a complete install on its own; a pin may differ where the
        # provider needs it, e.g. google-genai's tenacity)...
        assert not set(base) - set(pins), f"requirements-{extra}.lock lacks {set(base) - set(pins)}"
        # ...and the extra's packages at their pins
        for entry in EXTRAS[extra]:
            requirement = Requirement(entry)
            (spec,) = requirement.specifier
            assert pins.get(requirement.name.lower()) == spec.version, f"{entry}: requirements-{extra}.lock"


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_every_locked_package_carries_a_hash(lock: Path) -> None:
    lines = lock.read_text().splitlines()
    for line, following in itertools.pairwise(lines):
        if line and not line.startswith((" ", "#")):
            assert following.lstrip().startswith("--hash=sha256:"), f"no hash for {line}"


def test_the_dockerfile_installs_from_the_lock_with_hashes() -> None:
    dockerfile = (SERVICE / "Dockerfile").read_text()
    assert "--require-hashes -r /src/service/requirements.lock" in dockerfile
    # EXTRAS: each provider's lock, with hashes too
    assert '--require-hashes -r "/src/service/requirements-$extra.lock"' in dockerfile
    # ...and the build context has them (the first dry-run release build missed them)
    ignore = (SERVICE.parent / ".dockerignore").read_text().splitlines()
    assert "!service/requirements.lock" in ignore and "!service/requirements-*.lock" in ignore


def test_lock_is_what_make_lock_writes(tmp_path: Path) -> None:
    """Re-resolve with the committed lock as the starting point (uv keeps pins that still fit):
    any change means pyproject moved without `make lock`. Needs the package index."""
    for lock in LOCKS:
        shutil.copy(lock, tmp_path / lock.name)
    make_lock = ["make", "-s", "lock", f"LOCK_DIR={tmp_path}"]
    subprocess.run(make_lock, cwd=MAKEFILE.parent, check=True, timeout=300)
    for lock in LOCKS:
        fresh = (tmp_path / lock.name).read_text()
        assert fresh == lock.read_text(), f"service/{lock.name} is stale: run `make lock`"
