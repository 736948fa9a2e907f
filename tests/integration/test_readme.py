"""The README's curl and SDK sessions work as written against `make run`'s server (scripts/run-dev.sh),
and the commands of its bash blocks and of docs/*.md name what exists in this checkout."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from servers import free_port, wait_for_port, wait_for_ready

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def wait_ready(port: int, timeout: float = 120) -> None:
    """Until /readyz answers 200 (the port opens before the stores do)."""
    wait_for_port(port, timeout=timeout)
    wait_for_ready(f"http://127.0.0.1:{port}", timeout)


def run_against_make_run(
    tmp_path: Path, heading: str, fence: str, command: list[str], document: Path = ROOT / "README.md"
) -> str:
    """Start `make run`'s server (scripts/run-dev.sh) on a free port, run the ``document``'s
    first ``fence`` block under ``heading`` against it with ``command``, and return its output."""
    text = document.read_text()
    session = re.search(rf"{heading}.*?```{fence}\n(.*?)```", text, re.S).group(1)
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "PY": sys.executable,
        "CHECKPOINT_SQLITE_PATH": str(tmp_path / "checkpoints.sqlite"),
    }
    server = subprocess.Popen(
        ["scripts/run-dev.sh"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_ready(port, timeout=60)
        done = subprocess.run(
            [*command, session.replace("localhost:8080", f"localhost:{port}")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    assert done.returncode == 0, done.stderr
    return done.stdout


# bash and zsh (macOS's default, where an unquoted `?` is a glob): both from scripts/install-system.sh
SHELLS = ("bash", "zsh")


@pytest.mark.parametrize("shell", SHELLS)
def test_readme_curl_session_against_make_run(tmp_path, shell):
    assert shutil.which(shell), f"{shell} missing: scripts/install-system.sh installs it"
    out = run_against_make_run(tmp_path, "## Talk to it", "bash", [shell, "-euo", "pipefail", "-c"])
    assert out.count('"turn":1,"reply":{"id":"msg-1.reply"') == 2  # the retry got the stored reply
    assert "event: done" in out and "you said: and now stream it" in out
    assert out.rstrip().endswith("204")


def test_readme_sdk_session_against_make_run(tmp_path):
    out = run_against_make_run(tmp_path, "## Talk to it with langgraph-sdk", "python", [sys.executable, "-c"])
    lines = out.splitlines()
    assert lines[0] == "['chat']"
    assert lines[1].startswith("turn 1 · history") and lines[1].endswith("you said: hello")
    assert lines[2].startswith("turn 2 · history") and lines[2].endswith("you said: stream it")
    assert lines[3].startswith("turn 3 · history") and lines[3].endswith("you said: bye")
    assert lines[4] == "idle 6"
    assert lines[5] == "support 2"


def test_the_mcp_client_session_of_the_api_doc_against_make_run(tmp_path):
    document = ROOT / "docs" / "langgraph-api.md"
    out = run_against_make_run(tmp_path, "## MCP and A2A", "python", [sys.executable, "-c"], document)
    tools, result = out.splitlines()
    assert tools == "['chat']"
    assert "you said: hello" in result


def test_readme_memory_session_against_make_run(tmp_path):
    out = run_against_make_run(tmp_path, "## Memory across threads", "python", [sys.executable, "-c"])
    assert out.splitlines() == ["['drink']", "[['memories', 'me']]"]


# --- the newcomer's path: a real model, your own graph, the chart and image commands ----------


def section(heading: str, readme: Path = ROOT / "README.md") -> str:
    """The text of the README section under ``heading`` (up to the next heading of its level)."""
    text = readme.read_text()
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n")
    end = text.find(f"\n{level} ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def blocks(text: str, fence: str) -> list[str]:
    return re.findall(rf"```{fence}\n(.*?)```", text, re.S)


def commands(block: str) -> list[str]:
    """The block's commands, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [
        line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def serve_block(block: str, env: dict[str, str]) -> subprocess.Popen:
    """Start a README block that serves (it ends in `make run`) exactly as written, in bash."""
    return subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def run_beside(
    server: subprocess.Popen, port: int, command: list[str], script: str
) -> subprocess.CompletedProcess:
    try:
        wait_ready(port)
        return subprocess.run(
            [*command, script.replace("localhost:8080", f"localhost:{port}")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def make_run_env(tmp_path: Path, port: int, **extra: str) -> dict[str, str]:
    python_bin = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": f"{python_bin}:{os.environ['PATH']}",
        "VENV": str(Path(sys.executable).parents[1]),
        "PORT": str(port),
        "CHECKPOINT_SQLITE_PATH": str(tmp_path / "checkpoints.sqlite"),
        **extra,
    }


def test_readme_real_model_against_a_local_openai_compatible_server(tmp_path):
    from fake_openai import FakeOpenAI

    start, talk = blocks(section("## Use a real model"), "bash")[:2]
    assert "make run EXTRAS=openai MODEL=openai:gpt-4o-mini" in start
    port = free_port()
    with FakeOpenAI() as fake:
        # The block as written (its `export OPENAI_API_KEY=…` included); the provider is local.
        server = serve_block(start, make_run_env(tmp_path, port, OPENAI_BASE_URL=fake.base_url))
        done = run_beside(server, port, ["bash", "-euo", "pipefail", "-c"], talk)
        assert done.returncode == 0, done.stderr
        reply = json.loads(done.stdout)["reply"]["content"]
        assert reply.startswith("fake says: Say hello in five words."), reply
        (call,) = [r for r in fake.requests if r["path"] == "/v1/chat/completions"]
        assert call["model"] == "gpt-4o-mini" and call["authorization"] == "Bearer sk-your-key"


def test_readme_own_graph_locally_then_the_sdk(tmp_path):
    text = section("## Deploy your own graph")
    local = blocks(text, "bash")[0]
    assert local.strip() == "LANGGRAPH_CONFIG=examples/refunds/langgraph.json make run"
    example_readme = blocks((ROOT / "examples" / "refunds" / "README.md").read_text(), "python")[0]
    for script in (blocks(text, "python")[0], example_readme):
        port = free_port()
        server = serve_block(local, make_run_env(tmp_path, port))
        done = run_beside(server, port, [sys.executable, "-c"], script)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert "interrupted" in lines
        assert lines[-1] == "your refund of 250 is approved"
    assert "custom {'node': 'review', 'waiting_for': 'a human'}" in done.stdout or script is example_readme


CHART_VERSION = re.search(r"^version: (\S+)$", (ROOT / "charts/threadline/Chart.yaml").read_text(), re.M)[1]
OCI_CHART = "oci://ghcr.io/threadline/charts/threadline"


# The README and the pages its long topics moved to (issue 20): their bash blocks are held to
# the same truth.
DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))


