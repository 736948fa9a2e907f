"""The suite itself: pytest imports test modules of folders without ``__init__.py`` by their
basename, so two ``test_x.py`` in such folders stop collection for the whole run (CI saw it)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique_outside_packages():
    seen: dict[str, list[Path]] = defaultdict(list)
    for module in TESTS.rglob("test_*.py"):
        if "node_modules" in module.parts or (module.parent / "__init__.py").exists():
            continue
        seen[module.name].append(module.relative_to(TESTS))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
