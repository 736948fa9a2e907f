"""What ``MODEL`` builds (agent/models.py): the built-in model, a provider's model through
LangChain's ``init_chat_model``, and the errors that name the setting and what to install.

The built-in model's reply formula is tested in test_builtin_model.py; here it is what
``make_model`` hands the graph. A provider model is built, never called (that is
tests/integration/test_provider_model.py, against a local OpenAI-compatible server).
"""

from __future__ import annotations

import importlib.util
import itertools
import time
import tomllib
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from threadline.agent.builtin import BuiltinChatModel, builtin_reply
from threadline.agent.models import PROVIDER_EXTRAS, make_model, missing_package_message
from threadline.config import ConfigError, ModelSettings, load

pytestmark = pytest.mark.unit


def model_for(name: str, **settings: object):
    return make_model(load(ModelSettings, name=name, **settings))


def absent(module: str) -> None:
    assert importlib.util.find_spec(module) is None, f"the test needs {module} not installed"


# --- the built-in model -------------------------------------------------------------------------


def test_the_default_setting_builds_the_builtin_model() -> None:
    model = make_model(load(ModelSettings))
    assert type(model) is BuiltinChatModel and model.token_delay_ms == 0


async def test_the_builtin_model_answers_the_same_on_every_build() -> None:
    history = [HumanMessage("a"), AIMessage("b"), HumanMessage("c")]
    replies = {(await model_for("builtin").ainvoke(history)).content for _ in range(3)}
    assert replies == {builtin_reply(["a", "b", "c"], 2)}
    assert model_for("builtin").invoke(history).content == builtin_reply(["a", "b", "c"], 2)


def test_the_builtin_model_streams_the_same_reply_token_by_token() -> None:
    history = [HumanMessage("say three words")]
    chunks = [c.content for c in model_for("builtin").stream(history) if c.content]
    assert "".join(chunks) == builtin_reply(["say three words"], 1)
    assert len(chunks) == len(builtin_reply(["say three words"], 1).split(" "))
    assert all(c.endswith(" ") for c in chunks[:-1]) and not chunks[-1].endswith(" ")


async def test_the_token_delay_setting_spaces_the_streamed_tokens() -> None:
    delay = 0.060
    model = model_for("builtin", token_delay_ms=delay * 1000)
    assert model.token_delay_ms == delay * 1000
    history = [HumanMessage("hello there")]
    started = time.monotonic()
    arrivals = [time.monotonic() - started async for chunk in model.astream(history) if chunk.content]
    assert len(arrivals) == len(builtin_reply(["hello there"], 1).split(" "))
    assert arrivals[0] < delay, "the first token is not delayed"
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert min(gaps) >= delay * 0.9, gaps
    # Without the setting the same stream takes a fraction of one delay.
    started = time.monotonic()
    [c async for c in model_for("builtin").astream(history)]
    assert time.monotonic() - started < delay


# --- provider models ----------------------------------------------------------------------------


def test_a_provider_setting_builds_that_providers_streaming_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_openai import ChatOpenAI  # in the test extra

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")  # building one calls no server
    model = model_for("openai:gpt-4o-mini")
    assert type(model) is ChatOpenAI
    assert model.model_name == "gpt-4o-mini" and model.streaming is True


@pytest.mark.parametrize("name", ["nosuch:model", "builtin:x", "OpenAI:gpt-4o", ":gpt-4o"])
def test_an_unknown_provider_is_a_config_error_naming_the_setting(name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        model_for(name)
    message = str(caught.value)
    assert message.startswith("MODEL: ") and repr(name) in message
    assert "Supported providers:" in message and "openai" in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_missing_provider_package_with_an_extra_names_the_extra() -> None:
    absent("langchain_anthropic")
    with pytest.raises(ConfigError) as caught:
        model_for("anthropic:claude-sonnet-4-5")
    assert str(caught.value) == (
        "MODEL=anthropic:claude-sonnet-4-5 needs the Python package langchain-anthropic, which is not "
        'installed: pip install "threadline[anthropic]" (from a checkout: make run EXTRAS=anthropic; '
        "the image: make image EXTRAS=anthropic)"
    )
    assert caught.value.__cause__ is None


def test_a_missing_provider_package_without_an_extra_names_the_package() -> None:
    absent("langchain_aws")
    with pytest.raises(
        ConfigError, match=r"^MODEL=bedrock:x needs the Python package langchain-aws, "
    ) as caught:
        model_for("bedrock:x")
    assert str(caught.value).endswith("pip install langchain-aws (next to threadline)")


def test_a_missing_ollama_package_names_its_extra() -> None:
    absent("langchain_ollama")
    with pytest.raises(
        ConfigError, match=r'needs the Python package langchain-ollama, .*"threadline\[ollama\]"'
    ):
        model_for("ollama:llama3")


@pytest.mark.parametrize(
    ("module", "package", "extra"),
    [
        ("langchain_openai", "langchain-openai", "openai"),
        ("langchain_google_genai.chat_models", "langchain-google-genai", "google-genai"),
        ("langchain_ollama", "langchain-ollama", "ollama"),
        ("langchain_mistralai", "langchain-mistralai", None),
    ],
)
def test_missing_package_message_reads_the_module_name_or_its_cause(
    module: str, package: str, extra: str | None
) -> None:
    direct = ImportError("no", name=module)
    wrapped = ImportError("Initializing requires a package")
    wrapped.__cause__ = ModuleNotFoundError(f"No module named {module!r}", name=module)
    for exc in (direct, wrapped):
        message = missing_package_message("p:m", exc)
        assert message.startswith(f"MODEL=p:m needs the Python package {package}, which is not installed: ")
        if extra is None:
            assert message.endswith(f"pip install {package} (next to threadline)")
        else:
            assert f'pip install "threadline[{extra}]"' in message
            assert f"make run EXTRAS={extra}" in message and f"make image EXTRAS={extra}" in message


def test_every_provider_extra_is_one_the_package_declares() -> None:
    pyproject = (Path(__file__).resolve().parents[2] / "service" / "pyproject.toml").read_text()
    declared = tomllib.loads(pyproject)["project"]["optional-dependencies"]
    for package, extra in PROVIDER_EXTRAS.items():
        assert any(dep.startswith(package + "==") for dep in declared[extra]), (package, extra)