def documented_commands() -> list[str]:
    """The commands of every bash block of the README and of docs/*.md."""
    return [c for path in DOCUMENTS for b in blocks(path.read_text(), "bash") for c in commands(b)]


def readme_commands(prefix: str) -> list[str]:
    found = [c for c in documented_commands() if c.startswith(prefix)]
    assert found, prefix
    return found


def make_targets() -> set[str]:
    """The targets the Makefile defines (`name:` rules; `NAME := value` is no rule)."""
    rules = re.findall(r"^([\w.-]+(?:[ \t]+[\w.-]+)*)[ \t]*:(?!=)", (ROOT / "Makefile").read_text(), re.M)
    return {target for rule in rules for target in rule.split()}


# A word naming a file of this checkout: it must exist (a script, a values file, an example).
REPO_PATH = re.compile(r"^(?:scripts|examples|charts|deployments|tests|service|docs|adr)/[\w./-]*$")


def simple_commands(command: str) -> list[list[str]]:
    """``command``'s simple commands (split at `|`, `&&`, `;`, `&`, `(`, `)`), as words, without
    the `VAR=value` assignments before each."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    found: list[list[str]] = [[]]
    for token in lexer:
        if set(token) <= set("|&;()<>"):
            found.append([])
        elif found[-1] or not re.match(r"^[A-Za-z_]\w*=", token):
            found[-1].append(token)
    return [words for words in found if words]


def missing(text: str, targets: set[str]) -> list[str]:
    """What the bash blocks of ``text`` (and its inline `make …` spans) name that this checkout
    lacks: a make target the Makefile does not define, a repository file that is not there, a
    script run by its path that is not executable."""
    problems = [
        f"make {target}: no such target"
        for target in re.findall(r"`make ([a-z][\w-]*)", text)
        if target not in targets
    ]
    for block in blocks(text, "bash"):
        for command in commands(block):
            for words in simple_commands(command):
                if words[0] == "make":
                    for word in words[1:]:
                        if not word.startswith("-") and "=" not in word and word not in targets:
                            problems.append(f"{command}: make target {word!r} does not exist")
                for i, word in enumerate(words):
                    path = word.rsplit("=", 1)[-1]
                    if not REPO_PATH.match(path):
                        continue
                    if not (ROOT / path).exists():
                        problems.append(f"{command}: {path} does not exist")
                    elif i == 0 and not os.access(ROOT / path, os.X_OK):
                        problems.append(f"{command}: {path} is run but not executable")
    return problems


def test_documented_make_targets_and_scripts_exist():
    """Every make target and repository file the README's and docs/*.md's bash blocks use exists
    (and a script they run is executable), so a command that moved to docs/ is still checked."""
    targets = make_targets()
    assert {"run", "test", "help", "bench", "chaos"} <= targets
    problems = {path.name: missing(path.read_text(), targets) for path in DOCUMENTS}
    assert not any(problems.values()), problems
    # The scan sees what it should: the newcomer's commands and those that moved to docs/.
    used = [words for c in documented_commands() for words in simple_commands(c)]
    made = {w for words in used if words[0] == "make" for w in words[1:]}
    assert {"run", "test", "chaos", "kind-test", "bench", "bench-service", "bench-api"} <= made, made
    run = {words[0] for words in used if REPO_PATH.match(words[0])}
    assert {"scripts/kind-up.sh", "scripts/chaos.py", "scripts/kind-down.sh"} <= run, run


def test_the_command_scan_fails_on_a_missing_target_or_script():
    text = (
        "Run `make bench-nothing`.\n\n```bash\nmake run no-such-target EXTRAS=openai\n"
        "KEY=1 scripts/no-such.sh --x && helm install t charts/threadline -f charts/nowhere.yaml\n"
        "scripts/release.sh\nREADME.md\n```\n"
    )
    found = missing(text, make_targets())
    assert len(found) == 4, found
    assert "make bench-nothing: no such target" in found
    assert any("'no-such-target'" in p for p in found) and not any("'run'" in p for p in found)
    assert any("scripts/no-such.sh does not exist" in p for p in found)
    assert any("charts/nowhere.yaml does not exist" in p for p in found)


def as_template(command: str) -> str:
    """`helm install` as `helm template` (nothing needs a cluster), the published chart as this
    checkout's (the same chart: the release packages it, tests/chart/test_release.py)."""
    command = command.replace("helm install ", "helm template ", 1)
    if OCI_CHART in command:
        command = command.replace(f"{OCI_CHART} --version {CHART_VERSION}", "charts/threadline")
        assert OCI_CHART not in command, f"the published chart without --version {CHART_VERSION}: {command}"
    return command


