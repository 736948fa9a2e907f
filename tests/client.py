"""A small synchronous client for the service tests: requests and SSE parsing."""

from __future__ import annotations

import json
import socket
import uuid
from dataclasses import dataclass, field

import httpx

from threadline.agent.builtin import builtin_reply
from threadline.auth import hash_key

API_KEY = "test-key-alice"
OTHER_KEY = "test-key-bob"
API_KEYS = f"alice:{hash_key(API_KEY)},bob:{hash_key(OTHER_KEY)}"


@dataclass
class SSE:
    events: list[tuple[str, str]] = field(default_factory=list)  # (event, data)
    comments: list[str] = field(default_factory=list)

    def tokens(self) -> list[str]:
        return [json.loads(d)["token"] for e, d in self.events if e == "token"]

    def done(self) -> dict | None:
        return next((json.loads(d) for e, d in self.events if e == "done"), None)


def parse_sse(lines) -> SSE:
    """Parse an SSE stream line by line (``event:``/``data:`` fields, ``:`` comments)."""
    out, event, data = SSE(), "message", []
    for line in lines:
        if line == "":
            if data:
                out.events.append((event, "\n".join(data)))
            event, data = "message", []
        elif line.startswith(":"):
            out.comments.append(line[1:].strip())
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
    return out


class Client:
    def __init__(self, base_url: str, api_key: str = API_KEY, timeout: float = 30.0):
        self.http = httpx.Client(base_url=base_url, headers={"X-API-Key": api_key}, timeout=timeout)

    def new_thread(self) -> str:
        response = self.http.post("/v1/threads")
        assert response.status_code == 201, response.text
        return response.json()["thread_id"]

    def say(self, thread: str, content: str, message_id: str | None = None) -> httpx.Response:
        body = {"content": content, "id": message_id or uuid.uuid4().hex}
        return self.http.post(f"/v1/threads/{thread}/messages", json=body)

    def stream(self, thread: str, content: str, message_id: str | None = None) -> SSE:
        body = {"content": content, "id": message_id or uuid.uuid4().hex}
        headers = {"Accept": "text/event-stream"}
        with self.http.stream("POST", f"/v1/threads/{thread}/messages", json=body, headers=headers) as r:
            assert r.status_code == 200, r.read()
            return parse_sse(r.iter_lines())

    def thread(self, thread: str) -> dict:
        response = self.http.get(f"/v1/threads/{thread}")
        assert response.status_code == 200, response.text
        return response.json()


def expected_reply(contents: list[str]) -> str:
    """What the built-in model answers to ``contents[-1]`` after ``contents[:-1]``."""
    return builtin_reply(contents, (len(contents) + 1) // 2)


def assert_whole(messages: list[dict], turns: int) -> None:
    """Human and AI alternate, ``turns`` turns, every reply computed from the full history."""
    assert [m["role"] for m in messages] == ["human", "ai"] * turns, messages
    contents: list[str] = []
    for m in messages:
        contents.append(m["content"])
        if m["role"] == "ai":
            assert m["content"] == expected_reply(contents[:-1]), m
    ids = [m["id"] for m in messages]
    assert len(ids) == len(set(ids))


def metric(base_url: str, name: str, labels: str = "") -> float:
    """One sample from the replica's /metrics (0 when absent)."""
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in httpx.get(f"{base_url}/metrics", timeout=5).text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# Raw HTTP/1.1 over a socket, for what httpx cannot send: headers without their body, a body
# cut short, a request the server answers before reading it (and then closes).
def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=15)


def read_response(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection (or 15 s pass)."""
    chunks = []
    sock.settimeout(15)
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except (ConnectionResetError, TimeoutError):
        pass
    return b"".join(chunks)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else 0
