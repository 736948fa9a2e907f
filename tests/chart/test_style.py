"""The chart's house rules: every values key documented (`# --`), every define named
`threadline.*` under a `{{/* */}}` comment, one Kubernetes kind per template file, no
`metadata.namespace`, every `fail` naming a values key."""

from __future__ import annotations

import re

import pytest
import yaml

from chart.bundle import CHART

pytestmark = pytest.mark.chart

KEY = re.compile(r"^(\s*)([A-Za-z][\w.-]*):")
# Keys whose value is a free-form default (a Kubernetes structure), not chart settings.
FREE_FORM = {"resources"}


def test_every_values_key_is_documented() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented, stack = [], []  # stack of (indent, key)
    for number, line in enumerate(lines):
        match = KEY.match(line)
        if not match or line.lstrip().startswith("- "):
            continue
        indent, key = len(match[1]), match[2]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        free = any(k in FREE_FORM for _, k in stack)
        stack.append((indent, key))
        if free:
            continue
        # the comment block right above the key: its first line starts with `# --`
        above = number - 1
        while (
            above >= 0
            and lines[above].strip().startswith("#")
            and not lines[above].strip().startswith("# --")
        ):
            above -= 1
        if above < 0 or not lines[above].strip().startswith("# --"):
            undocumented.append(".".join(k for _, k in stack))
    assert not undocumented, f"values keys without a `# --` comment: {undocumented}"


def test_defines_are_named_and_commented() -> None:
    for path in (CHART / "templates").rglob("*.tpl"):
        text = path.read_text()
        defines = re.findall(r"\{\{-? define \"([^\"]+)\"", text)
        assert defines
        for name in defines:
            assert name.startswith("threadline."), name
            assert re.search(r"\{\{/\*\s*\n" + re.escape(name) + r"[: ]", text), f"{name} needs a comment"


def test_templates_one_kind_no_namespace() -> None:
    for path in (CHART / "templates").rglob("*.yaml"):
        text = path.read_text()
        kinds = set(re.findall(r"^kind: (\w+)", text, re.M))
        assert len(kinds) == 1, (path.name, kinds)
        assert "namespace:" not in re.sub(r"#.*", "", text.split("spec:")[0]), path


def test_fail_messages_name_a_values_key() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def exists(dotted: str) -> bool:
        node = values
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    text = (CHART / "templates" / "_helpers.tpl").read_text()
    messages = re.findall(r'fail (?:\(printf )?"([^"]+)"', text)
    assert len(messages) >= 10
    for message in messages:
        keys = re.findall(r"\b([a-z][A-Za-z]*\.[A-Za-z.]+[A-Za-z])", message)
        assert any(exists(k) for k in keys), f"fail without a values key: {message}"