def test_readme_helm_commands_render_as_written():
    from chart.bundle import TOOLS_BIN, load_docs, tool

    tool("helm")
    env = {
        **os.environ,
        "PATH": f"{TOOLS_BIN}:{os.environ['PATH']}",
        "HASH": "0" * 64,
        "KEY": "raw-key",
        "REDIS_PASSWORD": "p@ss word/+",
        "OPENAI_API_KEY": "sk-readme",
    }
    installs = readme_commands("helm install ")
    assert len(installs) >= 5
    rendered = {}
    for command in installs:
        for shell in SHELLS:
            done = subprocess.run(
                [shell, "-c", as_template(command)], cwd=ROOT, env=env, capture_output=True, text=True
            )
            assert done.returncode == 0, f"{command}\n{done.stderr}"
        docs = load_docs(done.stdout)
        assert any(d["kind"] == "Deployment" for d in docs), command
        rendered[command] = docs
    kind = [docs for command, docs in rendered.items() if "kind-values.yaml" in command]
    assert kind and all(not any(d["kind"] == "HorizontalPodAutoscaler" for d in docs) for docs in kind)
    provider = [docs for command, docs in rendered.items() if "provider-values.yaml" in command]
    assert provider and all("OPENAI_API_KEY" in str(docs) for docs in provider)
    runs = [docs for command, docs in rendered.items() if "tests.run.input" in command]
    assert runs
    for docs in runs:
        (pod,) = [d for d in docs if d["kind"] == "Pod"]
        args = pod["spec"]["containers"][0]["args"]
        assert json.loads(args[args.index("--run-input") + 1]) == {"request": "where is my parcel?"}


