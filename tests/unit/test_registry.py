"""Graphs from langgraph.json: every form the LangGraph CLI accepts, and every refusal.

The graphs are real LangGraph graphs written to real files and imported; they run on
LangGraph's in-memory saver (a real checkpointer in this process).
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from threadline.agent.builtin import BuiltinChatModel
from threadline.agent.factories import server_runtime
from threadline.agent.registry import (
    CHAT,
    bind_factories,
    bind_graphs,
    import_graphs,
    read_config,
)
from threadline.config import ConfigError, GraphSettings, load
from threadline.custom_auth import AuthUser

pytestmark = pytest.mark.unit

# One node that adds 1 to `n`.
GRAPH_MODULE = """
from typing import TypedDict
from langgraph.graph import END, START, StateGraph

class State(TypedDict):
    n: int

def inc(state: State) -> dict:
    return {"n": state["n"] + 1}

builder = StateGraph(State)
builder.add_node("inc", inc)
builder.add_edge(START, "inc")
builder.add_edge("inc", END)
graph = builder.compile()
"""


def load_graphs(config_path, chat_model, saver):
    """What the runtime serves: the graphs imported (config checked) then bound to ``saver``."""
    return bind_graphs(import_graphs(config_path), chat_model, saver)


def write(directory: Path, name: str, body: str = "") -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(GRAPH_MODULE + textwrap.dedent(body))
    return path


def config(directory: Path, graphs: dict, **extra: object) -> Path:
    path = directory / "langgraph.json"
    path.write_text(json.dumps({"graphs": graphs, **extra}))
    return path


def model() -> BuiltinChatModel:
    return BuiltinChatModel()


def refused(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_graphs(path, model(), InMemorySaver())
    # No chained exception (its text could carry what the message leaves out) is shown.
    error = caught.value
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)
    message = str(caught.value)
    assert message.startswith("LANGGRAPH_CONFIG: ")
    return message


async def run_twice(graph, saver: InMemorySaver) -> int:
    """Run a counting graph twice on one thread; the second run must see the first's state."""
    thread = {"configurable": {"thread_id": uuid.uuid4().hex}}
    await graph.ainvoke({"n": 1}, thread)
    state = await graph.aget_state(thread)
    assert state.values == {"n": 2}
    assert saver.get_tuple(thread) is not None  # persisted in threadline's saver
    return state.values["n"]


# --- what is served ------------------------------------------------------------------------


async def test_without_a_config_the_builtin_chat_graph_is_served() -> None:
    saver = InMemorySaver()
    graphs = load_graphs(None, model(), saver)
    assert list(graphs) == [CHAT]
    thread = {"configurable": {"thread_id": "t"}}
    result = await graphs[CHAT].ainvoke({"messages": [HumanMessage("hi", id="m1")], "owner": "p"}, thread)
    assert result["messages"][-1].content.startswith("turn 1 · history")
    assert saver.get_tuple(thread) is not None


async def test_a_relative_file_path_compiled_graph_gets_threadlines_checkpointer(tmp_path: Path) -> None:
    write(tmp_path / "src", "agent.py")
    saver = InMemorySaver()
    graphs = load_graphs(config(tmp_path, {"counter": "./src/agent.py:graph"}), model(), saver)
    assert list(graphs) == [CHAT, "counter"]
    assert graphs["counter"].checkpointer is saver
    assert graphs["counter"].name == "counter"  # an unnamed graph is named after its id
    assert await run_twice(graphs["counter"], saver) == 2


