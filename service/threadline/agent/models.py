"""Choose the chat model named by ``MODEL``."""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel

from threadline.agent.builtin import BuiltinChatModel
from threadline.config import ConfigError, ModelSettings

# The provider packages threadline has an extra for (service/pyproject.toml): package -> extra.
PROVIDER_EXTRAS = {
    "langchain-openai": "openai",
    "langchain-anthropic": "anthropic",
    "langchain-google-genai": "google-genai",
    "langchain-ollama": "ollama",
}


def make_model(settings: ModelSettings) -> BaseChatModel:
    """The built-in model, or a provider model through LangChain's ``init_chat_model``.

    Raises:
        ConfigError: the provider's package is not installed (the message names it and the
            command that installs it) or the name is not known.
    """
    if settings.name == "builtin":
        return BuiltinChatModel(token_delay_ms=settings.token_delay_ms)
    from langchain.chat_models import init_chat_model

    try:
        return init_chat_model(settings.name, streaming=True)
    except ImportError as exc:
        raise ConfigError(missing_package_message(settings.name, exc)) from None
    except ValueError as exc:
        raise ConfigError(f"MODEL: {exc}") from None


def missing_package_message(model: str, exc: ImportError) -> str:
    """What to install for ``model``: init_chat_model raises a plain ImportError whose cause is
    the ModuleNotFoundError of the provider's module (``langchain_openai``)."""
    missing = exc.name or getattr(exc.__cause__, "name", None)
    if missing is None:
        # ollama's is re-raised ``from None`` (init_chat_model tries langchain-community second):
        # the package of an extra named as the provider, then.
        provider = model.partition(":")[0].replace("_", "-")
        missing = next((package for package, extra in PROVIDER_EXTRAS.items() if extra == provider), "?")
    package = missing.split(".", maxsplit=1)[0].replace("_", "-")
    extra = PROVIDER_EXTRAS.get(package)
    if extra is None:
        how = f"pip install {package} (next to threadline)"
    else:
        how = (
            f'pip install "threadline[{extra}]" (from a checkout: make run EXTRAS={extra}; '
            f"the image: make image EXTRAS={extra})"
        )
    return f"MODEL={model} needs the Python package {package}, which is not installed: {how}"
