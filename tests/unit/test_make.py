"""What the Makefile's entry points install: `make run` the runtime alone, `make test` the test
tools besides, `make tools` helm/kubectl into .tools/bin; and nothing in `make install` stops,
disables or starts a service the user runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def planned(target: str, tmp_path: Path, *args: str) -> list[str]:
    """The commands `make -n TARGET` would run for a fresh virtualenv. `--no-print-directory`:
    under `make test` (CI) this is a sub-make, which would add "Entering directory" lines."""
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", target, f"VENV={tmp_path / 'venv'}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def test_make_run_installs_the_runtime_only(tmp_path: Path) -> None:
    commands = planned("run", tmp_path)
    installs = [c for c in commands if "pip install" in c and "--upgrade pip" not in c]
    assert installs == [f"{tmp_path / 'venv'}/bin/python -m pip install -q -e service"]
    assert commands[-1].endswith("scripts/run-dev.sh")
    assert not any("install-system" in c or "install-tools" in c for c in commands)


def test_make_run_adds_the_provider_extras_asked_for(tmp_path: Path) -> None:
    commands = planned("run", tmp_path, "EXTRAS=openai")
    assert f"{tmp_path / 'venv'}/bin/python -m pip install -q -e 'service[openai]'" in commands


def test_make_test_adds_the_test_tools(tmp_path: Path) -> None:
    commands = planned("test", tmp_path)
    assert f"{tmp_path / 'venv'}/bin/python -m pip install -q -e 'service[test]'" in commands
    assert "scripts/install-system.sh" in commands and "scripts/install-tools.sh" in commands


def test_make_tools_is_helm_and_kubectl_alone(tmp_path: Path) -> None:
    assert planned("tools", tmp_path) == ["scripts/install-tools.sh"]
    script = (ROOT / "scripts" / "install-tools.sh").read_text()
    assert "apt-get" not in script and "systemctl" not in script and "pip install" not in script


def test_install_system_never_stops_disables_or_starts_a_service() -> None:
    script = (ROOT / "scripts" / "install-system.sh").read_text()
    code = [line for line in script.splitlines() if not line.lstrip().startswith("#")]
    for word in ("systemctl", "service ", "invoke-rc.d", "pkill", "killall"):
        assert not any(word in line for line in code), word
    # the packages it installs are kept from starting their servers
    assert "policy-rc.d" in script and "exit 101" in script