async def test_the_path_is_relative_to_the_json_file_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "project", "agent.py")
    path = config(tmp_path / "project", {"counter": "./agent.py:graph"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert "counter" in load_graphs(Path("../project/langgraph.json"), model(), InMemorySaver())
    assert read_config(path)["counter"].path == (tmp_path / "project" / "agent.py").resolve()


async def test_a_state_graph_is_compiled_with_threadlines_checkpointer(tmp_path: Path) -> None:
    write(tmp_path, "agent.py")
    saver = InMemorySaver()
    graphs = load_graphs(config(tmp_path, {"built": "./agent.py:builder"}), model(), saver)
    assert graphs["built"].checkpointer is saver
    assert graphs["built"].name == "built"
    assert await run_twice(graphs["built"], saver) == 2


async def test_a_module_path_imports_from_a_local_dependency_directory(tmp_path: Path) -> None:
    package = f"pkg_{uuid.uuid4().hex[:8]}"  # unique: sys.modules outlives the test
    write(tmp_path / "src" / package, "graphs.py")
    (tmp_path / "src" / package / "__init__.py").write_text("")
    saver = InMemorySaver()
    path = config(tmp_path, {"mod": f"{package}.graphs:graph"}, dependencies=["./src", "langchain-core"])
    graphs = load_graphs(path, model(), saver)
    assert graphs["mod"].checkpointer is saver
    assert await run_twice(graphs["mod"], saver) == 2


async def test_the_dict_form_of_a_graph_entry(tmp_path: Path) -> None:
    write(tmp_path, "agent.py")
    path = config(tmp_path, {"counter": {"path": "./agent.py:graph", "description": "counts"}})
    assert read_config(path)["counter"].description == "counts"
    assert "counter" in load_graphs(path, model(), InMemorySaver())


async def test_two_graphs_of_one_file_import_it_once(tmp_path: Path) -> None:
    write(tmp_path, "agent.py")
    graphs = import_graphs(config(tmp_path, {"a": "./agent.py:graph", "b": "./agent.py:builder"}))
    # Both come from one module object: the compiled graph was built from that module's builder.
    assert graphs["a"].builder is graphs["b"]


# --- factories ------------------------------------------------------------------------------

# Every kind langgraph-api accepts. Each records what it was called with in CALLS, and a
# context-manager one its enter and exit (a list in the module, read back by the test).
FACTORIES = """
import contextlib
from typing import TYPE_CHECKING
from langchain_core.runnables import RunnableConfig
if TYPE_CHECKING:  # resolved by name, as langgraph-api resolves it
    from langgraph_sdk.runtime import ServerRuntime

CALLS = []

def make_bare():
    CALLS.append(("bare",))
    return builder.compile()

def make_with_config(config):
    CALLS.append(("config", config))
    return builder

async def make_async(config: RunnableConfig):
    CALLS.append(("async", config))
    return builder.compile()

def make_with_runtime(runtime: "ServerRuntime"):
    CALLS.append(("runtime", runtime))
    return builder.compile()

async def make_with_both(runtime: "ServerRuntime", config):
    CALLS.append(("both", config, runtime))
    return builder.compile()

@contextlib.asynccontextmanager
async def make_cm(config):
    CALLS.append(("enter", config["configurable"].get("thread_id")))
    try:
        yield builder.compile()
    finally:
        CALLS.append(("exit", config["configurable"].get("thread_id")))

@contextlib.contextmanager
def make_sync_cm():
    CALLS.append(("enter",))
    try:
        yield builder
    finally:
        CALLS.append(("exit",))
"""

KINDS = [
    "make_bare",
    "make_with_config",
    "make_async",
    "make_with_runtime",
    "make_with_both",
    "make_cm",
    "make_sync_cm",
]


def factories(tmp_path: Path, name: str):
    """The graphs served with ``factories.py:name`` as ``made``, its factory, and its CALLS."""
    write(tmp_path, "factories.py", FACTORIES)
    saver = InMemorySaver()
    imported = import_graphs(config(tmp_path, {"made": f"./factories.py:{name}"}))
    return (
        bind_graphs(imported, model(), saver),
        bind_factories(imported, saver)["made"],
        calls_of(tmp_path),
        saver,
    )


def calls_of(tmp_path: Path) -> list:
    """CALLS of this test's ``factories.py`` (imported under a name of its own)."""
    path = str((tmp_path / "factories.py").resolve())
    return next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == path).CALLS


@pytest.mark.parametrize("name", KINDS)
async def test_every_kind_of_factory_is_checked_at_start_up_and_called_for_each_run(
    tmp_path: Path, name: str
) -> None:
    graphs, factory, calls, saver = factories(tmp_path, name)
    # At start-up: called once (a context entered and exited), its graph the served one's shape.
    assert len([c for c in calls if c[0] != "exit"]) == 1
    assert graphs["made"].checkpointer is saver and "inc" in graphs["made"].nodes
    calls.clear()
    thread = {"configurable": {"thread_id": uuid.uuid4().hex}}
    runtime = server_runtime("threads.create_run", InMemoryStore(), AuthUser({"identity": "ann"}), {"k": 1})
    for _ in range(2):  # a factory per run: called (and its context exited) each time
        async with factory.open(thread, runtime) as graph:
            assert graph.checkpointer is saver and graph.name == "made"
            await graph.ainvoke({"n": 1}, thread)
    assert (await graphs["made"].aget_state(thread)).values == {"n": 2}
    kind = calls[0][0]
    if kind in ("config", "async", "both"):
        assert calls[0][1] is thread
    if kind in ("runtime", "both"):
        given = calls[0][-1]
        assert given.access_context == "threads.create_run" and given.user.identity == "ann"
        assert given.execution_runtime.context == {"k": 1}
    if kind == "enter":
        assert [c[0] for c in calls] == ["enter", "exit", "enter", "exit"]


async def test_a_factory_gets_the_start_up_config_and_a_read_runtime(tmp_path: Path) -> None:
    write(tmp_path, "factories.py", FACTORIES)
    import_graphs(config(tmp_path, {"made": "./factories.py:make_with_both"}))
    _, config_given, runtime = calls_of(tmp_path)[0]
    assert config_given == {"configurable": {}}
    assert runtime.access_context == "assistants.read" and runtime.execution_runtime is None
    assert runtime.user is None and runtime.store is not None


@pytest.mark.parametrize("stop", ["error", "cancel"])
async def test_a_context_factory_is_exited_when_the_run_fails_or_is_cancelled(
    tmp_path: Path, stop: str
) -> None:
    _, factory, calls, _ = factories(tmp_path, "make_cm")
    calls.clear()
    runtime = server_runtime("threads.create_run", InMemoryStore())
    thread = {"configurable": {"thread_id": "t1"}}

    async def run() -> None:
        async with factory.open(thread, runtime):
            if stop == "error":
                raise RuntimeError("the graph failed")
            await asyncio.Event().wait()

    task = asyncio.ensure_future(run())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises((RuntimeError, asyncio.CancelledError)):
        await task
    assert calls == [("enter", "t1"), ("exit", "t1")]


def test_an_async_factory_also_loads_outside_an_event_loop(tmp_path: Path) -> None:
    write(tmp_path, "factories.py", FACTORIES)
    for name in ("make_async", "make_cm"):
        assert "made" in load_graphs(
            config(tmp_path, {"made": f"./factories.py:{name}"}), model(), InMemorySaver()
        )


# --- chat kept or overridden ---------------------------------------------------------------


async def test_chat_stays_beside_the_configured_graphs(tmp_path: Path) -> None:
    write(tmp_path, "agent.py")
    graphs = load_graphs(config(tmp_path, {"counter": "./agent.py:graph"}), model(), InMemorySaver())
    assert set(graphs) == {CHAT, "counter"}
    assert "model" in graphs[CHAT].nodes  # the built-in one


async def test_a_config_that_defines_chat_replaces_the_builtin_one(tmp_path: Path) -> None:
    write(tmp_path, "agent.py")
    saver = InMemorySaver()
    graphs = load_graphs(config(tmp_path, {CHAT: "./agent.py:graph"}), model(), saver)
    assert list(graphs) == [CHAT]
    assert "inc" in graphs[CHAT].nodes and "model" not in graphs[CHAT].nodes
    assert await run_twice(graphs[CHAT], saver) == 2


# --- refusals: each names the variable, the graph id and the cause ---------------------------


def test_a_graph_compiled_with_its_own_checkpointer_is_refused(tmp_path: Path) -> None:
    write(
        tmp_path,
        "own.py",
        """
        from langgraph.checkpoint.memory import InMemorySaver
        own = builder.compile(checkpointer=InMemorySaver())
        async def make_own():
            return builder.compile(checkpointer=InMemorySaver())
        """,
    )
    message = refused(config(tmp_path, {"mine": "./own.py:own"}))
    assert "'mine'" in message and "own checkpointer (InMemorySaver)" in message
    message = refused(config(tmp_path, {"made": "./own.py:make_own"}))
    assert "'made'" in message and "own checkpointer" in message


def test_a_graph_compiled_with_checkpointer_false_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "off.py", "off = builder.compile(checkpointer=False)\n")
    message = refused(config(tmp_path, {"off": "./off.py:off"}))
    assert "'off'" in message and "checkpointer=False" in message


