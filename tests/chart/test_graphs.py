"""The chart's graph settings: LANGGRAPH_CONFIG from `graphs.config` or a mounted langgraph.json
(`graphs.langgraphJson` + `graphs.files`), left to the image when unset, and the helm test's
LangGraph API run."""

from __future__ import annotations

import json

import pytest

from chart.bundle import CHART, container_env, helm_template, objects, one, rendered, service_container

pytestmark = pytest.mark.chart

MOUNT = "/etc/threadline/graphs"
KEY = "a:" + "0" * 64
GRAPH_PY = (CHART.parents[1] / "examples" / "refunds" / "graph.py").read_text()


def render(*sets: str, check: bool = True):
    return helm_template(sets=(f"secret.apiKeys={KEY}", *sets), check=check)


def render_json(langgraph_json: dict, *extra: str):
    """Render with ``graphs.langgraphJson`` (via --set-json) and extra helm arguments."""
    from chart.bundle import RELEASE, helm, load_docs

    args = ["template", RELEASE, str(CHART), "--set", f"secret.apiKeys={KEY}"]
    args += ["--set-json", f"graphs.langgraphJson={json.dumps(langgraph_json)}", *extra]
    return load_docs(helm(*args).stdout)


def graphs_mount(docs) -> tuple[list, list]:
    container = service_container(docs)
    (deployment,) = objects(docs, "Deployment")
    mounts = [m for m in container["volumeMounts"] if m["name"] == "graphs"]
    volumes = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "graphs"]
    return mounts, volumes


def test_by_default_langgraph_config_is_left_to_the_image() -> None:
    """Unset, not empty: an image built FROM threadline sets its own LANGGRAPH_CONFIG."""
    docs = rendered(None)
    assert "LANGGRAPH_CONFIG" not in container_env(docs, service_container(docs))
    assert not [c for c in objects(docs, "ConfigMap") if c["metadata"]["name"].endswith("-graphs")]
    assert graphs_mount(docs) == ([], [])


def test_graphs_config_sets_langgraph_config() -> None:
    docs = render("graphs.config=/graphs/refunds/langgraph.json")
    env = container_env(docs, service_container(docs))
    assert env["LANGGRAPH_CONFIG"] == "/graphs/refunds/langgraph.json"
    assert graphs_mount(docs) == ([], [])


def test_graphs_config_must_be_an_absolute_json_path() -> None:
    proc = render("graphs.config=graphs/langgraph.json", check=False)
    assert proc.returncode != 0 and "graphs" in proc.stderr and "config" in proc.stderr


def test_a_langgraph_json_and_its_files_are_mounted_from_a_configmap() -> None:
    langgraph_json = {"dependencies": ["."], "graphs": {"refunds": "./graph.py:graph"}}
    docs = render_json(
        langgraph_json, "--set-file", f"graphs.files.graph\\.py={CHART.parents[1]}/examples/refunds/graph.py"
    )
    configmap = one(docs, "ConfigMap", "t-threadline-graphs")
    assert json.loads(configmap["data"]["langgraph.json"]) == langgraph_json
    assert configmap["data"]["graph.py"] == GRAPH_PY
    env = container_env(docs, service_container(docs))
    assert env["LANGGRAPH_CONFIG"] == f"{MOUNT}/langgraph.json"
    (mount,), (volume,) = graphs_mount(docs)
    assert mount == {"name": "graphs", "mountPath": MOUNT, "readOnly": True}
    assert volume["configMap"]["name"] == "t-threadline-graphs"


def test_a_changed_langgraph_json_rolls_the_pods() -> None:
    def checksum(graphs: dict) -> str:
        (deployment,) = objects(render_json({"graphs": graphs}), "Deployment")
        return deployment["spec"]["template"]["metadata"]["annotations"]["checksum/graphs"]

    assert checksum({"a": "pkg.a:graph"}) != checksum({"a": "pkg.b:graph"})


def test_graphs_config_and_langgraph_json_exclude_each_other() -> None:
    from chart.bundle import RELEASE, helm

    proc = helm(
        "template",
        RELEASE,
        str(CHART),
        "--set",
        f"secret.apiKeys={KEY}",
        "--set",
        "graphs.config=/graphs/langgraph.json",
        "--set-json",
        'graphs.langgraphJson={"graphs": {"a": "pkg.a:graph"}}',
        check=False,
    )
    assert proc.returncode != 0 and "graphs.config and graphs.langgraphJson exclude each other" in proc.stderr


