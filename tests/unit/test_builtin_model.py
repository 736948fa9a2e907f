"""The built-in model answers exactly what the product brief specifies."""

from __future__ import annotations

import hashlib

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from threadline.agent.builtin import BuiltinChatModel, builtin_reply
from threadline.auth import ApiKeys, hash_key

pytestmark = pytest.mark.unit


def brief_reply(n: int, earlier: list[str], content: str) -> str:
    """The brief's formula, written out independently of the implementation."""
    h = hashlib.sha256("".join(m + "\n" for m in earlier).encode()).hexdigest()[:12]
    return f"turn {n} · history {h} · you said: {content}"


def test_first_turn_digests_an_empty_history():
    assert builtin_reply(["hi"], 1) == brief_reply(1, [], "hi")
    assert "history e3b0c44298fc" in builtin_reply(["hi"], 1)  # sha256 of b""


async def test_reply_is_a_function_of_the_whole_history():
    model = BuiltinChatModel()
    history = [HumanMessage("a"), AIMessage("b"), HumanMessage("c")]
    reply = await model.ainvoke(history)
    assert reply.content == brief_reply(2, ["a", "b"], "c")
    # Change one earlier message and the reply changes.
    other = await model.ainvoke([HumanMessage("a!"), AIMessage("b"), HumanMessage("c")])
    assert other.content != reply.content


async def test_streams_one_token_per_word():
    model = BuiltinChatModel(token_delay_ms=1)
    # LangChain closes a stream with an empty chunk of its own; the words are the rest.
    chunks = [c.content async for c in model.astream([HumanMessage("two words")]) if c.content]
    assert "".join(chunks) == brief_reply(1, [], "two words")
    assert len(chunks) == len(brief_reply(1, [], "two words").split(" "))


def test_api_keys_match_only_their_hash():
    keys = ApiKeys({hash_key("k1"): "alice", hash_key("k2"): "bob"})
    assert keys.principal("k1") == "alice" and keys.principal("k2") == "bob"
    assert keys.principal("k3") is None and keys.principal("") is None


async def test_text_blocks_are_joined_text_in_the_reply_and_the_digest():
    # What agent UIs send: a content list of blocks. The reply shows the text, never a
    # Python list, and the digest reads a block message as its joined text (issue 19).
    model = BuiltinChatModel()
    blocks = [{"type": "text", "text": "hello "}, {"type": "image_url", "image_url": {"url": "x"}}]
    blocks.append({"type": "text", "text": "there"})
    history = [
        HumanMessage(content=blocks),
        AIMessage("b"),
        HumanMessage(content=[{"type": "text", "text": "c"}]),
    ]
    reply = await model.ainvoke(history)
    assert reply.content == brief_reply(2, ["hello there", "b"], "c")
    # The same conversation sent as strings answers the same.
    as_strings = await model.ainvoke([HumanMessage("hello there"), AIMessage("b"), HumanMessage("c")])
    assert as_strings.content == reply.content