def test_a_graph_whose_import_fails_is_refused_with_the_missing_module(tmp_path: Path) -> None:
    write(tmp_path, "broken.py", "import no_such_module_here\n")
    message = refused(config(tmp_path, {"broken": "./broken.py:graph"}))
    assert "graph 'broken' (./broken.py:graph)" in message
    assert "ModuleNotFoundError" in message and "no_such_module_here" in message


def test_a_module_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    message = refused(config(tmp_path, {"gone": "no_such_package.graphs:graph"}))
    assert "'gone'" in message and "No module named 'no_such_package'" in message


def test_a_syntax_error_is_refused_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("x = 1\ndef (:\n")
    message = refused(config(tmp_path, {"bad": "./bad.py:graph"}))
    assert "'bad'" in message and "SyntaxError" in message and "line 2" in message


def test_a_missing_file_or_attribute_is_refused(tmp_path: Path) -> None:
    assert "no such file" in refused(config(tmp_path, {"nofile": "./absent.py:graph"}))
    write(tmp_path, "agent.py")
    message = refused(config(tmp_path, {"noattr": "./agent.py:grahp"}))
    assert "graph 'noattr' (./agent.py:grahp): 'grahp' is not defined there" in message


def test_something_that_is_not_a_graph_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "agent.py", "NOT_A_GRAPH = 42\ndef make_none():\n    return None\n")
    message = refused(config(tmp_path, {"n": "./agent.py:NOT_A_GRAPH"}))
    assert "'n'" in message and "is a int, not a graph" in message
    assert "is a NoneType" in refused(config(tmp_path, {"f": "./agent.py:make_none"}))