def test_graph_files_need_a_langgraph_json() -> None:
    proc = render("graphs.files.graph\\.py=x = 1", check=False)
    assert proc.returncode != 0 and "graphs.files needs graphs.langgraphJson" in proc.stderr


def test_a_langgraph_json_without_graphs_is_refused_by_the_schema() -> None:
    from chart.bundle import RELEASE, helm

    proc = helm(
        "template",
        RELEASE,
        str(CHART),
        "--set",
        f"secret.apiKeys={KEY}",
        "--set-json",
        'graphs.langgraphJson={"dependencies": ["."]}',
        check=False,
    )
    assert proc.returncode != 0 and "graphs" in proc.stderr


def smoke_args(docs) -> list[str]:
    (smoke,) = one(docs, "Pod")["spec"]["containers"]
    return smoke["args"]


def test_the_helm_test_makes_one_langgraph_api_run_on_chat() -> None:
    args = smoke_args(render("tests.generateKey=true"))
    assert args[:3] == ["smoke", "--url", "http://t-threadline:8080"]
    run = dict(zip(args[3::2], args[4::2], strict=True))
    assert run.keys() == {"--run-assistant", "--run-input", "--run-expect"}
    assert run["--run-assistant"] == "chat" and run["--run-expect"] == "messages"
    assert json.loads(run["--run-input"]) == {
        "messages": [{"role": "human", "content": "hello from helm test"}]
    }


def test_the_example_values_run_the_example_graph() -> None:
    docs = rendered("example-values.yaml")
    args = smoke_args(docs)
    run = dict(zip(args[3::2], args[4::2], strict=True))
    # A values file replaces the input (a string), it does not merge into the default's keys.
    assert json.loads(run["--run-input"]) == {"request": "where is my parcel?"}
    assert run["--run-assistant"] == "refunds" and run["--run-expect"] == "answer"
    # LANGGRAPH_CONFIG comes from the example image itself.
    assert "LANGGRAPH_CONFIG" not in container_env(docs, service_container(docs))
    assert service_container(docs)["image"] == "threadline-example:dev"


def test_the_helm_test_run_can_be_turned_off() -> None:
    off = render("tests.generateKey=true", "tests.run.enabled=false")
    assert smoke_args(off) == ["smoke", "--url", "http://t-threadline:8080"]
    assert "--run-expect" not in smoke_args(render("tests.generateKey=true", "tests.run.expectKey="))


def test_without_a_test_key_the_helm_test_makes_no_run() -> None:
    """No key, no run: the keyless smoke (adr/0006) checks readiness and a 401 only."""
    assert smoke_args(rendered(None)) == ["smoke", "--url", "http://t-threadline:8080", "--no-key"]


def test_the_run_input_must_be_a_json_object() -> None:
    proc = render("tests.run.input=hello", check=False)
    assert proc.returncode != 0 and "input" in proc.stderr


def test_a_custom_auth_module_is_mounted_like_a_graph_with_its_settings_from_a_secret() -> None:
    """examples/custom_auth through the chart: auth.py beside the graph, `auth.path` in the
    mounted langgraph.json, its AUTH_JWKS/ISSUER/AUDIENCE from an existing Secret."""
    example = CHART.parents[1] / "examples" / "custom_auth"
    langgraph_json = json.loads((example / "langgraph.json").read_text())
    docs = render_json(
        langgraph_json,
        "--set-file",
        f"graphs.files.auth\\.py={example}/auth.py",
        "--set-file",
        f"graphs.files.graph\\.py={example}/graph.py",
        "--set",
        "auth.existingSecret=idp-settings",
        "--set",
        "auth.timeoutSeconds=2",
    )
    configmap = one(docs, "ConfigMap", "t-threadline-graphs")
    assert json.loads(configmap["data"]["langgraph.json"])["auth"] == {"path": "./auth.py:auth"}
    assert configmap["data"]["auth.py"] == (example / "auth.py").read_text()
    container = service_container(docs)
    env = container_env(docs, container)
    assert env["LANGGRAPH_CONFIG"] == f"{MOUNT}/langgraph.json" and env["AUTH_TIMEOUT_SECONDS"] == "2"
    assert {"secretRef": {"name": "idp-settings"}} in container["envFrom"]
    # Without the setting, no Secret is referenced.
    plain = service_container(render())
    assert all("secretRef" not in source for source in plain["envFrom"])


def test_the_auth_secret_name_must_be_a_kubernetes_name() -> None:
    proc = render("auth.existingSecret=Not A Name", check=False)
    assert proc.returncode != 0 and "existingSecret" in proc.stderr
