"""Choose the chat model named by ``MODEL``."""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel

from threadline.agent.builtin import BuiltinChatModel
from threadline.config import ConfigError, ModelSettings


def make_model(settings: ModelSettings) -> BaseChatModel:
    """The built-in model, or a provider model through LangChain's ``init_chat_model``.

    Raises:
        ConfigError: the provider's package is not installed or the name is not known.
    """
    if settings.name == "builtin":
        return BuiltinChatModel(token_delay_ms=settings.token_delay_ms)
    from langchain.chat_models import init_chat_model

    try:
        return init_chat_model(settings.name, streaming=True)
    except ImportError as exc:
        raise ConfigError(
            f"MODEL: the provider package for {settings.name!r} is not installed ({exc.name}); "
            "install it next to threadline"
        ) from None
    except ValueError as exc:
        raise ConfigError(f"MODEL: {exc}") from None