def test_a_context_factory_that_yields_no_graph_is_refused(tmp_path: Path) -> None:
    write(
        tmp_path,
        "agent.py",
        """
        import contextlib
        @contextlib.asynccontextmanager
        async def make_cm():
            yield 42
        """,
    )
    message = refused(config(tmp_path, {"cm": "./agent.py:make_cm"}))
    assert "'cm'" in message and "is a int, not a graph" in message


def test_a_failing_factory_is_named_without_its_message(tmp_path: Path) -> None:
    secret = "sk-live-" + uuid.uuid4().hex
    write(
        tmp_path,
        "agent.py",
        f"""
        def make_failing():
            raise ValueError("bad key {secret}")
        """,
    )
    message = refused(config(tmp_path, {"failing": "./agent.py:make_failing"}))
    assert "'failing'" in message and "ValueError raised at agent.py:" in message
    assert secret not in message and "bad key" not in message


@pytest.mark.parametrize("signature", ["a, b", "a, b, c", "a: ServerRuntime, b: ServerRuntime"])
def test_a_factory_taking_other_arguments_is_refused(tmp_path: Path, signature: str) -> None:
    body = f"from langgraph_sdk.runtime import ServerRuntime\ndef make({signature}):\n    return graph\n"
    write(tmp_path, "agent.py", body)
    message = refused(config(tmp_path, {"two": "./agent.py:make"}))
    assert "'two'" in message and "takes nothing, a RunnableConfig, a ServerRuntime" in message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "is not JSON (line 1"),
        ("[]", "needs a non-empty `graphs` object"),
        ('{"graphs": {}}', "needs a non-empty `graphs` object"),
        ('{"graphs": {"x": "./agent.py"}}', "graph 'x': expected './file.py:attr'"),
        ('{"graphs": {"x": 3}}', "graph 'x': expected './file.py:attr'"),
        ('{"graphs": {"x": {"description": "no path"}}}', "graph 'x': expected"),
        ('{"graphs": {"x": "./agent.ts:graph"}}', "graph 'x': only Python graphs (a .py file) are served"),
    ],
)
def test_a_malformed_config_is_refused(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "langgraph.json"
    path.write_text(content)
    assert expected in refused(path)


def test_a_missing_config_file_is_refused(tmp_path: Path) -> None:
    assert "no such file" in refused(tmp_path / "langgraph.json")


# --- the setting ---------------------------------------------------------------------------


def test_langgraph_config_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANGGRAPH_CONFIG", raising=False)
    assert load(GraphSettings).config_path is None
    monkeypatch.setenv("LANGGRAPH_CONFIG", "")
    assert load(GraphSettings).config_path is None  # a chart's unset value
    monkeypatch.setenv("LANGGRAPH_CONFIG", "/graphs/langgraph.json")
    assert load(GraphSettings).config_path == Path("/graphs/langgraph.json")


# --- the other keys of a langgraph.json (issue 19) -----------------------------------------

# A graph that reads a variable at import, as a provider client does.
READS_ENV = """
import os
SEEN = os.environ.get("THREADLINE_TEST_GRAPH_VAR")
"""


def seen_by_graph(path: Path) -> str | None:
    """What the graph module of ``path`` read from the environment, imported afresh."""
    for name in [n for n in sys.modules if n.startswith("threadline_graphs.")]:
        del sys.modules[name]
    assert "counter" in import_graphs(path)
    module = next(
        m for n, m in sys.modules.items() if n.startswith("threadline_graphs.") and hasattr(m, "SEEN")
    )
    return module.SEEN


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch):
    # setenv first, so the variable the registry sets is removed again after the test.
    monkeypatch.setenv("THREADLINE_TEST_GRAPH_VAR", "")
    monkeypatch.delenv("THREADLINE_TEST_GRAPH_VAR")
    for name in [n for n in sys.modules if n.startswith("threadline_graphs.")]:
        monkeypatch.delitem(sys.modules, name)
    return monkeypatch