def test_readme_kustomize_commands_render():
    from chart.bundle import kubectl

    for command in readme_commands("kubectl apply -k "):
        kubectl("kustomize", str(ROOT / shlex.split(command, comments=True)[3]))


def test_readme_image_commands_fit_the_dockerfiles():
    """What can be checked here without a Docker engine (`make image-test` builds both images
    for real): each `docker build` names a context with a Dockerfile that declares every build
    argument given, `kind load` loads an image the README built, and the example's default base
    is the image the release publishes and the chart pulls."""
    builds = readme_commands("docker build ")
    built = set()
    for command in builds:
        words = shlex.split(command, comments=True)
        context = ROOT / words[-1]
        dockerfile = (context / "Dockerfile").read_text()
        for i, word in enumerate(words):
            if word == "--build-arg":
                name = words[i + 1].split("=", 1)[0]
                assert re.search(rf"^ARG {name}[=\n]", dockerfile, re.M), f"{name} not an ARG: {command}"
            if word == "-t":
                built.add(words[i + 1])
    for command in readme_commands("kind load docker-image "):
        assert shlex.split(command, comments=True)[3] in built, command
    app_version = re.search(
        r'^appVersion: "(\S+)"$', (ROOT / "charts/threadline/Chart.yaml").read_text(), re.M
    )[1]
    example = (ROOT / "examples" / "refunds" / "Dockerfile").read_text()
    assert f"ARG THREADLINE_IMAGE=ghcr.io/threadline/threadline:{app_version}\n" in example
    values = (ROOT / "charts/threadline/values.yaml").read_text()
    assert "  repository: ghcr.io/threadline/threadline\n" in values
    # every provider extra the README (or docs/) names for the image or `make run` has its lock
    text = "\n".join(path.read_text() for path in DOCUMENTS)
    named = re.findall(r"(?:make image|make run|--build-arg) EXTRAS=([\w,-]+)", text)
    assert named
    for extra in {e for group in named for e in group.split(",")}:
        assert (ROOT / "service" / f"requirements-{extra}.lock").is_file(), extra


def anchors(path: Path) -> set[str]:
    """The anchors GitHub makes of ``path``'s headings (lowercased, punctuation but `-` dropped,
    spaces as `-`), fenced blocks left out."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.*)$", text, re.M)
    }


def test_readme_and_docs_links_resolve():
    """Every relative link of the README and docs/*.md names a file of this checkout and, with a
    `#fragment`, a heading of that page: a section that moved to docs/ (issue 20) leaves no
    link behind to where it was. Each page opens with its title and what it covers."""
    broken = []
    for path in DOCUMENTS:
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, fragment = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                broken.append(f"{path.name}: {target} (no such file)")
            elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                broken.append(f"{path.name}: {target} (no such heading)")
    assert not broken, broken
    for path in DOCUMENTS[1:]:
        title, blank, first = path.read_text().split("\n", 3)[:3]
        assert title.startswith("# ") and not blank and first, path.name
