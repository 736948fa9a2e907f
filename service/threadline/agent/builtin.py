"""The deterministic built-in model, for development, tests and chaos runs.

Its reply is a function of the entire history it was given, so a test can prove that a reply
produced on another replica saw the whole conversation (product brief, "The built-in model"):

    reply = f"turn {n} · history {h} · you said: {content}"

``n`` is the 1-based number of this turn, ``content`` the human message of this turn and ``h``
the first 12 hex digits of sha256 over every earlier message's content plus ``"\\n"``.

A message's content is its text: a string as it is, a list of content blocks (what agent UIs
send: ``[{"type": "text", "text": …}]``) as its text blocks joined with nothing between them
(:func:`content_text`, as LangChain's ``message.text``); other blocks (images …) add nothing.
So a conversation sent as blocks has the same replies and digests as one sent as strings.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult


def content_text(content: str | list[Any]) -> str:
    """A message content's text: a string, or the text blocks of a block list joined."""
    if isinstance(content, str):
        return content
    return "".join(
        b if isinstance(b, str) else str(b.get("text", ""))
        for b in content
        if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")
    )


def history_digest(earlier: Sequence[str]) -> str:
    """The digest of every message content before this turn's human message, oldest first."""
    return hashlib.sha256("".join(m + "\n" for m in earlier).encode()).hexdigest()[:12]


def builtin_reply(contents: Sequence[str], humans: int) -> str:
    """The reply to ``contents[-1]`` (this turn's human message), the ``humans``-th turn."""
    return f"turn {humans} · history {history_digest(contents[:-1])} · you said: {contents[-1]}"


def _tokens(reply: str) -> list[str]:
    """One token per word; the tokens concatenate back to ``reply``."""
    words = reply.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]]


class BuiltinChatModel(BaseChatModel):
    """Streams :func:`builtin_reply` word by word, ``token_delay_ms`` apart."""

    token_delay_ms: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "threadline-builtin"

    @staticmethod
    def _reply(messages: list[BaseMessage]) -> str:
        # The last human message is this turn's; everything before it is history.
        last = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
        contents = [content_text(m.content) for m in messages[: last + 1]]
        humans = sum(isinstance(m, HumanMessage) for m in messages[: last + 1])
        return builtin_reply(contents, humans)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self._reply(messages)))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # Without this, LangChain runs _generate in a worker thread: a hop per turn for nothing.
        return self._generate(messages, stop, **kwargs)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for token in _tokens(self._reply(messages)):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=token))
            if run_manager:
                run_manager.on_llm_new_token(token, chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for i, token in enumerate(_tokens(self._reply(messages))):
            if i and self.token_delay_ms:
                await asyncio.sleep(self.token_delay_ms / 1000)
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=token))
            if run_manager:
                await run_manager.on_llm_new_token(token, chunk=chunk)
            yield chunk