def test_env_as_a_map_reaches_the_graphs_without_logging_values(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, "agent.py", READS_ENV)
    path = config(
        tmp_path, {"counter": "./agent.py:graph"}, env={"THREADLINE_TEST_GRAPH_VAR": "sk-from-json"}
    )
    with caplog.at_level("DEBUG", logger="threadline.agent.registry"):
        assert seen_by_graph(path) == "sk-from-json"
    assert "sk-from-json" not in caplog.text


def test_env_as_a_file_is_read_relative_to_the_json_and_the_deployment_wins(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "agent.py", READS_ENV)
    (tmp_path / ".env").write_text("THREADLINE_TEST_GRAPH_VAR=from-file\n")
    path = config(tmp_path, {"counter": "./agent.py:graph"}, env=".env")
    assert seen_by_graph(path) == "from-file"
    clean_env.setenv("THREADLINE_TEST_GRAPH_VAR", "from-deployment")
    assert seen_by_graph(path) == "from-deployment"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ("missing.env", "env file 'missing.env' not found"),
        (["A=1"], "`env` must be an object of variables or the path of a .env file"),
        ({"A": {"nested": 1}}, "`env` must be an object"),
    ],
)
def test_a_bad_env_is_refused(tmp_path: Path, env: object, expected: str) -> None:
    write(tmp_path, "agent.py")
    assert expected in refused(config(tmp_path, {"counter": "./agent.py:graph"}, env=env))


