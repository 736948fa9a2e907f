"""A tiny OpenAI-compatible server for the provider-model tests: real HTTP on a free loopback
port, speaking ``POST /v1/chat/completions`` (a JSON answer, or server-sent events with
``"stream": true``), the way the ``openai`` client (and so ``langchain-openai``) calls it.

The reply proves what the model was sent: ``fake says: <last user message> (messages: N)``,
streamed one word per chunk. Every request's body and ``Authorization`` header are kept in
:attr:`FakeOpenAI.requests` so a test can check what reached the "provider". The real provider
cannot run here (no network, no key): this is the one stand-in, and only for the provider.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from servers import free_port


def fake_reply(messages: list[dict]) -> str:
    """What the fake model answers to ``messages``."""
    user = [m for m in messages if m.get("role") == "user"]
    last = user[-1]["content"] if user else ""
    if isinstance(last, list):  # content blocks
        last = " ".join(block.get("text", "") for block in last if isinstance(block, dict))
    return f"fake says: {last} (messages: {len(messages)})"


@dataclass
class FakeOpenAI:
    """``with FakeOpenAI() as fake:`` serves on ``fake.base_url`` (…/v1) until the block ends."""

    port: int = field(default_factory=free_port)
    requests: list[dict] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                auth = self.headers.get("Authorization")
                fake.requests.append({"path": self.path, "authorization": auth, **body})
                if self.path != "/v1/chat/completions":
                    error = {"message": f"no route {self.path}", "type": "invalid_request_error"}
                    self._send(404, {"error": error})
                    return
                reply = fake_reply(body.get("messages", []))
                model = body.get("model", "fake")
                if body.get("stream"):
                    self._stream(model, reply)
                else:
                    self._send(200, completion(model, reply))

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, model: str, reply: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                words = reply.split(" ")
                pieces = [{"role": "assistant", "content": ""}]
                pieces += [{"content": w if i == 0 else " " + w} for i, w in enumerate(words)]
                for delta in pieces:
                    self._event(chunk(model, delta, None))
                self._event(chunk(model, {}, "stop"))
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

            def _event(self, payload: dict) -> None:
                self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
                self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def completion(model: str, reply: str) -> dict:
    message = {"role": "assistant", "content": reply}
    words = len(reply.split())
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": 1, "completion_tokens": words, "total_tokens": 1 + words},
    }


def chunk(model: str, delta: dict, finish_reason: str | None) -> dict:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
    }
