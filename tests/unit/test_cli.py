"""`threadline --help` says what threadline is and that configuration is environment-only;
`--version` prints the package's version."""

from __future__ import annotations

import subprocess
import sys

import pytest

from threadline import __version__

pytestmark = pytest.mark.unit


def cli(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "threadline", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_version() -> None:
    done = cli("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"threadline {__version__}"


def test_help_describes_the_service_and_its_configuration() -> None:
    done = cli("--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "self-hosted LangGraph server for your own graphs" in text
    assert "Configuration is read from the environment only" in text
    for command in ("serve", "hash-key", "smoke"):
        assert command in text