def test_an_installed_package_dependency_is_accepted(tmp_path: Path) -> None:
    write(tmp_path, "agent.py")
    path = config(tmp_path, {"counter": "./agent.py:graph"}, dependencies=[".", "langgraph", "orjson>=3"])
    assert "counter" in load_graphs(path, model(), InMemorySaver())


@pytest.mark.parametrize(
    ("dependency", "expected"),
    [
        ("threadline-no-such-package", "dependency 'threadline-no-such-package' is not installed"),
        ("langgraph<0.0.1", "dependency 'langgraph<0.0.1' needs another version (installed: "),
        ("./no-such-dir", "dependency './no-such-dir' is not a directory"),
        ("not a requirement!", "is neither a local path nor a package"),
    ],
)
def test_a_missing_dependency_stops_start_up_saying_how_to_add_it(
    tmp_path: Path, dependency: str, expected: str
) -> None:
    write(tmp_path, "agent.py")
    message = refused(config(tmp_path, {"counter": "./agent.py:graph"}, dependencies=[dependency]))
    assert expected in message
    if "directory" not in message and "neither" not in message:
        assert "install it in the image" in message and "pip install" in message


def test_keys_threadline_does_not_serve_are_warned_about_by_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from threadline.agent.registry import KNOWN_KEYS

    assert {"graphs", "dependencies", "env", "http"} <= KNOWN_KEYS
    write(tmp_path, "agent.py")
    path = config(
        tmp_path,
        {"counter": "./agent.py:graph"},
        python_version="3.11",
        dockerfile_lines=[],
        http={"cors": {"allow_origins": ["https://a.example"]}, "app": "./app.py:app"},
    )
    with caplog.at_level("WARNING", logger="threadline.agent.registry"):
        assert "counter" in load_graphs(path, model(), InMemorySaver())
    warned = [r.getMessage() for r in caplog.records]
    assert any("'python_version'" in w for w in warned)
    assert any("'dockerfile_lines'" in w for w in warned)
    assert any("'http.app'" in w for w in warned)
    assert not any("graphs" in w or "'http'" in w or "cors" in w for w in warned)


def test_http_cors_is_read_for_the_app(tmp_path: Path) -> None:
    from threadline.agent.registry import read_deployment

    write(tmp_path, "agent.py")
    cors = {"allow_origins": ["https://a.example"], "max_age": 60}
    assert (
        read_deployment(config(tmp_path, {"counter": "./agent.py:graph"}, http={"cors": cors})).cors == cors
    )


async def test_a_plain_graph_is_opened_as_it_is_with_no_factory_call(tmp_path: Path) -> None:
    from threadline.runs.assistants import Assistants

    write(tmp_path, "agent.py")
    write(tmp_path, "factories.py", FACTORIES)
    saver = InMemorySaver()
    imported = import_graphs(
        config(tmp_path, {"plain": "./agent.py:graph", "made": "./factories.py:make_cm"})
    )
    assistants = Assistants(bind_graphs(imported, model(), saver), factories=bind_factories(imported, saver))
    plain = await assistants.get("alice", "plain")
    async with plain.opened("threads.create_run", {"configurable": {}}) as graph:
        assert graph is plain.graph  # the bound start-up graph itself: nothing made, copied or entered
    calls = calls_of(tmp_path)
    calls.clear()
    made = await assistants.get("alice", "made")
    schemas = await assistants.schemas(made, AuthUser({"identity": "alice"}), InMemoryStore())
    assert schemas["graph_id"] == "made" and "n" in schemas["state_schema"]["properties"]
    assert [c[0] for c in calls] == ["enter", "exit"]
